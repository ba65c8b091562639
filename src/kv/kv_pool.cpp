#include "kv/kv.h"

#include <sys/mman.h>

#include <cassert>
#include <cstring>
#include <new>

namespace skippy {

kv_pool::kv_pool(const kv_geometry & geometry, int64_t n_blocks) : geometry_(geometry), n_blocks_(n_blocks) {
    assert(n_blocks >= 0 && geometry.block_bytes() > 0);
    mapped_bytes_ = static_cast<size_t>(n_blocks) * geometry.block_bytes();
    if (mapped_bytes_ > 0) {
        // Anonymous mapping: untouched blocks cost address space, not memory.
        void * p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        base_ = static_cast<uint8_t *>(p);
    }
    refcounts_.assign(static_cast<size_t>(n_blocks), 0);
    free_.reserve(static_cast<size_t>(n_blocks));
    for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<kv_block_id>(i));
}

kv_pool::~kv_pool() {
    if (base_) munmap(base_, mapped_bytes_);
}

int64_t kv_pool::n_free() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(free_.size());
}

int64_t kv_pool::n_allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_allocations_;
}

result<kv_block_id> kv_pool::allocate() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
        return make_error(error_code::unavailable, "KV pool exhausted (" + std::to_string(n_blocks_) + " blocks in use)");
    }
    kv_block_id id = free_.back();
    free_.pop_back();
    refcounts_[static_cast<size_t>(id)] = 1;
    ++n_allocations_;
    return id;
}

void kv_pool::retain(kv_block_id id) {
    std::lock_guard<std::mutex> lock(mutex_);
    assert(refcounts_[static_cast<size_t>(id)] > 0);
    ++refcounts_[static_cast<size_t>(id)];
}

void kv_pool::release(kv_block_id id) {
    std::lock_guard<std::mutex> lock(mutex_);
    int32_t & rc = refcounts_[static_cast<size_t>(id)];
    assert(rc > 0);
    if (--rc == 0) free_.push_back(id);
}

int32_t kv_pool::refcount(kv_block_id id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return refcounts_[static_cast<size_t>(id)];
}

status kv_sequence::prepare_write(int64_t pos_start, int64_t n) {
    if (pos_start < 0 || n < 0 || pos_start > n_tokens_) {
        return make_error(error_code::invalid_argument, "KV write at position " + std::to_string(pos_start) +
                                                            " leaves a gap after " + std::to_string(n_tokens_) + " tokens");
    }
    const int64_t bt = pool_->geometry().block_tokens;
    const int64_t pos_end = pos_start + n;
    const size_t blocks_needed = static_cast<size_t>((pos_end + bt - 1) / bt);
    // Already prepared for this write (a stage prepares under its cache's admission,
    // then the model's pass prepares again): the blocks stay. Truncating and
    // allocating again would put them on the free list for a moment, where a restore
    // on another thread could take them.
    if (n > 0 && n_tokens_ == pos_end && blocks_.size() == blocks_needed && owns_blocks_from(static_cast<size_t>(pos_start / bt))) {
        return status::ok();
    }
    if (pos_start < n_tokens_) truncate(pos_start);

    // Copy on write: the block holding pos_start may be shared (a cached prefix whose
    // last block is partial, or a shared full block after a truncation).
    if (n > 0 && static_cast<size_t>(pos_start / bt) < blocks_.size()) {
        kv_block_id & b = blocks_[static_cast<size_t>(pos_start / bt)];
        if (pool_->refcount(b) > 1) {
            SKIPPY_ASSIGN_OR_RETURN(kv_block_id copy, pool_->allocate());
            std::memcpy(pool_->block_data(copy), pool_->block_data(b), pool_->geometry().block_bytes());
            pool_->release(b);
            b = copy;
        }
    }
    const size_t had = blocks_.size();
    while (blocks_.size() < blocks_needed) {
        auto id = pool_->allocate();
        if (!id.is_ok()) {
            while (blocks_.size() > had) { pool_->release(blocks_.back()); blocks_.pop_back(); }
            return id.error();
        }
        blocks_.push_back(*id);
    }
    n_tokens_ = pos_end;
    return status::ok();
}

bool kv_sequence::owns_blocks_from(size_t first) const {
    for (size_t i = first; i < blocks_.size(); ++i) {
        if (pool_->refcount(blocks_[i]) != 1) return false;
    }
    return true;
}

void kv_sequence::truncate(int64_t n) {
    assert(n >= 0);
    if (n >= n_tokens_) return;
    const int64_t bt = pool_->geometry().block_tokens;
    const size_t keep = static_cast<size_t>((n + bt - 1) / bt);
    while (blocks_.size() > keep) {
        pool_->release(blocks_.back());
        blocks_.pop_back();
    }
    n_tokens_ = n;
}

void kv_sequence::share_from(std::span<const kv_block_id> blocks, int64_t n_tokens) {
    const int64_t bt = pool_->geometry().block_tokens;
    assert(static_cast<int64_t>(blocks.size()) == (n_tokens + bt - 1) / bt);
    (void)bt;
    for (kv_block_id b : blocks) pool_->retain(b);  // before clearing: blocks may overlap ours
    clear();
    blocks_.assign(blocks.begin(), blocks.end());
    n_tokens_ = n_tokens;
}

}  // namespace skippy
