// Helpers shared by the subcommands: loading a model file, printing errors, the
// run-time flags every stage-running command takes, and building the pipeline
// (one process, an in-process chain, or a chain of stage processes).
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "runtime/pipeline.h"
#include "transport/chain.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace skippy::cli {

// Opens and validates a GGUF file; logs progress on stderr.
result<std::shared_ptr<const gguf::file>> load_gguf(const std::string & path);

// Prints "skippy: error: <status>" on stderr and returns exit code 1.
int fail(const status & st);

// Validators for numeric flags. CLI11's own conversion wraps "-1" into unsigned types,
// saturates overflow ("99999999999999999999" became INT64_MAX) and reads "010" as
// octal; these accept only a plain decimal number that lies in [lo, hi] (finite, for
// reals) and hand CLI11 its canonical text, else the option fails with
// "<flag>: <text> is not an integer in [lo, hi]" (exit 2, nothing on stdout).
CLI::Validator integer_in(int64_t lo, int64_t hi);
CLI::Validator unsigned_in(uint64_t lo, uint64_t hi);
CLI::Validator real_in(double lo, double hi, bool single_precision);

// Adds a numeric option whose value must lie in [lo, hi]; the bounds must fit T (the
// type of `value`), so the validated text always converts.
template <class T>
CLI::Option * add_number(CLI::App * cmd, const std::string & name, T & value, const std::string & description,
                         std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
    CLI::Option * opt = cmd->add_option(name, value, description);
    if constexpr (std::is_floating_point_v<T>) {
        return opt->transform(real_in(static_cast<double>(lo), static_cast<double>(hi), sizeof(T) == sizeof(float)));
    } else if constexpr (std::is_signed_v<T>) {
        return opt->transform(integer_in(static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
    } else {
        return opt->transform(unsigned_in(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi)));
    }
}

// Adds --kernels scalar|avx2|avx512|amx|auto (the kernel path; default auto, the fastest
// this CPU supports). The choice is applied by apply_kernels_flag() before the command
// runs, for the whole process.
void add_kernels_flag(CLI::App * cmd);

// Applies the --kernels choice of the command being run (none given: ok, the path stays
// the automatic one). unsupported, naming the missing CPU feature, when the CPU lacks
// the path.
status apply_kernels_flag();

// Threads to use: the flag when > 0, else the physical core count.
int32_t resolve_threads(int32_t flag);

// The median of v (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> v);

// Flags given to every process that runs a stage (DESIGN: run-time flags go on each
// process's command line).
struct runtime_flags {
    int32_t     threads = 0;
    int32_t     ctx_size = 0;
    int32_t     lanes = 1;
    std::string kv_type = "f16";
    bool        no_huge_pages = false;
    std::string stage_key_file;   // shared key that authenticates stage links (empty: none)
    std::string stage_tls;        // "CERT,KEY,CA": stage links run over mutual TLS (empty: plain TCP)
    int32_t     wire_delay_ms = 0;
    // Liveness (transport/liveness.h): a reply's budget per hop is base + tokens * rate.
    int32_t     stage_step_timeout_ms = 2000;
    int32_t     stage_step_ms_per_token = 20;
    int32_t     stage_heartbeat_ms = 1000;  // 0: no heartbeats
    // Prefix cache (DESIGN §6)
    std::string kv_cache = "lookup-record";
    int64_t     kv_cache_min_tokens = 32;
    int64_t     kv_cache_max_entries = 256;
    int64_t     kv_cache_exact_max_bytes = 512ll << 20;
    int64_t     kv_cache_resident_tokens = -1;
    std::string kv_cache_demote = "on";  // demote evicted resident entries to the exact-state tier
    std::string kv_cache_key;
    std::string kv_cache_disk;             // page files that survive restarts (one subdirectory per stage)
    int64_t     kv_cache_disk_max_bytes = 0;  // 0: min(10 GiB, 10% of the filesystem), per stage
    std::string kv_cache_redis;            // redis://host[:port][/db]: pages shared by stage replicas
    int32_t     kv_cache_redis_timeout_ms = 50;
    int64_t     kv_cache_checkpoint_tokens = 64;  // recurrent layers: snapshot spacing during prefill (0: prompt/answer ends only)
    std::string telemetry_file;
    std::string telemetry_level = "summary";
};

// Adds --kernels (add_kernels_flag), -t, -c/--ctx-size, --lanes, --kv-type, --stage-key-file, --stage-tls, --wire-delay-ms, the
// --kv-cache* flags (incl. --kv-cache-demote on|off, --kv-cache-disk DIR,
// --kv-cache-disk-max-bytes, --kv-cache-redis URL, --kv-cache-redis-timeout-ms,
// --kv-cache-checkpoint-tokens) and
// --telemetry-file/--telemetry-level.
void add_runtime_flags(CLI::App * cmd, runtime_flags & flags, int32_t default_lanes);

stage_options to_stage_options(const runtime_flags & flags);
// Chain options incl. the cache settings; opens the telemetry file when one is given.
result<transport::chain_options> to_chain_options(const runtime_flags & flags);

// Where the stages run: `stages` in this process (1: no transport at all), or the
// chain a topology file describes (stage 0 here).
struct chain_choice {
    int32_t     stages = 1;
    std::string topology_path;
};

// Adds --stages and --topology (mutually exclusive).
void add_chain_flags(CLI::App * cmd, chain_choice & choice);

// The model file to load: -m, or the topology's model when -m is empty. With both, -m
// must name the topology's model file (same canonical path): stage 0 loading another
// model than the other stages is refused (invalid_argument).
result<std::string> resolve_model_path(const std::string & model_flag, const chain_choice & choice);

// `chain` comes from to_chain_options(flags) (the caller keeps its telemetry sink).
result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags,
                                                                 const transport::chain_options & chain);
result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags);

}  // namespace skippy::cli
