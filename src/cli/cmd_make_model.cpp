// skippy make-model: a random-weight GGUF model of any shape.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "model/quant_mix.h"
#include "model/synthetic.h"

#include <cstdint>
#include <cstdio>

namespace skippy::cli {
namespace {

struct make_model_flags {
    std::string preset;
    std::string arch;
    int32_t     n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_vocab = 0, n_expert = 0, n_expert_used = 0;
    std::string vocab_from;
    std::string type;
    uint64_t    seed = 1;
    std::string output;
    CLI::App *  cmd = nullptr;
};

int run_make_model(const make_model_flags & f) {
    synthetic_model_options o;
    if (!f.preset.empty()) {
        auto p = synthetic_preset(f.preset);
        if (!p) return fail(make_error(error_code::invalid_argument, "unknown preset '" + f.preset + "' (tiny, bench-200m)"));
        o = *p;
    }
    auto given = [&](const char * name) { return f.cmd->count(name) > 0; };
    if (given("--arch")) o.arch = f.arch;
    if (given("--n-embd")) o.n_embd = f.n_embd;
    if (given("--n-layer")) o.n_layer = f.n_layer;
    if (given("--n-head")) o.n_head = f.n_head;
    if (given("--n-head-kv")) o.n_head_kv = f.n_head_kv;
    if (given("--n-ff")) o.n_ff = f.n_ff;
    if (given("--n-vocab")) o.n_vocab = f.n_vocab;
    if (given("--n-expert")) o.n_expert = f.n_expert;
    if (given("--n-expert-used")) o.n_expert_used = f.n_expert_used;
    if (given("--type")) o.type = f.type;
    o.seed = f.seed;
    std::shared_ptr<const gguf::file> vocab;
    if (!f.vocab_from.empty()) {
        auto v = load_gguf(f.vocab_from);
        if (!v.is_ok()) return fail(v.error());
        vocab = *v;
        o.vocab_from = vocab.get();
    }
    SKIPPY_LOG_INFO("building %s model: n_embd %d, %d layers, %d/%d heads, ffn %d, type %s", o.arch.c_str(), o.n_embd,
                    o.n_layer, o.n_head, o.n_head_kv, o.n_ff, o.type.c_str());
    auto w = build_synthetic_model(o);
    if (!w.is_ok()) return fail(w.error());
    status st = w->write_file(f.output);
    if (!st.is_ok()) return fail(st);
    SKIPPY_LOG_INFO("wrote %s", f.output.c_str());
    return 0;
}

}  // namespace

void add_make_model_command(CLI::App & app, command_runner & run) {
    auto f = std::make_shared<make_model_flags>();
    CLI::App * cmd = app.add_subcommand("make-model", "Write a random-weight GGUF model (a default model for a fresh machine)");
    f->cmd = cmd;
    cmd->add_option("--preset", f->preset, "Start from a preset: tiny (README demo) or bench-200m (benchmarks)")
        ->check(CLI::IsMember({"tiny", "bench-200m"}));
    cmd->add_option("--arch", f->arch, std::string("Architecture: ") + synthetic_arch_names())
        ->check(CLI::IsMember({"llama", "llama3", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe", "gpt-oss", "qwen35"}));
    add_number(cmd, "--n-embd", f->n_embd, "Embedding width", 1, 65536);
    add_number(cmd, "--n-layer", f->n_layer, "Transformer layers", 1, 1024);
    add_number(cmd, "--n-head", f->n_head, "Attention heads", 1, 4096);
    add_number(cmd, "--n-head-kv", f->n_head_kv, "Key/value heads", 1, 4096);
    add_number(cmd, "--n-ff", f->n_ff, "Feed-forward width (mixtures of experts: of one expert)", 1, 1 << 20);
    add_number(cmd, "--n-expert", f->n_expert, "qwen3moe, gpt-oss: experts per layer (default 8)", 1, 4096);
    add_number(cmd, "--n-expert-used", f->n_expert_used, "qwen3moe, gpt-oss: experts per token (default 2)", 1, 4096);
    auto * nv = add_number(cmd, "--n-vocab", f->n_vocab, "Size of the generated SPM vocabulary", 267, 1 << 22);
    cmd->add_option("--vocab-from", f->vocab_from, "Copy the vocabulary of this GGUF file")->check(CLI::ExistingFile)->excludes(nv);
    cmd->add_option("--type", f->type, "Weight type: " + quant_mix_names() + " (case-insensitive)");
    add_number(cmd, "--seed", f->seed, "Random seed", 0, UINT64_MAX)->capture_default_str();
    cmd->add_option("-o,--output", f->output, "Output .gguf path")->required();
    cmd->callback([&run, f] {
        if (f->preset.empty()) {
            for (const char * flag : {"--arch", "--n-embd", "--n-layer", "--n-head", "--n-head-kv", "--n-ff", "--type"}) {
                if (f->cmd->count(flag) == 0) throw CLI::RequiredError(std::string(flag) + " (or --preset)");
            }
            if (f->cmd->count("--n-vocab") == 0 && f->cmd->count("--vocab-from") == 0) {
                throw CLI::RequiredError("--n-vocab or --vocab-from");
            }
        }
        run = [f] { return run_make_model(*f); };
    });
}

}  // namespace skippy::cli
