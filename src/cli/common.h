// Helpers shared by the subcommands: loading a model file, printing errors, the
// run-time flags every stage-running command takes, and building the pipeline
// (one process, an in-process chain, or a chain of stage processes).
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "runtime/pipeline.h"
#include "transport/chain.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace skippy::cli {

// Opens and validates a GGUF file; logs progress on stderr.
result<std::shared_ptr<const gguf::file>> load_gguf(const std::string & path);

// Prints "skippy: error: <status>" on stderr and returns exit code 1.
int fail(const status & st);

// Threads to use: the flag when > 0, else the physical core count.
int32_t resolve_threads(int32_t flag);

// Flags given to every process that runs a stage (DESIGN: run-time flags go on each
// process's command line).
struct runtime_flags {
    int32_t     threads = 0;
    int32_t     ctx_size = 0;
    int32_t     lanes = 1;
    std::string kv_type = "f16";
    std::string auth_token;       // shared secret on stage connections
    int32_t     wire_delay_ms = 0;
    // Prefix cache (DESIGN §6)
    std::string kv_cache = "lookup-record";
    int64_t     kv_cache_min_tokens = 32;
    int64_t     kv_cache_max_entries = 256;
    int64_t     kv_cache_exact_max_bytes = 512ll << 20;
    int64_t     kv_cache_resident_tokens = -1;
    std::string kv_cache_key;
    std::string telemetry_file;
    std::string telemetry_level = "summary";
};

// Adds -t, -c/--ctx-size, --lanes, --kv-type, --auth-token, --wire-delay-ms, the
// --kv-cache* flags and --telemetry-file/--telemetry-level.
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

// The model file to load: -m, or the topology's model when -m is empty.
result<std::string> resolve_model_path(const std::string & model_flag, const chain_choice & choice);

// `chain` comes from to_chain_options(flags) (the caller keeps its telemetry sink).
result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags,
                                                                 const transport::chain_options & chain);
result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags);

}  // namespace skippy::cli
