#include "cache/pool_kv_backend.h"

#include <cassert>
#include <string>

namespace skippy::cache {
namespace {

int64_t blocks_for(int64_t n_tokens, int64_t block_tokens) { return (n_tokens + block_tokens - 1) / block_tokens; }

}  // namespace

pool_kv_backend::pool_kv_backend(kv_pool & pool, std::vector<kv_sequence *> sessions, int32_t layer_start,
                                 int32_t layer_end)
    : pool_(pool),
      sessions_(std::move(sessions)),
      geometry_{layer_start, layer_end, pool.geometry().kv_dim, pool.geometry().dtype, pool.geometry().n_layers} {
    assert(pool.geometry().n_layers >= 1 && pool.geometry().n_layers <= layer_end - layer_start);
}

int32_t pool_kv_backend::block_tokens() const { return pool_.geometry().block_tokens; }
int64_t pool_kv_backend::n_free_blocks() const { return pool_.n_free(); }
int64_t pool_kv_backend::bytes_per_token() const {
    return static_cast<int64_t>(pool_.geometry().n_layers) * 2 * static_cast<int64_t>(pool_.geometry().row_bytes());
}

result<kv_sequence *> pool_kv_backend::session(int32_t s) const {
    if (s < 0 || static_cast<size_t>(s) >= sessions_.size() || !sessions_[static_cast<size_t>(s)]) {
        return make_error(error_code::invalid_argument, "unknown KV session " + std::to_string(s));
    }
    return sessions_[static_cast<size_t>(s)];
}

result<int64_t> pool_kv_backend::session_tokens(int32_t s) const {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    return seq->n_tokens();
}

result<std::vector<kv_block_id>> pool_kv_backend::session_blocks(int32_t s, int64_t n_tokens) const {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    if (n_tokens < 0 || n_tokens > seq->n_tokens()) {
        return make_error(error_code::invalid_argument, "session " + std::to_string(s) + " holds " +
                                                            std::to_string(seq->n_tokens()) + " tokens, not " +
                                                            std::to_string(n_tokens));
    }
    const auto & blocks = seq->blocks();
    return std::vector<kv_block_id>(blocks.begin(), blocks.begin() + blocks_for(n_tokens, block_tokens()));
}

result<int64_t> pool_kv_backend::blocks_needed(int32_t s, int64_t pos_start, int64_t n_tokens) const {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    if (pos_start < 0 || n_tokens < 0 || pos_start > seq->n_tokens()) {
        return make_error(error_code::invalid_argument, "write at " + std::to_string(pos_start) + " leaves a gap");
    }
    if (n_tokens == 0) return int64_t{0};
    const int64_t bt = block_tokens();
    // After the write truncates to pos_start, the session keeps ceil(pos_start / bt)
    // blocks; the block holding pos_start is copied if it is kept and shared.
    const int64_t kept = blocks_for(pos_start, bt);
    int64_t needed = blocks_for(pos_start + n_tokens, bt) - kept;
    const size_t first = static_cast<size_t>(pos_start / bt);
    if (first < static_cast<size_t>(kept) && pool_.refcount(seq->blocks()[first]) > 1) ++needed;
    return needed;
}

void pool_kv_backend::retain(std::span<const kv_block_id> blocks) {
    for (kv_block_id b : blocks) pool_.retain(b);
}

void pool_kv_backend::release(std::span<const kv_block_id> blocks) {
    for (kv_block_id b : blocks) pool_.release(b);
}

status pool_kv_backend::share_into(int32_t s, std::span<const kv_block_id> blocks, int64_t n_tokens) {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    if (n_tokens < 0 || static_cast<int64_t>(blocks.size()) != blocks_for(n_tokens, block_tokens())) {
        return make_error(error_code::invalid_argument, std::to_string(blocks.size()) + " blocks cannot hold exactly " +
                                                            std::to_string(n_tokens) + " tokens");
    }
    seq->share_from(blocks, n_tokens);
    return status::ok();
}

status pool_kv_backend::truncate_session(int32_t s, int64_t n_tokens) {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    if (n_tokens < 0) return make_error(error_code::invalid_argument, "negative truncation");
    seq->truncate(n_tokens);
    return status::ok();
}

result<std::vector<uint8_t>> pool_kv_backend::export_page(std::span<const kv_block_id> blocks, int64_t n_tokens,
                                                          int64_t token_start, int64_t token_count) const {
    if (n_tokens < 0 || static_cast<int64_t>(blocks.size()) != blocks_for(n_tokens, block_tokens())) {
        return make_error(error_code::invalid_argument, "export from blocks that do not hold " + std::to_string(n_tokens) + " tokens");
    }
    // A private view of the blocks: it holds its own references while it reads.
    kv_sequence view(pool_);
    view.share_from(blocks, n_tokens);
    return skippy::export_page(view, geometry_.layer_start, geometry_.layer_end, token_start, token_count);
}

status pool_kv_backend::import_page(int32_t s, std::span<const uint8_t> page) {
    SKIPPY_ASSIGN_OR_RETURN(kv_sequence * seq, session(s));
    return skippy::import_page(*seq, page, geometry_);
}

}  // namespace skippy::cache
