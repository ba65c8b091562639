// A stage's prefix cache, wired to the stage (DESIGN §6): the backend over the stage's
// lanes (KV, and recurrent states on a stage with recurrent layers), the cache itself,
// write admission before every forward, and the namespace of a request.
#pragma once

#include "cache/stage_cache.h"
#include "runtime/stage.h"
#include "telemetry/metrics.h"
#include "telemetry/telemetry.h"
#include "transport/stage_kv_backend.h"

#include <memory>
#include <string>

namespace skippy::transport {

class stage_cache_host;

// What every stage-running process is told about its cache (run-time flags).
struct cache_settings {
    cache::stage_cache_config config;          // --kv-cache, --kv-cache-min-tokens, ...
    std::string               default_key;     // --kv-cache-key: namespace when a request names none
    telemetry::event_sink_ptr sink;            // --telemetry-file / --telemetry-level
    // Pool positions kept for cached prefixes beyond the lanes' own contexts
    // (--kv-cache-resident-tokens); -1: one more context per lane.
    int64_t                   resident_tokens = -1;

    bool enabled() const { return config.mode != cache::cache_mode::off; }
    // KV pool blocks to add to the stage for resident entries.
    int64_t extra_blocks(int32_t ctx_size, int32_t n_lanes, int32_t block_tokens) const;
};

// A short identity of the weights a stage runs: SHA-256 over the file's tensor table
// and up to 64 KiB of each of the stage's tensors (start and end), hex. Cheap to
// compute at load for any model size, and different whenever the weights differ in
// shape, type, placement or those bytes.
std::string model_identity(const gguf::file & file, layer_range layers);

// "x86_64": the architecture only. Every kernel path gives the same bits, so KV made by
// an AVX2 node is reused by an AMX node and the other way round.
std::string platform_tag();

// What a stage reports at a /metrics scrape: its KV pool and, with a cache, its tiers
// (stage_cache::tier_snapshots: resident, exact_state, disk and redis when on,
// activation). `steps` (may be null) adds the stage's step histograms.
telemetry::stage_snapshot stage_snapshot_of(int32_t stage_index, stage & st, stage_cache_host * cache,
                                            const telemetry::step_recorder * steps = nullptr);

class stage_cache_host {
public:
    // REQUIRES: `st` outlives the host and serves no request yet. Installs write
    // admission on the stage. With the cache off, cache() is null.
    static result<std::unique_ptr<stage_cache_host>> create(stage & st, const gguf::file & file, int32_t stage_index,
                                                            const cache_settings & settings);

    cache::stage_cache * cache() { return cache_.get(); }
    // The backend the cache reaches the stage through (null with the cache off).
    stage_kv_backend * backend() { return backend_.get(); }
    int32_t stage_index() const { return stage_index_; }
    int64_t min_tokens() const { return settings_.config.min_tokens; }
    const telemetry::event_sink_ptr & sink() const { return settings_.sink; }

    // The namespace of a request naming `request_key` ("" = the default key).
    result<cache::cache_namespace> namespace_for(const std::string & request_key) const;

private:
    stage_cache_host() = default;

    stage *                                  stage_ = nullptr;
    int32_t                                  stage_index_ = 0;
    cache_settings                           settings_;
    cache::namespace_fields                  fields_;
    std::unique_ptr<stage_kv_backend>        backend_;
    std::unique_ptr<cache::stage_cache>      cache_;
};

}  // namespace skippy::transport
