// skippy generate: text generation from a prompt.
#include "base/log.h"
#include "chat/chat.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/pipeline.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

namespace skippy::cli {
namespace {

struct generate_options {
    std::string model_path;
    std::string prompt;
    int32_t     n_predict = 128;
    bool        greedy = false;
    float       temperature = 0.8f;
    int32_t     top_k = 40;
    float       top_p = 0.95f;
    float       min_p = 0.05f;
    float       repeat_penalty = 1.0f;
    float       presence_penalty = 0.0f;
    float       frequency_penalty = 0.0f;
    int32_t     repeat_last_n = 64;
    int64_t     seed = -1;
    int32_t     batch_size = 512;
    std::string prompts_file;
    bool        json = false;
    bool        chat = false;          // --chat: the prompt is a user message of a chat
    std::string chat_template;         // --chat-template FILE|NAME (implies --chat)
    runtime_flags runtime;
    chain_choice  chain;
};

// One JSON line in the shape tooling relies on (index, text, tokens, counts, timings).
std::string result_json(int64_t index, const tokenizer & vocab, const generation_result & res) {
    nlohmann::json j;
    j["index"] = index;
    j["text"] = sanitize_utf8(vocab.detokenize(res.tokens));
    j["tokens"] = res.tokens;
    j["prompt_tokens"] = res.prompt_tokens;
    j["cached_tokens"] = res.cached_tokens;
    j["kv_hit_stage_mask"] = res.cache_hit_stage_mask;        // bit i: stage i restored
    j["kv_record_stage_mask"] = res.cache_record_stage_mask;  // bit i: stage i recorded
    j["ttft_ms"] = res.ttft_ms;
    j["total_ms"] = res.total_ms;
    return j.dump();
}

result<std::vector<std::string>> read_prompts(const std::string & path) {
    std::ifstream in(path);
    if (!in) return make_error(error_code::not_found, "cannot read prompts file " + path);
    std::vector<std::string> prompts;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) prompts.push_back(line);
    }
    if (prompts.empty()) return make_error(error_code::invalid_argument, "prompts file " + path + " has no prompts");
    return prompts;
}

int run_generate(const generate_options & o) {
    auto model_path = resolve_model_path(o.model_path, o.chain);
    if (!model_path.is_ok()) return fail(model_path.error());
    auto file = load_gguf(*model_path);
    if (!file.is_ok()) return fail(file.error());
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.is_ok()) return fail(tok.error());
    const tokenizer & vocab = **tok;

    std::vector<std::string> prompts = {o.prompt};
    if (!o.prompts_file.empty()) {
        auto read = read_prompts(o.prompts_file);
        if (!read.is_ok()) return fail(read.error());
        prompts = std::move(read).value();
    }
    generation_request req;
    req.max_tokens = o.n_predict;
    req.prefill_chunk_tokens = o.batch_size;
    req.sampling.temperature = o.greedy ? 0.0f : o.temperature;
    req.sampling.top_k = o.top_k;
    req.sampling.top_p = o.top_p;
    req.sampling.min_p = o.min_p;
    req.sampling.repeat_penalty = o.repeat_penalty;
    req.sampling.presence_penalty = o.presence_penalty;
    req.sampling.frequency_penalty = o.frequency_penalty;
    req.sampling.penalty_last_n = o.repeat_last_n;
    req.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    // Before any stage is built: the check every stage would make.
    if (status st = req.sampling.validate(vocab.n_vocab()); !st.is_ok()) return fail(st);
    if (o.seed < 0 && !o.greedy) SKIPPY_LOG_INFO("seed %llu", static_cast<unsigned long long>(req.sampling.seed));
    auto pipeline = make_pipeline(*file, o.chain, o.runtime);
    if (!pipeline.is_ok()) return fail(pipeline.error());
    req.is_end_of_generation = [&](token_id id) { return vocab.is_end_of_generation(id); };
    if (!o.json) {
        req.on_token = [&](token_id id) {
            const std::string piece = vocab.token_to_piece(id);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
        };
    }
    std::optional<chat::chat_template> chat_template;
    if (o.chat || !o.chat_template.empty()) {
        auto t = o.chat_template.empty() ? chat::chat_template::of_model(**file, vocab)
                                         : chat::chat_template::from_option(o.chat_template, vocab);
        if (!t.is_ok()) return fail(t.error());
        SKIPPY_LOG_INFO("chat template: %s", t->describe().c_str());
        chat_template = std::move(t).value();
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (chat_template) {
            chat::conversation conv;
            conv.messages.push_back({"user", prompts[i], "", {}, "", ""});
            auto rendered = chat_template->render(conv);
            if (!rendered.is_ok()) return fail(rendered.error());
            req.prompt = chat::tokenize_prompt(vocab, *chat_template, rendered->text);
        } else {
            req.prompt = vocab.tokenize(prompts[i], vocab.add_bos_default(), false);
        }
        SKIPPY_LOG_DEBUG("prompt %zu: %zu tokens", i, req.prompt.size());
        auto res = run_generation(**pipeline, 0, req);
        if (!res.is_ok()) {
            if (!o.json) std::fputc('\n', stdout);
            return fail(res.error());
        }
        if (o.json) {
            std::printf("%s\n", result_json(static_cast<int64_t>(i), vocab, *res).c_str());
            std::fflush(stdout);
        } else {
            std::fputc('\n', stdout);
        }
        SKIPPY_LOG_INFO("%lld prompt tokens (%lld cached), %zu generated, ttft %.1f ms, total %.1f ms (%s)",
                        static_cast<long long>(res->prompt_tokens), static_cast<long long>(res->cached_tokens),
                        res->tokens.size(), res->ttft_ms, res->total_ms, finish_reason_name(res->finish));
        // The next prompt starts once this one's records are stored: a run of prompts
        // measures what the cache serves, not whether its worker was done yet.
        if (i + 1 < prompts.size()) (*pipeline)->wait_for_records();
    }
    return 0;
}

}  // namespace

