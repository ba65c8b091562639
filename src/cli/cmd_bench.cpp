// skippy bench: prefill and decode throughput of a model (or a chain of stages),
// with the machine's read bandwidth measured in the same run. With --concurrency N,
// N streams at once through N lanes (interleaved with single-stream rounds, so every
// ratio compares figures of one run); with --fairness-prompt-tokens T, the inter-token
// latency of the running streams while a T-token prompt is prefilled beside them.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/read_bandwidth.h"
#include "kernels/kernels.h"
#include "runtime/pipeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace skippy::cli {
namespace {

struct bench_options {
    std::string model_path;
    int32_t     threads = 0;
    int32_t     prompt_tokens = 512;
    int32_t     gen_tokens = 128;
    int32_t     repeat = 3;
    int32_t     batch_size = 512;
    chain_choice chain;
    std::string kv_type = "f16";
    int32_t     concurrency = 1;
    int32_t     fairness_prompt_tokens = 0;
    int32_t     step_tokens = 0;  // 0: the scheduler's default
    int32_t     micro_batches = 0;  // 0: the chain's default
    bool        json = false;
};

using bench_clock = std::chrono::steady_clock;

double seconds_between(bench_clock::time_point a, bench_clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

std::vector<token_id> bench_prompt(int32_t n, uint32_t seed, int32_t n_vocab) {
    std::vector<token_id> prompt(static_cast<size_t>(n));
    uint32_t x = 2463534242u ^ (seed * 2654435761u);
    for (auto & t : prompt) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        t = static_cast<token_id>(x % static_cast<uint32_t>(n_vocab));
    }
    return prompt;
}

// One stream: when it started and when each of its tokens arrived (for a stream of
// several requests, request_starts holds the index of each request's first token and
// request_begins when each request was made).
struct stream_run {
    bench_clock::time_point              start;
    std::vector<bench_clock::time_point> tokens;
    std::vector<size_t>                  request_starts;
    std::vector<bench_clock::time_point> request_begins;
    double first_ms() const { return tokens.empty() ? 0 : 1000.0 * seconds_between(start, tokens.front()); }
    double decode_tps() const {
        return tokens.size() < 2 ? 0 : static_cast<double>(tokens.size() - 1) / seconds_between(tokens.front(), tokens.back());
    }
    // Between two requests is a first token, not an inter-token gap.
    bool starts_request(size_t i) const { return std::binary_search(request_starts.begin(), request_starts.end(), i); }  // ascending
    std::vector<double> gaps_ms() const {
        std::vector<double> g;
        for (size_t i = 1; i < tokens.size(); ++i) {
            if (!starts_request(i)) g.push_back(1000.0 * seconds_between(tokens[i - 1], tokens[i]));
        }
        return g;
    }
    // Time to first token of the requests made in [from, to) that got one (all but
    // the stream's first request, whose prompts all arrive at once).
    std::vector<double> later_ttfts_ms(bench_clock::time_point from, bench_clock::time_point to) const {
        std::vector<double> t;
        for (size_t k = 1; k < request_begins.size() && k < request_starts.size(); ++k) {
            if (request_begins[k] < from || !(request_begins[k] < to) || request_starts[k] >= tokens.size()) continue;
            t.push_back(1000.0 * seconds_between(request_begins[k], tokens[request_starts[k]]));
        }
        return t;
    }
};

// Streams on lanes [0, prompts.size()) at once, each generating gen_tokens (greedy, so
// every run computes the same tokens). With keep_going, each stream runs such requests
// one after another (prompt i again) until keep_going(i), asked after every token,
// says stop: running streams whose contexts stay in the range of one request, as a
// server's chats do. REQUIRES: gen_tokens >= 1 with keep_going.
result<std::vector<stream_run>> run_streams(pipeline_i & p, const std::vector<std::vector<token_id>> & prompts, int32_t gen_tokens,
                                            int32_t chunk, const std::function<bool(size_t)> & keep_going = {}) {
    std::vector<stream_run> runs(prompts.size());
    std::vector<status> errors(prompts.size());
    // A failed stream stops the others: with keep_going they would run until told to,
    // and what tells them may wait on the failed one.
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
        threads.emplace_back([&, i] {
            runs[i].start = bench_clock::now();
            bool more = static_cast<bool>(keep_going);
            do {
                generation_request req;
                req.prompt = prompts[i];
                req.max_tokens = gen_tokens;
                req.prefill_chunk_tokens = chunk;
                req.sampling.temperature = 0;
                req.on_token = [&, i](token_id) {
                    runs[i].tokens.push_back(bench_clock::now());
                    if (keep_going) more = keep_going(i) && !failed.load();
                    return !keep_going || more;
                };
                runs[i].request_starts.push_back(runs[i].tokens.size());
                runs[i].request_begins.push_back(bench_clock::now());
                auto res = run_generation(p, static_cast<int32_t>(i), req);
                if (!res.is_ok()) {
                    errors[i] = res.error();
                    failed = true;
                    return;
                }
            } while (more && !failed.load());
        });
    }
    for (auto & t : threads) t.join();
    for (const auto & e : errors) SKIPPY_TRY(e);
    return runs;
}

