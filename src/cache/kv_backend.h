// The cache's only view of the runtime's KV (DESIGN §3: the cache talks to the runtime
// through a narrow interface, so its tests run on a fake).
//
// Sessions are small integers (a stage's lanes). Blocks are the pool's refcounted
// blocks: the cache keeps a resident entry by holding references on the blocks that
// back its positions, and restores it by sharing them into a session (no copy).
//
// Threading: every call that names a session is made from the thread driving that
// session. block_tokens, n_free_blocks, retain, release and export_page may be called
// from any thread (the record worker exports from blocks it holds references on).
#pragma once

#include "base/status.h"
#include "cache/digest.h"
#include "kv/kv.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace skippy::cache {

// A copy of a session's recurrent state at a token boundary (a stage with recurrent
// layers, e.g. qwen35's delta-net), taken on the request thread (a memory copy) and
// serialized later on the record worker, so the request never pays for the encoding
// and hashing of megabytes.
class state_snapshot_i {
public:
    virtual ~state_snapshot_i() = default;
    // Positions folded into the state.
    virtual int64_t n_tokens() const = 0;
    // Host memory the copy holds.
    virtual int64_t n_bytes() const = 0;
    // The snapshot's bytes (model/recurrent_snapshot.h, docs/kv-cache.md §2), naming
    // the namespace it is stored under. Only reads; any thread.
    virtual result<std::vector<uint8_t>> serialize(const digest256 & ns) const = 0;
};
using state_snapshot_ptr = std::shared_ptr<const state_snapshot_i>;

class kv_backend_i {
public:
    virtual ~kv_backend_i() = default;

    // Positions per block.
    virtual int32_t block_tokens() const = 0;
    // Blocks a new allocation could take right now.
    virtual int64_t n_free_blocks() const = 0;
    // KV bytes one position occupies (all layers, K and V), for byte counters.
    virtual int64_t bytes_per_token() const = 0;

    // Positions [0, n) of the session hold valid KV. invalid_argument: unknown session.
    virtual result<int64_t> session_tokens(int32_t session) const = 0;
    // The blocks backing positions [0, n_tokens) of a session, in order
    // (ceil(n_tokens / block_tokens) of them). invalid_argument: unknown session or
    // n_tokens > session_tokens.
    virtual result<std::vector<kv_block_id>> session_blocks(int32_t session, int64_t n_tokens) const = 0;
    // Blocks a write of positions [pos_start, pos_start + n_tokens) would allocate,
    // counting the copy of a shared block it would write into.
    virtual result<int64_t> blocks_needed(int32_t session, int64_t pos_start, int64_t n_tokens) const = 0;

    // One reference more / less on each block. REQUIRES: each block is live (the cache
    // only passes blocks it holds or just read from a session).
    virtual void retain(std::span<const kv_block_id> blocks) = 0;
    virtual void release(std::span<const kv_block_id> blocks) = 0;

    // Replaces the session's contents with positions [0, n_tokens) backed by `blocks`
    // (shared, not copied; a later write into a shared block copies it first).
    // invalid_argument: unknown session, or blocks.size() != ceil(n_tokens / block_tokens).
    virtual status share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) = 0;
    // Keeps positions [0, n_tokens) of the session. invalid_argument: unknown session.
    virtual status truncate_session(int32_t session, int64_t n_tokens) = 0;

    // A KV page (kv_page.h) of positions [token_start, token_start + token_count) of the
    // sequence whose positions [0, n_tokens) are backed by `blocks`. Only reads.
    virtual result<std::vector<uint8_t>> export_page(std::span<const kv_block_id> blocks, int64_t n_tokens,
                                                     int64_t token_start, int64_t token_count) const = 0;
    // Validates the page completely (geometry, sizes, checksum) and appends it to the
    // session, which must hold exactly its token_start positions. Errors as import_page:
    // integrity / invalid_data / unsupported for a bad page, unavailable for a full pool.
    virtual status import_page(int32_t session, std::span<const uint8_t> page) = 0;

    // ---- Recurrent state (stages with recurrent layers; the defaults are a stage
    // without any). Its sessions hold, besides KV, a state that a KV prefix cannot
    // rebuild: a prefix restores only with the snapshot taken at its very length.
    virtual bool has_recurrent_state() const { return false; }
    // A copy of the session's recurrent state, which must hold exactly n_tokens
    // positions (invalid_argument otherwise; unsupported without recurrent state).
    virtual result<state_snapshot_ptr> snapshot_state(int32_t session, int64_t n_tokens) const {
        (void)session;
        (void)n_tokens;
        return make_error(error_code::unsupported, "this stage has no recurrent state");
    }
    // Validates a serialized snapshot completely — framing, checksum (integrity),
    // namespace `ns`, shape and position equal to the session's KV length (invalid_data),
    // version (unsupported) — and only then makes it the session's recurrent state.
    // The session's KV must already hold the snapshot's positions.
    virtual status import_state(int32_t session, std::span<const uint8_t> snapshot, const digest256 & ns) {
        (void)session;
        (void)snapshot;
        (void)ns;
        return make_error(error_code::unsupported, "this stage has no recurrent state");
    }
};

using kv_backend_ptr = std::shared_ptr<kv_backend_i>;

}  // namespace skippy::cache
