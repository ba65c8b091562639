// skippy bench: prefill and decode throughput of a model (or a chain of stages),
// with the machine's read bandwidth measured in the same run.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/read_bandwidth.h"
#include "runtime/pipeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

namespace skippy::cli {
namespace {

struct bench_options {
    std::string model_path;
    int32_t     threads = 0;
    int32_t     prompt_tokens = 512;
    int32_t     gen_tokens = 128;
    int32_t     repeat = 3;
    int32_t     batch_size = 512;
    int32_t     stages = 1;
    std::string kv_type = "f16";
    bool        json = false;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t peak_rss_bytes() {
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        if (key == "VmHWM:") {
            int64_t kb = 0;
            status >> kb;
            return kb * 1024;
        }
        status.ignore(1 << 20, '\n');
    }
    return 0;
}

// The name users know the file by (llama.cpp's file types), else the type holding
// the most bytes.
std::string weight_type_name(const gguf::file & f) {
    static const std::map<int64_t, const char *> file_types = {
        {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
        {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
        {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {21, "Q2_K_S"}, {25, "IQ4_NL"},
        {30, "IQ4_XS"}, {32, "BF16"},   {38, "MXFP4_MOE"}};
    if (auto ft = f.get_int("general.file_type")) {
        if (auto it = file_types.find(*ft); it != file_types.end()) return it->second;
    }
    std::map<tensor_type, size_t> bytes;
    for (const auto & t : f.tensors()) bytes[t.type] += t.n_bytes;
    auto best = std::max_element(bytes.begin(), bytes.end(), [](auto & a, auto & b) { return a.second < b.second; });
    return best == bytes.end() ? "?" : std::string(tensor_type_name(best->first));
}

// Weight bytes one decode step reads: every layer matrix and the output head (the
// embedding lookup reads one row). Of a mixture of experts' expert tensors
// (blk.N.ffn_*_exps.*), a token reads only its expert_used_count of expert_count experts.
int64_t decode_weight_bytes(const gguf::file & f) {
    int64_t total = 0;
    const bool tied = f.find_tensor("output.weight") == nullptr;
    const std::string arch = f.get_string("general.architecture").value_or("");
    const int64_t n_expert = f.get_int(arch + ".expert_count").value_or(0);
    const int64_t n_used = f.get_int(arch + ".expert_used_count").value_or(0);
    for (const auto & t : f.tensors()) {
        if (t.name == "token_embd.weight" && !tied) continue;
        const bool experts = t.name.find("_exps.") != std::string::npos && n_expert > 0 && n_used > 0 && n_used <= n_expert;
        total += experts ? static_cast<int64_t>(t.n_bytes / static_cast<size_t>(n_expert) * static_cast<size_t>(n_used))
                         : static_cast<int64_t>(t.n_bytes);
    }
    return total;
}

int run_bench(const bench_options & o) {
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    const int32_t n_threads = resolve_threads(o.threads);
    runtime_flags rf;
    rf.threads = n_threads;
    rf.ctx_size = o.prompt_tokens + o.gen_tokens + 1;
    rf.kv_type = o.kv_type;
    rf.kv_cache = "off";  // repeats of one prompt must compute it every time
    chain_choice chain;
    chain.stages = o.stages;
    auto made = make_pipeline(*file, chain, rf);
    if (!made.is_ok()) return fail(made.error());
    pipeline_i & pipeline = **made;

    std::vector<token_id> prompt(static_cast<size_t>(o.prompt_tokens));
    uint32_t x = 2463534242u;
    for (auto & t : prompt) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        t = static_cast<token_id>(x % static_cast<uint32_t>(pipeline.n_vocab()));
    }
    sampling_config greedy;
    greedy.temperature = 0;

    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    std::vector<double> prefill_tps, decode_tps, ttft_ms;
    for (int32_t r = 0; r < o.repeat; ++r) {
        status bst = pipeline.begin(0, greedy, prompt, "");
        if (!bst.is_ok()) return fail(bst);
        // As a request runs: prefill all but the last prompt token, whose decode yields
        // the first new token. Prefill streams through a chain, so it is over only when
        // that first token is back: the prompt's time is the time to first token.
        const int32_t n_prefill = o.prompt_tokens - 1;
        const auto t0 = clock::now();
        for (int32_t pos = 0; pos < n_prefill; pos += o.batch_size) {
            const int32_t n = std::min(o.batch_size, n_prefill - pos);
            status pst = pipeline.prefill(0, pos, std::span<const token_id>(prompt).subspan(static_cast<size_t>(pos), static_cast<size_t>(n)));
            if (!pst.is_ok()) return fail(pst);
        }
        token_id current = prompt.back();
        clock::time_point t_first = t0;
        for (int32_t i = 0; i < std::max(o.gen_tokens, 1); ++i) {
            auto next = pipeline.decode(0, n_prefill + i, current);
            if (!next.is_ok()) return fail(next.error());
            if (i == 0) t_first = clock::now();
            current = *next;
        }
        const auto t2 = clock::now();
        pipeline.end(0);
        prefill_tps.push_back(o.prompt_tokens / seconds(t0, t_first));
        // The first generated token is part of the time to first token; the rest decode.
        decode_tps.push_back(o.gen_tokens > 1 ? (o.gen_tokens - 1) / seconds(t_first, t2) : 0.0);
        ttft_ms.push_back(1000.0 * seconds(t0, t_first));
        SKIPPY_LOG_INFO("repeat %d: prefill %.1f tok/s, decode %.1f tok/s", r + 1, prefill_tps.back(), decode_tps.back());
    }
    const int64_t rss = peak_rss_bytes();  // before the bandwidth buffer inflates it
    const double bandwidth = measure_read_bandwidth(n_threads);
    const double decode = median(decode_tps);
    const int64_t bytes_per_token = decode_weight_bytes(**file);

    nlohmann::json j;
    j["model"] = o.model_path;
    j["weight_type"] = weight_type_name(**file);
    j["threads"] = n_threads;
    j["stages"] = o.stages;
    j["prompt_tokens"] = o.prompt_tokens;
    j["gen_tokens"] = o.gen_tokens;
    j["prefill_tokens_per_s"] = median(prefill_tps);
    j["decode_tokens_per_s"] = decode;
    j["ttft_ms"] = median(ttft_ms);
    j["peak_rss_bytes"] = rss;
    j["read_bandwidth_bytes_per_s"] = bandwidth;
    j["decode_bandwidth_ratio"] = bandwidth > 0 ? decode * static_cast<double>(bytes_per_token) / bandwidth : 0.0;
    if (o.json) {
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("%s\n", j.dump(2).c_str());
    }
    return 0;
}

}  // namespace

void add_bench_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<bench_options>();
    CLI::App * cmd = app.add_subcommand("bench", "Measure prefill and decode speed (JSON)");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    add_number(cmd, "-t,--threads", o->threads, "Threads (default: physical cores)", 1, 1024);
    add_number(cmd, "--prompt-tokens", o->prompt_tokens, "Prompt tokens to prefill", 1, 1 << 20)->capture_default_str();
    add_number(cmd, "--gen-tokens", o->gen_tokens, "Tokens to decode", 0, 1 << 20)->capture_default_str();
    add_number(cmd, "--repeat", o->repeat, "Repetitions (medians are reported)", 1, 1000)->capture_default_str();
    add_number(cmd, "-b,--batch-size", o->batch_size, "Prompt tokens per prefill chunk", 1, 1 << 16)->capture_default_str();
    add_number(cmd, "--stages", o->stages, "Stages in the chain", 1, 64)->capture_default_str();
    cmd->add_option("--kv-type", o->kv_type, "KV cache element type")->check(CLI::IsMember({"f16", "f32"}))->capture_default_str();
    cmd->add_flag("--json", o->json, "Print one JSON object on one line");
    cmd->callback([&run, o] { run = [o] { return run_bench(*o); }; });
}

}  // namespace skippy::cli