void add_generate_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<generate_options>();
    CLI::App * cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file (default with --topology: the topology's model)")
        ->check(CLI::ExistingFile);
    auto * prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
    cmd->add_option("--prompts-file", o->prompts_file, "Run each non-empty line as a prompt, one after another in this process")
        ->check(CLI::ExistingFile)->excludes(prompt);
    add_number(cmd, "-n,--n-predict", o->n_predict, "Tokens to generate at most", 0, 1 << 20)->capture_default_str();
    cmd->add_flag("--greedy", o->greedy, "Pick the most likely token (same as --temp 0)");
    // The same bounds as the HTTP API and every stage (sampling_bounds); run_generate
    // checks the open end (top_p > 0) with sampling_config::validate.
    using b = sampling_bounds;
    add_number(cmd, "--temp", o->temperature, "Sampling temperature (0: greedy)", 0.0f, b::max_temperature)->capture_default_str();
    add_number(cmd, "--top-k", o->top_k, "Keep the k most likely tokens (0: off)", 0, b::max_top_k)->capture_default_str();
    add_number(cmd, "--top-p", o->top_p, "Nucleus sampling threshold in (0, 1] (1: off)", 0.0f, 1.0f)->capture_default_str();
    add_number(cmd, "--min-p", o->min_p, "Drop tokens below min-p x the top probability (0: off)", 0.0f, 1.0f)->capture_default_str();
    add_number(cmd, "--repeat-penalty", o->repeat_penalty, "Repetition penalty (1: off)", b::min_repeat_penalty,
               b::max_repeat_penalty)
        ->capture_default_str();
    add_number(cmd, "--presence-penalty", o->presence_penalty, "Presence penalty (0: off)", -b::max_abs_penalty,
               b::max_abs_penalty)
        ->capture_default_str();
    add_number(cmd, "--frequency-penalty", o->frequency_penalty, "Frequency penalty (0: off)", -b::max_abs_penalty,
               b::max_abs_penalty)
        ->capture_default_str();
    add_number(cmd, "--repeat-last-n", o->repeat_last_n, "Tokens the penalties look back over", 0, b::max_penalty_last_n)
        ->capture_default_str();
    add_number(cmd, "--seed", o->seed, "Sampling seed, 0 to 2^63-1 (default: random, logged)", int64_t(0), INT64_MAX);
    add_number(cmd, "-b,--batch-size", o->batch_size, "Prompt tokens per prefill chunk", 1, 1 << 16)->capture_default_str();
    cmd->add_flag("--chat", o->chat, "Send the prompt as a user message through the model's chat template");
    cmd->add_option("--chat-template", o->chat_template,
                    "With --chat: a built-in template name or a Jinja file instead of the model's (implies --chat)");
    cmd->add_flag("--json", o->json, "Print one JSON line per prompt with text, tokens and timings");
    add_runtime_flags(cmd, o->runtime, 1);
    add_chain_flags(cmd, o->chain);
    cmd->callback([&run, o, cmd] {
        if (cmd->count("--prompt") == 0 && cmd->count("--prompts-file") == 0) throw CLI::RequiredError("--prompt or --prompts-file");
        if (o->model_path.empty() && o->chain.topology_path.empty()) throw CLI::RequiredError("--model (or --topology)");
        run = [o] { return run_generate(*o); };
    });
}

}  // namespace skippy::cli