// Decode tokens per second of all streams together while every one of them decodes:
// the tokens that arrived between the last stream's first token and the first
// stream's last, over that time. None when there is no such time (a stream ended
// before another's first token: too few --gen-tokens for the streams to overlap).
std::optional<double> aggregate_decode_tps(const std::vector<stream_run> & runs) {
    bench_clock::time_point from = bench_clock::time_point::min(), to = bench_clock::time_point::max();
    for (const auto & r : runs) {
        if (r.tokens.empty()) return std::nullopt;
        from = std::max(from, r.tokens.front());
        to = std::min(to, r.tokens.back());
    }
    if (!(from < to)) return std::nullopt;
    int64_t n = 0;
    for (const auto & r : runs) {
        for (const auto & t : r.tokens) n += (t > from && t <= to) ? 1 : 0;
    }
    return static_cast<double>(n) / seconds_between(from, to);
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

int run_concurrent(const bench_options & o);

int run_bench(const bench_options & o) {
    if (o.concurrency > 1 || o.fairness_prompt_tokens > 0) return run_concurrent(o);
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    const int32_t n_threads = resolve_threads(o.threads);
    runtime_flags rf;
    rf.threads = n_threads;
    rf.ctx_size = o.prompt_tokens + o.gen_tokens + 1;
    rf.kv_type = o.kv_type;
    rf.kv_cache = "off";  // repeats of one prompt must compute it every time
    auto made = make_pipeline(*file, o.chain, rf);
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
    j["kernels"] = kernels::active_implementation();
    j["stages"] = (*made)->n_stages();
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


// --concurrency N: rounds of one stream, then N streams at once (interleaved, so that
// the ratios compare figures of the same run); --fairness-prompt-tokens T: the
// inter-token latency of N running streams while a T-token prompt is prefilled beside
// them, against the same streams without it.
int run_concurrent(const bench_options & o) {
    if (o.fairness_prompt_tokens > 0 && o.gen_tokens < 2) {
        return fail(make_error(error_code::invalid_argument, "--fairness-prompt-tokens needs --gen-tokens 2 or more (the streams' gaps)"));
    }
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    const int32_t n_threads = resolve_threads(o.threads);
    const int32_t n = o.concurrency;
    runtime_flags rf;
    rf.threads = n_threads;
    rf.ctx_size = std::max(o.prompt_tokens + o.gen_tokens, o.fairness_prompt_tokens + 1) + 1;
    rf.lanes = n + (o.fairness_prompt_tokens > 0 ? 1 : 0);
    rf.kv_type = o.kv_type;
    rf.kv_cache = "off";
    auto co = to_chain_options(rf);
    if (!co.is_ok()) return fail(co.error());
    if (o.step_tokens > 0) co->schedule.step_tokens = o.step_tokens;
    if (o.micro_batches > 0) co->schedule.micro_batches = o.micro_batches;
    auto made = make_pipeline(*file, o.chain, rf, *co);
    if (!made.is_ok()) return fail(made.error());
    transport::chain_pipeline & pipeline = **made;
    const int32_t n_vocab = pipeline.n_vocab();
    // Stage 0's steps (lanes per step) so far: the concurrent rounds' share is the difference.
    const auto stage0_steps = [&pipeline] {
        const auto snaps = pipeline.stage_snapshots();
        return snaps.empty() || !snaps[0].steps ? telemetry::histogram_snapshot{} : snaps[0].steps->lanes;
    };
    double concurrent_step_lanes = 0;
    uint64_t concurrent_steps = 0;

    nlohmann::json j;
    j["model"] = o.model_path;
    j["weight_type"] = weight_type_name(**file);
    j["threads"] = n_threads;
    j["kernels"] = kernels::active_implementation();
    j["stages"] = pipeline.n_stages();
    j["concurrency"] = n;
    j["micro_batches"] = pipeline.micro_batches();
    j["prompt_tokens"] = o.prompt_tokens;
    j["gen_tokens"] = o.gen_tokens;
    std::vector<double> single_tps, prefill_tps, ttft_ms, aggregate_tps, vs_single, vs_prefill;
    int32_t rounds_without_overlap = 0;
    nlohmann::json per_stream = nlohmann::json::array();
    for (int32_t r = 0; r < o.repeat && n > 1; ++r) {
        const auto one = run_streams(pipeline, {bench_prompt(o.prompt_tokens, 1000u + static_cast<uint32_t>(r), n_vocab)}, o.gen_tokens,
                                     o.batch_size);
        if (!one.is_ok()) return fail(one.error());
        single_tps.push_back((*one)[0].decode_tps());
        ttft_ms.push_back((*one)[0].first_ms());
        prefill_tps.push_back(o.prompt_tokens / std::max(1e-9, (*one)[0].first_ms() / 1000.0));
        std::vector<std::vector<token_id>> prompts;
        for (int32_t i = 0; i < n; ++i) prompts.push_back(bench_prompt(o.prompt_tokens, 2000u + static_cast<uint32_t>(r * n + i), n_vocab));
        const telemetry::histogram_snapshot before = stage0_steps();
        const auto many = run_streams(pipeline, prompts, o.gen_tokens, o.batch_size);
        if (!many.is_ok()) return fail(many.error());
        const telemetry::histogram_snapshot after = stage0_steps();
        concurrent_step_lanes += after.sum - before.sum;
        concurrent_steps += after.count - before.count;
        const auto aggregate = aggregate_decode_tps(*many);
        if (aggregate) {
            aggregate_tps.push_back(*aggregate);
            vs_single.push_back(*aggregate / std::max(1e-9, single_tps.back()));
            vs_prefill.push_back(*aggregate / std::max(1e-9, prefill_tps.back()));
        } else {
            ++rounds_without_overlap;
        }
        per_stream = nlohmann::json::array();
        for (const auto & s : *many) {
            per_stream.push_back({{"decode_tokens_per_s", s.decode_tps()},
                                  {"ttft_ms", s.first_ms()},
                                  {"itl_p50_ms", percentile(s.gaps_ms(), 0.5)},
                                  {"itl_p99_ms", percentile(s.gaps_ms(), 0.99)}});
        }
        SKIPPY_LOG_INFO("round %d: single %.1f tok/s, prefill %.1f tok/s, %d streams %.1f tok/s", r + 1, single_tps.back(),
                        prefill_tps.back(), n, aggregate ? *aggregate : 0.0);
    }
    if (n > 1) {
        j["single_decode_tokens_per_s"] = median(single_tps);
        j["single_ttft_ms"] = median(ttft_ms);
        j["prefill_tokens_per_s"] = median(prefill_tps);
        // Rounds whose streams never all decoded at once have no aggregate: the median
        // is over the others, and null (with a warning) when there are none.
        const auto median_or_null = [](const std::vector<double> & v) { return v.empty() ? nlohmann::json() : nlohmann::json(median(v)); };
        j["aggregate_decode_tokens_per_s"] = median_or_null(aggregate_tps);
        j["aggregate_over_single"] = median_or_null(vs_single);
        j["aggregate_over_prefill"] = median_or_null(vs_prefill);
        j["aggregate_rounds"] = static_cast<int32_t>(aggregate_tps.size());
        // Prompt chunks count as steps too; with micro_batches m no step holds more than
        // ceil(n / m) decoding lanes.
        j["concurrent_step_lanes_mean"] =
            concurrent_steps > 0 ? nlohmann::json(concurrent_step_lanes / static_cast<double>(concurrent_steps)) : nlohmann::json();
        if (rounds_without_overlap > 0) {
            SKIPPY_LOG_WARN("%d of %d rounds had no time when all %d streams decoded at once (no aggregate for them): raise --gen-tokens",
                            rounds_without_overlap, o.repeat, n);
        }
        j["streams"] = per_stream;  // the last round's
    }

    if (o.fairness_prompt_tokens > 0) {
        std::vector<std::vector<token_id>> prompts;
        for (int32_t i = 0; i < n; ++i) prompts.push_back(bench_prompt(o.prompt_tokens, 3000u + static_cast<uint32_t>(i), n_vocab));
        // Without the long prompt.
        const auto quiet = run_streams(pipeline, prompts, o.gen_tokens, o.batch_size);
        if (!quiet.is_ok()) return fail(quiet.error());
        std::vector<double> quiet_gaps;
        for (const auto & s : *quiet) {
            const auto g = s.gaps_ms();
            quiet_gaps.insert(quiet_gaps.end(), g.begin(), g.end());
        }
        // With it: once every stream is into its second request, the long prompt arrives on the
        // last lane; the streams run on until its first token is back.
        std::atomic<int32_t> warm{0};
        std::atomic<bool> long_done{false};
        bench_clock::time_point long_start{}, long_first{};
        std::mutex m;
        std::condition_variable cv;
        std::vector<int32_t> produced(static_cast<size_t>(n), 0);
        std::thread long_prompt([&] {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [&] { return warm.load() >= n; });
            lock.unlock();
            generation_request req;
            req.prompt = bench_prompt(o.fairness_prompt_tokens, 4000u, n_vocab);
            req.max_tokens = 1;
            req.prefill_chunk_tokens = o.batch_size;
            req.sampling.temperature = 0;
            long_start = bench_clock::now();
            auto res = run_generation(pipeline, n, req);
            long_first = bench_clock::now();
            long_done = true;
            if (!res.is_ok()) SKIPPY_LOG_WARN("the long prompt failed: %s", res.error().to_string().c_str());
        });
        // The streams run requests like the quiet ones (gen_tokens each) one after
        // another, so that their own contexts stay in the same range: a stream whose
        // context grew by thousands of tokens during the long prompt would be slower
        // without it too.
        const auto busy = run_streams(pipeline, prompts, o.gen_tokens, o.batch_size, [&](size_t i) {
            // Warm at the first token of a stream's second request: the long prompt then
            // arrives while the streams are mid-request, not at a request boundary whose gap
            // (a new prompt's prefill) is not counted.
            if (++produced[i] == o.gen_tokens + 1) {
                {
                    std::lock_guard<std::mutex> lock(m);
                    ++warm;
                }
                cv.notify_all();
            }
            return !long_done.load();
        });
        {
            std::lock_guard<std::mutex> lock(m);
            warm = n;  // a stream that ended early must not leave the long prompt waiting
        }
        cv.notify_all();
        long_prompt.join();
        if (!busy.is_ok()) return fail(busy.error());
        std::vector<double> busy_gaps;
        for (const auto & s : *busy) {
            for (size_t i = 1; i < s.tokens.size(); ++i) {
                if (s.starts_request(i)) continue;
                if (s.tokens[i] > long_start && s.tokens[i - 1] < long_first) busy_gaps.push_back(1000.0 * seconds_between(s.tokens[i - 1], s.tokens[i]));
            }
        }
        // The streams' later requests: their prompts' time to first token before the long
        // prompt and while it runs (a short prompt beside it must not wait for it).
        std::vector<double> ttft_before, ttft_during;
        for (const auto & s : *busy) {
            const auto b = s.later_ttfts_ms(bench_clock::time_point::min(), long_start);
            const auto d = s.later_ttfts_ms(long_start, long_first);
            ttft_before.insert(ttft_before.end(), b.begin(), b.end());
            ttft_during.insert(ttft_during.end(), d.begin(), d.end());
        }
        const auto percentile_or_null = [](const std::vector<double> & v, double q) {
            return v.empty() ? nlohmann::json() : nlohmann::json(percentile(v, q));
        };
        const double median_quiet = percentile(quiet_gaps, 0.5);
        const double p99_busy = percentile(busy_gaps, 0.99);
        j["fairness"] = {{"long_prompt_tokens", o.fairness_prompt_tokens},
                         {"long_prompt_ms", 1000.0 * seconds_between(long_start, long_first)},
                         {"itl_median_ms_without", median_quiet},
                         {"itl_median_ms_during", percentile(busy_gaps, 0.5)},
                         {"itl_p99_ms_during", p99_busy},
                         {"itl_samples_during", busy_gaps.size()},
                         {"ttft_median_ms_before", percentile_or_null(ttft_before, 0.5)},
                         {"ttft_median_ms_during", percentile_or_null(ttft_during, 0.5)},
                         {"ttft_p99_ms_during", percentile_or_null(ttft_during, 0.99)},
                         {"ttft_samples_during", ttft_during.size()},
                         {"p99_during_over_median_without", p99_busy / std::max(1e-9, median_quiet)}};
    }
    std::printf("%s\n", o.json ? j.dump().c_str() : j.dump(2).c_str());
    return 0;
}

}  // namespace

