// The cache's view of a loaded stage (cache::kv_backend_i): its KV pool and lanes
// through pool_kv_backend, and on a stage with recurrent layers (qwen35) the lanes'
// recurrent states — snapshots for records, validated imports for restores, in the
// format of model/recurrent_snapshot.h. The cache reaches the runtime only through this.
#pragma once

#include "cache/pool_kv_backend.h"
#include "model/recurrent_snapshot.h"
#include "runtime/stage.h"

namespace skippy::transport {

// A recurrent state copied at a token boundary, serialized on demand (the record
// worker).
class recurrent_state_snapshot final : public cache::state_snapshot_i {
public:
    recurrent_state_snapshot(recurrent_state state, const recurrent_shape & shape) : state_(std::move(state)), shape_(shape) {}
    int64_t n_tokens() const override { return state_.n_tokens(); }
    int64_t n_bytes() const override { return static_cast<int64_t>(state_.bytes()); }
    result<std::vector<uint8_t>> serialize(const cache::digest256 & ns) const override;

private:
    recurrent_state state_;
    recurrent_shape shape_;
};

class stage_kv_backend final : public cache::kv_backend_i {
public:
    // REQUIRES: `st` outlives the backend.
    explicit stage_kv_backend(stage & st);

    // A captured state of this stage (stage::take_captures) as a snapshot for the cache.
    cache::state_snapshot_ptr wrap(recurrent_state state) const;

    int32_t block_tokens() const override { return kv_.block_tokens(); }
    int64_t n_free_blocks() const override { return kv_.n_free_blocks(); }
    int64_t bytes_per_token() const override { return kv_.bytes_per_token(); }
    result<int64_t> session_tokens(int32_t session) const override { return kv_.session_tokens(session); }
    result<std::vector<kv_block_id>> session_blocks(int32_t session, int64_t n_tokens) const override {
        return kv_.session_blocks(session, n_tokens);
    }
    result<int64_t> blocks_needed(int32_t session, int64_t pos_start, int64_t n_tokens) const override {
        return kv_.blocks_needed(session, pos_start, n_tokens);
    }
    void retain(std::span<const kv_block_id> blocks) override { kv_.retain(blocks); }
    void release(std::span<const kv_block_id> blocks) override { kv_.release(blocks); }
    // Both also put the lane's recurrent state where the KV now ends: reset at 0, kept
    // at its own length, invalid elsewhere (until import_state).
    status share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) override;
    status truncate_session(int32_t session, int64_t n_tokens) override;
    result<std::vector<uint8_t>> export_page(std::span<const kv_block_id> blocks, int64_t n_tokens, int64_t token_start,
                                             int64_t token_count) const override {
        return kv_.export_page(blocks, n_tokens, token_start, token_count);
    }
    status import_page(int32_t session, std::span<const uint8_t> page) override;

    bool has_recurrent_state() const override { return recurrent_; }
    result<cache::state_snapshot_ptr> snapshot_state(int32_t session, int64_t n_tokens) const override;
    status import_state(int32_t session, std::span<const uint8_t> snapshot, const cache::digest256 & ns) override;

private:
    status check_session(int32_t session) const;

    stage &                stage_;
    cache::pool_kv_backend kv_;
    const recurrent_shape  shape_;
    const bool             recurrent_;
};

}  // namespace skippy::transport
