// skippy eval-logits: logits of a token sequence evaluated as one batch.
#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/stage.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace skippy::cli {
namespace {

struct eval_options {
    std::string model_path;
    std::string tokens;
    int32_t     top = 8;
    int32_t     threads = 0;
    int32_t     batch_size = 0;  // 0: one batch
    std::string kv_type = "f16";
    bool        json = false;
};

result<std::vector<token_id>> parse_token_list(const std::string & text) {
    std::vector<token_id> ids;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        std::string_view item(text.data() + start, end - start);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        token_id v = 0;
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
            return make_error(error_code::invalid_argument, "--tokens: '" + std::string(item) + "' is not a token id");
        }
        ids.push_back(v);
        start = end + 1;
    }
    return ids;
}

int run_eval_logits(const eval_options & o) {
    auto ids = parse_token_list(o.tokens);
    if (!ids.is_ok()) return fail(ids.error());
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    stage_options so;
    so.n_threads = resolve_threads(o.threads);
    so.ctx_size = static_cast<int32_t>(ids->size());
    so.kv_type = o.kv_type == "f32" ? kv_dtype::f32 : kv_dtype::f16;
    auto st = stage::load(*file, so);
    if (!st.is_ok()) return fail(st.error());
    stage & s = **st;

    const int64_t n = static_cast<int64_t>(ids->size());
    const int64_t n_embd = s.hparams().n_embd, n_vocab = s.hparams().n_vocab;
    const int64_t chunk = o.batch_size > 0 ? o.batch_size : n;
    std::vector<float> hidden(static_cast<size_t>(n * n_embd));
    for (int64_t pos = 0; pos < n; pos += chunk) {
        const int64_t m = std::min(chunk, n - pos);
        status fst = s.forward(0, pos, std::span<const token_id>(*ids).subspan(static_cast<size_t>(pos), static_cast<size_t>(m)), {},
                               m, std::span<float>(hidden).subspan(static_cast<size_t>(pos * n_embd), static_cast<size_t>(m * n_embd)));
        if (!fst.is_ok()) return fail(fst);
    }
    std::vector<float> logits(static_cast<size_t>(n * n_vocab));
    s.logits(hidden, n, logits);

    const int64_t k = std::min<int64_t>(o.top, n_vocab);
    nlohmann::json positions = nlohmann::json::array();
    std::vector<int32_t> order(static_cast<size_t>(n_vocab));
    for (int64_t pos = 0; pos < n; ++pos) {
        const float * row = logits.data() + pos * n_vocab;
        for (int32_t i = 0; i < n_vocab; ++i) order[static_cast<size_t>(i)] = i;
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return row[a] > row[b] || (row[a] == row[b] && a < b);
        });
        nlohmann::json top = nlohmann::json::array();
        for (int64_t i = 0; i < k; ++i) top.push_back({order[static_cast<size_t>(i)], row[order[static_cast<size_t>(i)]]});
        positions.push_back({{"pos", pos}, {"top", top}});
    }
    if (o.json) {
        std::printf("%s\n", nlohmann::json{{"positions", positions}}.dump().c_str());
    } else {
        for (const auto & p : positions) {
            std::printf("pos %lld:", static_cast<long long>(p["pos"].get<int64_t>()));
            for (const auto & t : p["top"]) std::printf(" %d=%.5f", t[0].get<int32_t>(), t[1].get<float>());
            std::printf("\n");
        }
    }
    return 0;
}

}  // namespace

void add_eval_logits_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<eval_options>();
    CLI::App * cmd = app.add_subcommand("eval-logits", "Evaluate token ids as one batch and print the top logits per position");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, evaluated as given (nothing added)")->required();
    add_number(cmd, "--top", o->top, "Logits to print per position", 1, 1 << 24)->capture_default_str();
    add_number(cmd, "-t,--threads", o->threads, "Threads (default: physical cores)", 1, 1024);
    add_kernels_flag(cmd);
    add_number(cmd, "-b,--batch-size", o->batch_size, "Evaluate in chunks of this many tokens (default: one batch)", 1, 1 << 24);
    cmd->add_option("--kv-type", o->kv_type, "KV cache element type")->check(CLI::IsMember({"f16", "f32"}))->capture_default_str();
    cmd->add_flag("--json", o->json, "Print {\"positions\": [{\"pos\", \"top\": [[token, logit], ...]}]}");
    cmd->callback([&run, o] { run = [o] { return run_eval_logits(*o); }; });
}

}  // namespace skippy::cli