void add_bench_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<bench_options>();
    CLI::App * cmd = app.add_subcommand("bench", "Measure prefill and decode speed (JSON)");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    add_number(cmd, "-t,--threads", o->threads, "Threads (default: physical cores)", 1, 1024);
    add_kernels_flag(cmd);
    add_number(cmd, "--prompt-tokens", o->prompt_tokens, "Prompt tokens to prefill", 1, 1 << 20)->capture_default_str();
    add_number(cmd, "--gen-tokens", o->gen_tokens, "Tokens to decode", 0, 1 << 20)->capture_default_str();
    add_number(cmd, "--repeat", o->repeat, "Repetitions (medians are reported)", 1, 1000)->capture_default_str();
    add_number(cmd, "-b,--batch-size", o->batch_size, "Prompt tokens per prefill chunk", 1, 1 << 16)->capture_default_str();
    add_chain_flags(cmd, o->chain);
    add_number(cmd, "--concurrency", o->concurrency, "Streams at once (one lane each), rounds interleaved with single streams", 1, 1024)
        ->capture_default_str();
    add_number(cmd, "--fairness-prompt-tokens", o->fairness_prompt_tokens,
               "Also measure the streams' inter-token latency while a prompt of this many tokens is prefilled (0: off)", 0, 1 << 20)
        ->capture_default_str();
    add_number(cmd, "--step-tokens", o->step_tokens, "Tokens per scheduler step while lanes decode (0: the default)", 0, 1 << 20)
        ->capture_default_str();
    add_number(cmd, "--micro-batches", o->micro_batches,
               "With --concurrency: steps in flight the decoding lanes are spread over (0: one per stage of a --topology chain, "
               "else 1); on one stage, m runs the steps each stage of an m-stage chain runs (n/m lanes)",
               0, 64)
        ->capture_default_str();
    cmd->add_option("--kv-type", o->kv_type, "KV cache element type")->check(CLI::IsMember({"f16", "f32"}))->capture_default_str();
    cmd->add_flag("--json", o->json, "Print one JSON object on one line");
    cmd->callback([&run, o] { run = [o] { return run_bench(*o); }; });
}

}  // namespace skippy::cli
