// Paged KV storage for one stage (DESIGN §4).
//
// A kv_pool owns fixed-size blocks, each holding `block_tokens` consecutive positions
// of K and V for every layer the stage runs. Blocks are refcounted: a session's
// kv_sequence and any number of cached prefixes may share a block, and a write to a
// shared block first copies it (copy on write), so sharing never changes what another
// holder reads.
//
// Block layout (bytes), for KV layer il in [0, n_layers) (the stage's layers with KV, in order):
//   [il][K rows: block_tokens x row_bytes][V rows: block_tokens x row_bytes]
// where row_bytes = kv_dim x element size, kv_dim = n_head_kv x head_dim.
#pragma once

#include "base/status.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace skippy {

enum class kv_dtype : uint8_t { f32 = 0, f16 = 1 };

struct kv_geometry {
    int32_t  n_layers = 0;      // layers of this stage that keep KV (a hybrid model's recurrent layers keep none)
    int32_t  kv_dim = 0;        // elements per K (and per V) row
    int32_t  block_tokens = 16; // positions per block
    kv_dtype dtype = kv_dtype::f16;

    size_t elem_bytes() const { return dtype == kv_dtype::f16 ? 2 : 4; }
    size_t row_bytes() const { return static_cast<size_t>(kv_dim) * elem_bytes(); }
    size_t layer_bytes() const { return 2 * static_cast<size_t>(block_tokens) * row_bytes(); }
    size_t block_bytes() const { return static_cast<size_t>(n_layers) * layer_bytes(); }
};

using kv_block_id = int32_t;

class kv_pool {
public:
    // Reserves n_blocks blocks of address space; pages are committed on first write.
    kv_pool(const kv_geometry & geometry, int64_t n_blocks);
    ~kv_pool();
    kv_pool(const kv_pool &) = delete;
    kv_pool & operator=(const kv_pool &) = delete;

    const kv_geometry & geometry() const { return geometry_; }
    int64_t n_blocks() const { return n_blocks_; }
    int64_t n_free() const;
    // Blocks allocate() has handed out since the pool was made.
    int64_t n_allocations() const;

    // A free block with refcount 1; unavailable when the pool is exhausted.
    result<kv_block_id> allocate();
    // REQUIRES: refcount(id) > 0.
    void retain(kv_block_id id);
    // REQUIRES: refcount(id) > 0. The block returns to the free list at zero.
    void release(kv_block_id id);
    int32_t refcount(kv_block_id id) const;

    uint8_t * block_data(kv_block_id id) const { return base_ + static_cast<size_t>(id) * geometry_.block_bytes(); }
    uint8_t * k_rows(kv_block_id id, int32_t il) const { return block_data(id) + static_cast<size_t>(il) * geometry_.layer_bytes(); }
    uint8_t * v_rows(kv_block_id id, int32_t il) const {
        return k_rows(id, il) + static_cast<size_t>(geometry_.block_tokens) * geometry_.row_bytes();
    }

private:
    kv_geometry             geometry_;
    int64_t                 n_blocks_;
    uint8_t *               base_ = nullptr;
    size_t                  mapped_bytes_ = 0;
    mutable std::mutex      mutex_;
    std::vector<int32_t>    refcounts_;
    int64_t                 n_allocations_ = 0;
    std::vector<kv_block_id> free_;  // LIFO: recently freed blocks are warm in cache
};

// A session's block table: positions [0, n_tokens()) hold valid K/V.
class kv_sequence {
public:
    explicit kv_sequence(kv_pool & pool) : pool_(&pool) {}
    ~kv_sequence() { clear(); }
    kv_sequence(const kv_sequence &) = delete;
    kv_sequence & operator=(const kv_sequence &) = delete;

    kv_pool & pool() const { return *pool_; }
    int64_t n_tokens() const { return n_tokens_; }
    const std::vector<kv_block_id> & blocks() const { return blocks_; }

    // Makes positions [pos_start, pos_start + n) writable and sets n_tokens() to
    // pos_start + n (positions after that are dropped). Blocks are allocated as needed
    // and a shared block in the range is copied first. On error (pool exhausted,
    // pos_start > n_tokens()) nothing visible changes except that n_tokens() may have
    // been truncated to pos_start. When the sequence already holds exactly pos_start + n
    // positions and owns every block from pos_start's on (a repeated call), the blocks
    // stay as they are: none is released and allocated again.
    status prepare_write(int64_t pos_start, int64_t n);

    // Keeps positions [0, n) and releases blocks past them. REQUIRES: n >= 0.
    void truncate(int64_t n);
    void clear() { truncate(0); }

    // Replaces the contents with a shared prefix: `blocks` cover positions [0, n_tokens).
    // REQUIRES: blocks.size() == ceil(n_tokens / block_tokens); each block is live.
    void share_from(std::span<const kv_block_id> blocks, int64_t n_tokens);

    // Pointers for position pos of local layer il. REQUIRES: pos < blocks()*block_tokens.
    uint8_t * k_row(int32_t il, int64_t pos) const { return row(pool_->k_rows(block_of(pos), il), pos); }
    uint8_t * v_row(int32_t il, int64_t pos) const { return row(pool_->v_rows(block_of(pos), il), pos); }

private:
    // Whether blocks [first, end) are referenced by this sequence alone.
    bool owns_blocks_from(size_t first) const;
    kv_block_id block_of(int64_t pos) const { return blocks_[static_cast<size_t>(pos / pool_->geometry().block_tokens)]; }
    uint8_t * row(uint8_t * base, int64_t pos) const {
        return base + static_cast<size_t>(pos % pool_->geometry().block_tokens) * pool_->geometry().row_bytes();
    }

    kv_pool *                pool_;
    std::vector<kv_block_id> blocks_;
    int64_t                  n_tokens_ = 0;
};

}  // namespace skippy
