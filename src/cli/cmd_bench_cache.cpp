// skippy bench-cache: what the prefix cache saves, measured on a chain (JSON).
//
// Scenarios (DESIGN §6 speed targets):
//   shared-prefix  a long shared prefix plus short suffixes: cold TTFT, warm TTFT, the
//                  cost of prefilling the suffix after the prefix plus one decode (the
//                  floor a warm request can reach: it attends over the prefix too), and
//                  the TTFT of a cold prompt of the suffix's length, all in one run;
//   interleaved    P prefixes x Q short questions, interleaved: prompt tokens computed
//                  with the cache vs without;
//   no-hit         distinct prompts, so the cache never hits: TTFT with the cache on vs
//                  off (what lookups and records cost when they never pay);
//   restart        a prefix cached, the pipeline torn down and built again over the same
//                  --kv-cache-disk directory (what a restarted process sees): TTFT of
//                  the first request restored from disk vs a warm in-memory hit and a
//                  cold run; with --kv-cache-redis, a fresh pipeline that only shares
//                  the Redis server (another process's view) vs the same warm hit.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

namespace skippy::cli {
namespace {

struct bench_cache_options {
    std::string model_path;
    std::string scenario = "shared-prefix";
    int32_t     stages = 2;
    int32_t     threads = 0;
    int32_t     prefix_tokens = 1000;
    int32_t     suffix_tokens = 16;
    int32_t     prefixes = 6;
    int32_t     questions = 4;
    int32_t     repeat = 3;
    int32_t     check_tokens = 8;  // shared-prefix: tokens the warm request must share with a cold run
    int32_t     batch_size = 512;
    std::string kv_cache = "lookup-record";
    int64_t     kv_cache_checkpoint_tokens = 64;  // recurrent layers: snapshot spacing
    std::string kv_cache_disk;   // restart: parent of the scenario's directory
    std::string kv_cache_redis;  // restart: optional shared server
    bool        json = false;
};

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Deterministic token ids away from the special ones.
std::vector<token_id> random_tokens(int32_t n, uint32_t seed, int32_t n_vocab) {
    std::vector<token_id> out(static_cast<size_t>(n));
    uint32_t x = seed * 2654435761u + 1;
    for (auto & t : out) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        t = static_cast<token_id>(3 + x % static_cast<uint32_t>(n_vocab - 3));
    }
    return out;
}

std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id> & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

result<generation_result> ttft_run(pipeline_i & p, const std::vector<token_id> & prompt, int32_t chunk, int32_t max_tokens = 1) {
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = max_tokens;
    req.prefill_chunk_tokens = chunk;
    req.sampling.temperature = 0;
    return run_generation(p, 0, req);
}

// The pipeline under test; its context (and so the pool room for cached prefixes) is
// the serving default unless a prompt needs more.
result<std::unique_ptr<transport::chain_pipeline>> make(std::shared_ptr<const gguf::file> file, const bench_cache_options & o,
                                                        const std::string & mode, int32_t min_ctx, const std::string & disk = "",
                                                        const std::string & redis = "") {
    runtime_flags rf;
    rf.threads = o.threads;
    rf.ctx_size = std::max(min_ctx, 4096);
    rf.kv_cache = mode;
    rf.kv_cache_min_tokens = 8;
    rf.kv_cache_disk = disk;
    rf.kv_cache_redis = redis;
    rf.kv_cache_redis_timeout_ms = 5000;  // measuring a hit, not the failure path
    rf.kv_cache_checkpoint_tokens = o.kv_cache_checkpoint_tokens;
    chain_choice chain;
    chain.stages = o.stages;
    return make_pipeline(std::move(file), chain, rf);
}

// Cold vs warm TTFT for a shared prefix, and the suffix-only floor.
result<nlohmann::json> shared_prefix(std::shared_ptr<const gguf::file> file, const bench_cache_options & o) {
    const int32_t ctx = o.prefix_tokens + o.suffix_tokens + 8;
    SKIPPY_ASSIGN_OR_RETURN(auto cached, make(file, o, o.kv_cache, ctx));
    SKIPPY_ASSIGN_OR_RETURN(auto plain, make(file, o, "off", ctx));
    const int32_t n_vocab = cached->n_vocab();
    std::vector<double> cold_ms, warm_ms, floor_ms, suffix_only_ms;
    int64_t cached_tokens = 0;
    uint64_t cold_record_mask = 0, warm_hit_mask = 0;
    bool tokens_identical = true;
    for (int32_t r = 0; r < o.repeat; ++r) {
        const auto prefix = random_tokens(o.prefix_tokens, 1000u + static_cast<uint32_t>(r), n_vocab);
        const auto a = concat(prefix, random_tokens(o.suffix_tokens, 2000u + static_cast<uint32_t>(r), n_vocab));
        const auto b = concat(prefix, random_tokens(o.suffix_tokens, 3000u + static_cast<uint32_t>(r), n_vocab));
        SKIPPY_ASSIGN_OR_RETURN(generation_result cold, ttft_run(*cached, a, o.batch_size));
        cached->wait_for_records();  // the warm request measures a hit, not the record worker's pace
        SKIPPY_ASSIGN_OR_RETURN(generation_result warm, ttft_run(*cached, b, o.batch_size, o.check_tokens));
        // Exactness: the warm answer is the one the same prompt gets computed whole.
        SKIPPY_ASSIGN_OR_RETURN(generation_result reference, ttft_run(*plain, b, o.batch_size, o.check_tokens));
        tokens_identical = tokens_identical && warm.tokens == reference.tokens;
        // A cold prompt as long as the suffix: what computing only the suffix costs.
        SKIPPY_ASSIGN_OR_RETURN(generation_result alone,
                                ttft_run(*plain, random_tokens(o.suffix_tokens, 4000u + static_cast<uint32_t>(r), n_vocab), o.batch_size));
        suffix_only_ms.push_back(alone.ttft_ms);
        cold_ms.push_back(cold.ttft_ms);
        warm_ms.push_back(warm.ttft_ms);
        cached_tokens = warm.cached_tokens;
        cold_record_mask = cold.cache_record_stage_mask;
        warm_hit_mask = warm.cache_hit_stage_mask;
        // The floor: the prefix already in the KV (computed untimed), then the suffix
        // prefill and one decode, exactly what a warm request must still compute.
        sampling_config greedy;
        greedy.temperature = 0;
        SKIPPY_TRY(plain->begin(0, greedy, b, ""));
        for (int32_t pos = 0; pos < o.prefix_tokens - 1; pos += o.batch_size) {
            const int32_t n = std::min(o.batch_size, o.prefix_tokens - 1 - pos);
            SKIPPY_TRY(plain->prefill(0, pos, std::span<const token_id>(b).subspan(static_cast<size_t>(pos), static_cast<size_t>(n))));
        }
        const int32_t last = static_cast<int32_t>(b.size()) - 1;
        // Prefill is streamed: wait until every stage has computed the prefix. A decode
        // of the prefix's last token returns only after the final stage is done.
        SKIPPY_TRY(plain->decode(0, o.prefix_tokens - 1, b[static_cast<size_t>(o.prefix_tokens - 1)]).error());
        const auto t0 = clock_type::now();
        for (int32_t pos = o.prefix_tokens; pos < last; pos += o.batch_size) {
            const int32_t n = std::min(o.batch_size, last - pos);
            SKIPPY_TRY(plain->prefill(0, pos, std::span<const token_id>(b).subspan(static_cast<size_t>(pos), static_cast<size_t>(n))));
        }
        SKIPPY_ASSIGN_OR_RETURN(token_id first, plain->decode(0, last, b.back()));
        (void)first;
        floor_ms.push_back(ms_since(t0));
        plain->end(0);
    }
    nlohmann::json j;
    j["prefix_tokens"] = o.prefix_tokens;
    j["suffix_tokens"] = o.suffix_tokens;
    j["cached_tokens"] = cached_tokens;
    j["cold_kv_record_stage_mask"] = cold_record_mask;  // bit i: stage i recorded the cold prompt
    j["warm_kv_hit_stage_mask"] = warm_hit_mask;        // bit i: stage i restored for the warm one
    j["cold_ttft_ms"] = median(cold_ms);
    j["warm_ttft_ms"] = median(warm_ms);
    j["suffix_floor_ms"] = median(floor_ms);
    j["warm_over_floor"] = median(warm_ms) / std::max(1e-9, median(floor_ms));
    j["suffix_only_ttft_ms"] = median(suffix_only_ms);  // a cold prompt of suffix_tokens tokens
    // Every repeat, in order (cold, warm and suffix-only interleaved): on a shared machine
    // the spread says how far to trust the medians.
    j["cold_ttft_ms_runs"] = cold_ms;
    j["warm_ttft_ms_runs"] = warm_ms;
    j["suffix_only_ttft_ms_runs"] = suffix_only_ms;
    j["warm_over_suffix_only"] = median(warm_ms) / std::max(1e-9, median(suffix_only_ms));
    j["check_tokens"] = o.check_tokens;
    j["tokens_identical"] = tokens_identical;  // every warm answer equals the cache-off one
    j["cold_over_warm"] = median(cold_ms) / std::max(1e-9, median(warm_ms));
    return j;
}

// P prefixes x Q questions, interleaved (q0 of every prefix, then q1, ...).
result<nlohmann::json> interleaved(std::shared_ptr<const gguf::file> file, const bench_cache_options & o) {
    const int32_t ctx = o.prefix_tokens + o.suffix_tokens + 8;
    SKIPPY_ASSIGN_OR_RETURN(auto cached, make(file, o, o.kv_cache, ctx));
    const int32_t n_vocab = cached->n_vocab();
    int64_t total = 0, computed = 0;
    std::vector<double> ttft;
    for (int32_t q = 0; q < o.questions; ++q) {
        for (int32_t p = 0; p < o.prefixes; ++p) {
            const auto prompt = concat(random_tokens(o.prefix_tokens, 5000u + static_cast<uint32_t>(p), n_vocab),
                                       random_tokens(o.suffix_tokens, 7000u + static_cast<uint32_t>(q * 97 + p), n_vocab));
            SKIPPY_ASSIGN_OR_RETURN(generation_result r, ttft_run(*cached, prompt, o.batch_size));
            total += r.prompt_tokens;
            computed += r.prompt_tokens - r.cached_tokens;
            ttft.push_back(r.ttft_ms);
        }
    }
    nlohmann::json j;
    j["prefixes"] = o.prefixes;
    j["questions"] = o.questions;
    j["prefix_tokens"] = o.prefix_tokens;
    j["suffix_tokens"] = o.suffix_tokens;
    j["prompt_tokens"] = total;
    j["computed_tokens"] = computed;
    j["computed_fraction"] = static_cast<double>(computed) / static_cast<double>(std::max<int64_t>(1, total));
    j["floor_fraction"] = static_cast<double>(o.prefixes) * o.prefix_tokens / static_cast<double>(std::max<int64_t>(1, total));
    j["median_ttft_ms"] = median(ttft);
    return j;
}

// Distinct prompts: the cache looks up and records every time and never hits.
result<nlohmann::json> no_hit(std::shared_ptr<const gguf::file> file, const bench_cache_options & o) {
    const int32_t n_prompt = o.prefix_tokens + o.suffix_tokens;
    SKIPPY_ASSIGN_OR_RETURN(auto p, make(file, o, o.kv_cache, n_prompt + 8));
    std::vector<double> ttft;
    int64_t hits = 0;
    for (int32_t r = 0; r < o.repeat; ++r) {
        SKIPPY_ASSIGN_OR_RETURN(generation_result res, ttft_run(*p, random_tokens(n_prompt, 9000u + static_cast<uint32_t>(r), p->n_vocab()), o.batch_size));
        ttft.push_back(res.ttft_ms);
        hits += res.cached_tokens > 0;
    }
    nlohmann::json j;
    j["kv_cache"] = o.kv_cache;
    j["prompt_tokens"] = n_prompt;
    j["requests"] = o.repeat;
    j["requests_with_hits"] = hits;
    j["median_ttft_ms"] = median(ttft);
    return j;
}

// TTFT of a prefix restored after a restart (disk), or by another pipeline sharing only
// Redis, against a warm in-memory hit and a cold run, all on one prefix length.
result<nlohmann::json> restart(std::shared_ptr<const gguf::file> file, const bench_cache_options & o) {
    if (o.kv_cache_disk.empty()) return make_error(error_code::invalid_argument, "--scenario restart needs --kv-cache-disk DIR");
    const int32_t ctx = o.prefix_tokens + o.suffix_tokens + 8;
    const std::string dir = o.kv_cache_disk + "/bench-restart-" + std::to_string(::getpid());
    std::vector<double> cold_ms, warm_ms, disk_ms, redis_ms;
    int64_t disk_cached = 0, redis_cached = 0, warm_cached = 0;
    uint64_t warm_hit_mask = 0, disk_hit_mask = 0, redis_hit_mask = 0;  // bit i: stage i restored
    int32_t n_vocab = 0;
    for (int32_t r = 0; r < o.repeat; ++r) {
        const uint32_t seed = 11000u + static_cast<uint32_t>(r) * 7u;
        std::vector<token_id> prefix, a, b, c;
        {
            SKIPPY_ASSIGN_OR_RETURN(auto first, make(file, o, o.kv_cache, ctx, dir));
            n_vocab = first->n_vocab();
            prefix = random_tokens(o.prefix_tokens, seed, n_vocab);
            a = concat(prefix, random_tokens(o.suffix_tokens, seed + 1, n_vocab));
            b = concat(prefix, random_tokens(o.suffix_tokens, seed + 2, n_vocab));
            c = concat(prefix, random_tokens(o.suffix_tokens, seed + 3, n_vocab));
            SKIPPY_ASSIGN_OR_RETURN(generation_result cold, ttft_run(*first, a, o.batch_size));
            SKIPPY_ASSIGN_OR_RETURN(generation_result warm, ttft_run(*first, b, o.batch_size));
            cold_ms.push_back(cold.ttft_ms);
            warm_ms.push_back(warm.ttft_ms);
            warm_cached = warm.cached_tokens;
            warm_hit_mask = warm.cache_hit_stage_mask;
        }  // torn down: the disk writes are flushed first
        SKIPPY_ASSIGN_OR_RETURN(auto restarted, make(file, o, o.kv_cache, ctx, dir));
        SKIPPY_ASSIGN_OR_RETURN(generation_result from_disk, ttft_run(*restarted, c, o.batch_size));
        disk_ms.push_back(from_disk.ttft_ms);
        disk_cached = from_disk.cached_tokens;
        disk_hit_mask = from_disk.cache_hit_stage_mask;
        restarted.reset();
        if (!o.kv_cache_redis.empty()) {
            {
                SKIPPY_ASSIGN_OR_RETURN(auto publisher, make(file, o, o.kv_cache, ctx, "", o.kv_cache_redis));
                SKIPPY_TRY(ttft_run(*publisher, a, o.batch_size).error());
            }
            SKIPPY_ASSIGN_OR_RETURN(auto other, make(file, o, o.kv_cache, ctx, "", o.kv_cache_redis));
            SKIPPY_ASSIGN_OR_RETURN(generation_result shared, ttft_run(*other, b, o.batch_size));
            redis_ms.push_back(shared.ttft_ms);
            redis_cached = shared.cached_tokens;
            redis_hit_mask = shared.cache_hit_stage_mask;
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    nlohmann::json j;
    j["prefix_tokens"] = o.prefix_tokens;
    j["suffix_tokens"] = o.suffix_tokens;
    j["cold_ttft_ms"] = median(cold_ms);
    j["warm_ttft_ms"] = median(warm_ms);
    j["warm_cached_tokens"] = warm_cached;
    j["warm_kv_hit_stage_mask"] = warm_hit_mask;
    j["disk_ttft_ms"] = median(disk_ms);
    j["disk_cached_tokens"] = disk_cached;
    j["disk_kv_hit_stage_mask"] = disk_hit_mask;
    j["disk_over_warm"] = median(disk_ms) / std::max(1e-9, median(warm_ms));
    j["cold_over_disk"] = median(cold_ms) / std::max(1e-9, median(disk_ms));
    if (!redis_ms.empty()) {
        j["redis_ttft_ms"] = median(redis_ms);
        j["redis_cached_tokens"] = redis_cached;
        j["redis_kv_hit_stage_mask"] = redis_hit_mask;
        j["redis_over_warm"] = median(redis_ms) / std::max(1e-9, median(warm_ms));
    }
    return j;
}

int run_bench_cache(const bench_cache_options & o) {
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    result<nlohmann::json> out = make_error(error_code::invalid_argument, "unknown scenario");
    if (o.scenario == "shared-prefix") out = shared_prefix(*file, o);
    else if (o.scenario == "interleaved") out = interleaved(*file, o);
    else if (o.scenario == "restart") out = restart(*file, o);
    else out = no_hit(*file, o);
    if (!out.is_ok()) return fail(out.error());
    nlohmann::json j = *out;
    j["model"] = o.model_path;
    j["scenario"] = o.scenario;
    j["stages"] = o.stages;
    j["threads"] = resolve_threads(o.threads);
    std::printf("%s\n", o.json ? j.dump().c_str() : j.dump(2).c_str());
    return 0;
}

}  // namespace

void add_bench_cache_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<bench_cache_options>();
    CLI::App * cmd = app.add_subcommand("bench-cache", "Measure what the prefix cache saves on a chain (JSON)");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--scenario", o->scenario, "shared-prefix, interleaved, no-hit or restart")
        ->check(CLI::IsMember({"shared-prefix", "interleaved", "no-hit", "restart"}))->capture_default_str();
    add_number(cmd, "--stages", o->stages, "Stages in this process", 1, 64)->capture_default_str();
    add_number(cmd, "-t,--threads", o->threads, "Threads per stage (default: physical cores)", 1, 1024);
    add_number(cmd, "--prefix-tokens", o->prefix_tokens, "Tokens of each shared prefix", 8, 1 << 20)->capture_default_str();
    add_number(cmd, "--suffix-tokens", o->suffix_tokens, "Tokens after the prefix", 1, 1 << 20)->capture_default_str();
    add_number(cmd, "--prefixes", o->prefixes, "interleaved: distinct prefixes", 1, 1000)->capture_default_str();
    add_number(cmd, "--questions", o->questions, "interleaved: questions per prefix", 1, 1000)->capture_default_str();
    add_number(cmd, "--repeat", o->repeat, "Repetitions (medians are reported)", 1, 1000)->capture_default_str();
    add_number(cmd, "--check-tokens", o->check_tokens,
               "shared-prefix: tokens each warm request generates, compared with a cache-off run of its prompt", 1, 4096)
        ->capture_default_str();
    add_number(cmd, "-b,--batch-size", o->batch_size, "Prompt tokens per prefill chunk", 1, 1 << 16)->capture_default_str();
    cmd->add_option("--kv-cache", o->kv_cache, "Cache mode of the measured pipeline")
        ->check(CLI::IsMember({"off", "record", "lookup-record"}))->capture_default_str();
    add_number(cmd, "--kv-cache-checkpoint-tokens", o->kv_cache_checkpoint_tokens,
               "Models with recurrent layers: snapshot spacing during prefill (see generate --help)", 0, int64_t{1} << 24)
        ->capture_default_str();
    cmd->add_option("--kv-cache-disk", o->kv_cache_disk, "restart: directory under which the scenario's disk tier lives");
    cmd->add_option("--kv-cache-redis", o->kv_cache_redis, "restart: also measure a hit through this Redis server (redis://...)");
    cmd->add_flag("--json", o->json, "Print one JSON object on one line");
    cmd->callback([&run, o] { run = [o] { return run_bench_cache(*o); }; });
}

}  // namespace skippy::cli
