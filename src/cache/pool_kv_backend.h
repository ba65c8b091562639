// kv_backend_i over a real kv_pool and the stage's per-lane kv_sequences.
#pragma once

#include "cache/kv_backend.h"
#include "kv/kv_page.h"

#include <vector>

namespace skippy::cache {

class pool_kv_backend final : public kv_backend_i {
public:
    // sessions[i] is lane i's sequence. REQUIRES: pool and every sequence outlive this
    // object; each sequence allocates from `pool`; [layer_start, layer_end) is the
    // stage's layer range (written into pages), holding pool.geometry().n_layers layers
    // with KV (all of them, but a hybrid model's recurrent layers).
    pool_kv_backend(kv_pool & pool, std::vector<kv_sequence *> sessions, int32_t layer_start, int32_t layer_end);

    const kv_page_geometry & page_geometry() const { return geometry_; }

    int32_t block_tokens() const override;
    int64_t n_free_blocks() const override;
    int64_t bytes_per_token() const override;
    result<int64_t> session_tokens(int32_t session) const override;
    result<std::vector<kv_block_id>> session_blocks(int32_t session, int64_t n_tokens) const override;
    result<int64_t> blocks_needed(int32_t session, int64_t pos_start, int64_t n_tokens) const override;
    void retain(std::span<const kv_block_id> blocks) override;
    void release(std::span<const kv_block_id> blocks) override;
    status share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) override;
    status truncate_session(int32_t session, int64_t n_tokens) override;
    result<std::vector<uint8_t>> export_page(std::span<const kv_block_id> blocks, int64_t n_tokens, int64_t token_start,
                                             int64_t token_count) const override;
    status import_page(int32_t session, std::span<const uint8_t> page) override;

private:
    result<kv_sequence *> session(int32_t s) const;

    kv_pool &                  pool_;
    std::vector<kv_sequence *> sessions_;
    kv_page_geometry           geometry_;
};

}  // namespace skippy::cache
