#include "transport/stage_cache_host.h"

#include "base/byte_io.h"
#include "cache/digest.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

#include <algorithm>

namespace skippy::transport {

int64_t cache_settings::extra_blocks(int32_t ctx_size, int32_t n_lanes, int32_t block_tokens) const {
    if (!enabled() || config.max_entries == 0) return 0;
    const int64_t tokens = resident_tokens >= 0 ? resident_tokens : static_cast<int64_t>(ctx_size) * n_lanes;
    return (tokens + block_tokens - 1) / block_tokens;
}

std::string model_identity(const gguf::file & file, layer_range layers) {
    constexpr size_t k_sample_bytes = 32 << 10;
    cache::sha256_hasher h;
    std::vector<uint8_t> buf;
    byte_writer w(buf);
    w.put_u64(file.size_bytes());
    w.put_u64(file.tensors().size());
    for (const auto & t : file.tensors()) {
        w.put_u64(t.name.size());
        w.put_bytes(t.name.data(), t.name.size());
        w.put_u32(static_cast<uint32_t>(t.type));
        for (int64_t d : t.dims) w.put_i64(d);
        w.put_u64(t.offset);
    }
    h.update(buf);
    // Embeddings, norms and head are shared by every identity; a block's tensor belongs
    // to its layer's, and a name that only looks like one ("blk.x", an index past int32)
    // to none (no stage runs it; the table above still covers it).
    auto in_range = [&](const std::string & name) {
        if (!name.starts_with("blk.")) return true;
        const int32_t il = gguf::block_index(name);
        return il >= layers.start && il < layers.end;  // -1: below every range
    };
    for (const auto & t : file.tensors()) {
        if (!in_range(t.name)) continue;
        const size_t head = std::min(t.n_bytes, k_sample_bytes);
        h.update({t.data, head});
        if (t.n_bytes > head) {
            const size_t tail = std::min(t.n_bytes - head, k_sample_bytes);
            h.update({t.data + t.n_bytes - tail, tail});
        }
    }
    return h.finish().hex();
}

// Every kernel path of an x86-64 build (scalar, AVX2, AVX-512, AMX) gives bitwise the
// same products (tests/kernels/fast_paths_test.cpp per kernel, and
// tests/model/kernel_paths_test.cpp on every shared model), so nodes with different
// CPUs share their KV; only the architecture separates namespaces.
std::string platform_tag() {
#if defined(__x86_64__)
    return "x86_64";
#else
    return "other-scalar";
#endif
}

telemetry::stage_snapshot stage_snapshot_of(int32_t stage_index, stage & st, stage_cache_host * host,
                                            const telemetry::step_recorder * steps) {
    telemetry::stage_snapshot snap;
    snap.stage = stage_index;
    if (steps) snap.steps = steps->snapshot();
    kv_pool & kv = st.kv();
    snap.kv_pool = telemetry::kv_pool_snapshot{kv.n_blocks(), kv.n_blocks() - kv.n_free(), static_cast<int64_t>(kv.geometry().block_bytes())};
    if (!host || !host->cache()) return snap;
    for (const cache::tier_snapshot & t : host->cache()->tier_snapshots()) {
        snap.cache_tiers.push_back({std::string(t.name), t.stats.hits, t.stats.misses, t.stats.evictions, t.stats.bytes, t.stats.entries});
    }
    return snap;
}

result<std::unique_ptr<stage_cache_host>> stage_cache_host::create(stage & st, const gguf::file & file, int32_t stage_index,
                                                                   const cache_settings & settings) {
    auto host = std::unique_ptr<stage_cache_host>(new stage_cache_host());
    host->stage_ = &st;
    host->stage_index_ = stage_index;
    host->settings_ = settings;
    if (!settings.enabled()) return host;
    SKIPPY_TRY(settings.config.validate());

    const layer_range range = st.slice().range();
    cache::namespace_fields & f = host->fields_;
    f.model_identity = model_identity(file, range);
    f.stage_index = stage_index;
    f.layer_start = range.start;
    f.layer_end = range.end;
    f.dtype = st.kv().geometry().dtype;
    f.kv_block_tokens = st.kv().geometry().block_tokens;
    f.ctx_size = st.ctx_size();
    f.platform_tag = platform_tag();

    host->backend_ = std::make_unique<stage_kv_backend>(st);
    cache::stage_cache_config config = settings.config;
    if (st.is_last()) config.activation_max_bytes = 0;  // the final stage forwards no activations
    config.disk_dir = cache::disk_dir_for_stage(config.disk_dir, stage_index);
    SKIPPY_ASSIGN_OR_RETURN(host->cache_, cache::stage_cache::create(*host->backend_, config, settings.sink));
    cache::stage_cache * cache = host->cache_.get();
    st.set_write_admission([cache](int32_t lane, int64_t pos_start, int64_t n_tokens, const stage::kv_write_fn & write) {
        return cache->make_room_for_write(lane, pos_start, n_tokens, write).write_status;  // a write that does not fit says so
    });
    return host;
}

result<cache::cache_namespace> stage_cache_host::namespace_for(const std::string & request_key) const {
    cache::namespace_fields f = fields_;
    f.cache_key = request_key.empty() ? settings_.default_key : request_key;
    return cache::make_namespace(f);
}

}  // namespace skippy::transport
