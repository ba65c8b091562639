// Content-addressed block store for serialized KV pages (DESIGN §6 "Exact state").
//
// Data is cut into fixed-size blocks (the last one shorter); each block is stored once
// under its SHA-256, with a reference count. Identical pages — the chunks of a shared
// prompt prefix recorded by many requests — therefore cost their bytes once:
//
//   put(page A) = [a0 a1 a2]         physical: a0 a1 a2 b2      = 4 blocks
//   put(page B) = [a0 a1 b2]         logical:  a0 a1 a2 a0 a1 b2 = 6 blocks
//                                    refs:     a0:2 a1:2 a2:1 b2:1
//
// Holders name blocks by blob_id, not by digest, so a block whose bytes went bad can be
// unlinked from the content index (new puts of that content store a fresh copy) while
// its holders still release it by id.
//
// Not thread-safe: the caller serializes.
#pragma once

#include "base/status.h"
#include "cache/digest.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

using blob_id = uint64_t;

struct blob_stats {
    int64_t n_blocks = 0;        // distinct blocks stored
    int64_t physical_bytes = 0;  // bytes of distinct blocks
    int64_t logical_bytes = 0;   // sum over blocks of refs * size: what holders see
    int64_t n_refs = 0;
    // Cumulative:
    int64_t n_dedupe_hits = 0;         // blocks a put found already stored
    int64_t n_integrity_failures = 0;  // blocks whose bytes no longer match their hash
    int64_t n_underflows = 0;          // releases of a block not held (refused)
};

class blob_store {
public:
    // REQUIRES: block_bytes > 0.
    explicit blob_store(size_t block_bytes);

    size_t block_bytes() const { return block_bytes_; }

    // Stores data as ceil(size / block_bytes) blocks and takes one reference on each;
    // the ids, in order, concatenate back to data. Empty data gives no blocks.
    std::vector<blob_id> put(std::span<const uint8_t> data);
    // The same with the blocks' hashes already computed (by block_digests, with this
    // store's block_bytes), so a caller can hash outside the lock that serializes it.
    // REQUIRES: digests == block_digests(data, block_bytes()).
    std::vector<blob_id> put(std::span<const uint8_t> data, std::span<const digest256> digests);

    // The SHA-256 of each block put(data) would store. Pure; safe on any thread.
    static std::vector<digest256> block_digests(std::span<const uint8_t> data, size_t block_bytes);

    // Bytes put(data) would add to physical_bytes right now (blocks not yet stored).
    int64_t new_bytes_for(std::span<const uint8_t> data) const;

    // One more reference. not_found for a block not held.
    status retain(blob_id id);
    // Whether the block is held and still in the content index: false once it failed a
    // verification (a put of its content would store a fresh copy).
    bool linked(blob_id id) const;
    // One reference less; the block goes at zero. A block not held is an underflow:
    // internal status, counted, nothing changes.
    status release(blob_id id);
    // Releases each id; returns the first error after trying them all.
    status release_all(std::span<const blob_id> ids);

    // The blocks' bytes concatenated. Each block is re-hashed first: integrity when one
    // no longer matches its address (that block is unlinked from the content index);
    // not_found for an id not held.
    result<std::vector<uint8_t>> read(std::span<const blob_id> ids);
    // The same into `out` (replaced; its capacity is kept, so a caller reusing one buffer
    // for pages of megabytes pays no fresh memory). On error `out` is empty. With
    // verify false the blocks are not re-hashed: for bytes that carry a checksum of
    // their own, which the reader checks (and, when it fails, calls verify).
    status read_into(std::span<const blob_id> ids, std::vector<uint8_t> & out, bool verify = true);
    // Re-hashes the blocks: integrity when one no longer matches its address (each bad
    // one is unlinked from the content index, as read does); not_found for an id not held.
    status verify(std::span<const blob_id> ids);

    // Bytes of the distinct blocks among ids (a block named twice counts once); ids not
    // held count 0.
    int64_t unique_bytes(std::span<const blob_id> ids) const;

    blob_stats stats() const;

    // ok, or internal naming a broken invariant (counts, index links). For tests.
    status check_invariants() const;

    // Test hook: flips the low bit of byte `offset` of a stored block (the stored copy,
    // as memory corruption would). false when the id or offset does not exist.
    bool corrupt_for_testing(blob_id id, size_t offset);

private:
    struct block {
        digest256            digest;
        std::vector<uint8_t> bytes;
        int64_t              refs = 0;
        bool                 linked = true;  // reachable by digest for dedupe
    };

    size_t                                                    block_bytes_;
    std::unordered_map<blob_id, block>                        blocks_;
    std::unordered_map<digest256, blob_id, digest256_hash>    by_digest_;
    blob_id                                                   next_id_ = 1;
    int64_t                                                   physical_bytes_ = 0;
    int64_t                                                   logical_bytes_ = 0;
    int64_t                                                   n_refs_ = 0;
    int64_t                                                   n_dedupe_hits_ = 0;
    int64_t                                                   n_integrity_failures_ = 0;
    int64_t                                                   n_underflows_ = 0;
};

}  // namespace skippy::cache
