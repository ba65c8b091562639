// Exact-state tier (L2): serialized KV pages in host memory (DESIGN §6 "Tiers").
//
// An entry is (namespace, tokens) -> the pages covering positions [0, tokens.size()),
// cut at multiples of a page size so that requests sharing a prefix produce identical
// leading pages, which the blob store keeps once:
//
//   entry [t0 .. t99]  : page [0,64) page [64,100)
//   entry [t0 .. t129] : page [0,64) page [64,128) page [128,130)
//                        └ same bytes: stored once (logical 2 pages, physical 1)
//
// Byte limits apply to physical bytes:
// - hard: once insert returns, physical <= hard. An insert first takes its blocks, then
//   evicts least recently used unreferenced entries (never itself); if that is not
//   enough it is rolled back and refused. An entry alone above hard is refused.
// - soft: after an insert, LRU entries are evicted while physical > soft — never the
//   last entry, never the one just inserted.
// A page that fails validation is never imported: the caller quarantines its entry.
//
// Not thread-safe: the caller serializes. The radix index must outlive the store.
#pragma once

#include "base/status.h"
#include "cache/blob_store.h"
#include "cache/identity.h"
#include "cache/radix_index.h"
#include "cache/tier.h"

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

struct exact_state_config {
    int64_t soft_limit_bytes = 384ll << 20;  // evict LRU down to this after an insert
    int64_t hard_limit_bytes = 512ll << 20;  // never above this; 0 disables the tier
    size_t  block_bytes = 64 << 10;          // blob block size
};

struct exact_insert_result {
    entry_id id = no_entry;
    bool     inserted = false;  // false with an id: already present (pages ignored)
    int64_t  n_evicted = 0;     // entries evicted to make it fit
};

struct exact_state_stats {
    int64_t n_entries = 0;
    int64_t n_pages = 0;       // state pages included
    int64_t n_state_pages = 0; // recurrent-state snapshots (one per entry of a stage with recurrent layers)
    int64_t state_bytes = 0;   // their bytes (logical: snapshots rarely share blocks)
    blob_stats blobs;          // physical / logical bytes, dedupe
    // Cumulative:
    int64_t n_inserts = 0;
    int64_t n_refused = 0;     // inserts that could not fit under the hard limit
    int64_t n_evictions = 0;
    int64_t n_quarantines = 0;
};

// A stored KV page whose blocks a caller holds one reference on (hold_leading_pages),
// to put into a new entry without its bytes.
struct held_page {
    int64_t              token_start = 0;
    int64_t              token_count = 0;
    std::string          page_id;
    std::vector<blob_id> blobs;
    int64_t              n_bytes = 0;
};

class exact_state_store {
public:
    exact_state_store(radix_index & index, const exact_state_config & config);
    // Releases every entry it holds (their index entries are removed).
    ~exact_state_store();
    exact_state_store(const exact_state_store &) = delete;
    exact_state_store & operator=(const exact_state_store &) = delete;

    const exact_state_config & config() const { return config_; }

    // Adds the entry for (ns, tokens) made of `pages`.
    // REQUIRES (else invalid_argument): KV pages in order, contiguous, covering exactly
    //   [0, tokens.size()), then at most one state page (token_start 0, token_count
    //   tokens.size()); !tokens.empty().
    // unavailable when it cannot fit under the hard limit (counted in n_refused).
    result<exact_insert_result> insert(const digest256 & ns, std::span<const token_id> tokens,
                                       std::vector<page_bytes> pages);
    // The same, copying the pages (the caller keeps them for other tiers).
    result<exact_insert_result> insert(const digest256 & ns, std::span<const token_id> tokens,
                                       std::span<const page_bytes> pages);

    // The leading KV pages an entry for (ns, tokens) can share with a stored entry,
    // instead of exporting and hashing them again: the entry with the longest common
    // prefix with tokens (any entry; the same tokens of the same namespace are the same
    // KV bytes), its pages in order while page i lies inside that prefix and is named
    // page_ids[i] and its blocks are all linked (none failed a verification). Each block
    // of them is retained once: hand them to insert, which takes
    // the references over, or to release_held. Changes no recency.
    std::vector<held_page> hold_leading_pages(const digest256 & ns, std::span<const token_id> tokens,
                                              std::span<const std::string> page_ids);
    void release_held(std::span<const held_page> held);
    // insert with the entry's first pages already stored: `held` (hold_leading_pages,
    // contiguous from 0), then `pages` from where they end. Takes the held references
    // over whatever the outcome (on a refusal or an entry already present they are
    // released). The same requirements and errors as insert.
    result<exact_insert_result> insert(const digest256 & ns, std::span<const token_id> tokens, std::vector<held_page> held,
                                       std::span<const page_bytes> pages);

    // The KV pages of entry id that start before max_tokens, and its state page when
    // max_tokens reaches the entry's length, each read back and checked
    // against its blob hashes: integrity when a block went bad (the caller quarantines).
    // not_found for an id this store does not hold.
    result<std::vector<page_bytes>> read_pages(entry_id id, int64_t max_tokens);
    // The same, filling the pages' byte vectors from `spare` (moved out of it, the best
    // fitting first) before allocating: a caller that hands the vectors back after use
    // restores megabytes without touching fresh memory (page faults cost more than the
    // copy). With verify false the blocks are not re-hashed: every page carries its own
    // SHA-256, which the importer checks before the first byte is used; when that fails
    // the caller calls verify(id) before quarantining, so a bad block is still unlinked.
    result<std::vector<page_bytes>> read_pages(entry_id id, int64_t max_tokens, std::vector<std::vector<uint8_t>> & spare,
                                               bool verify = true);
    // Re-hashes every block of the entry (blob_store::verify): integrity when one went
    // bad, which is unlinked from the content index.
    status verify(entry_id id);

    // Removes an unreferenced entry and releases its blocks (unavailable while
    // referenced, not_found when unknown). quarantine also counts the entry as bad.
    status evict(entry_id id);
    status quarantine(entry_id id);

    // Evicts LRU unreferenced entries while physical bytes > limit_bytes, never `keep`
    // and never the last entry. Returns how many went.
    int64_t evict_to(int64_t limit_bytes, entry_id keep = no_entry);

    bool holds(entry_id id) const { return pages_.count(id) > 0; }
    exact_state_stats stats() const;

    // Test hooks: the blob ids of an entry's pages, in order; flip a stored byte.
    std::vector<blob_id> blobs_for_testing(entry_id id) const;
    std::vector<entry_id> entries_for_testing() const;
    bool corrupt_for_testing(blob_id id, size_t offset) { return blobs_.corrupt_for_testing(id, offset); }
    // ok, or internal: every entry of the exact kind in the index is held here and the
    // blob references add up. For tests.
    status check_invariants() const;

private:
    struct stored_page {
        int64_t              token_start = 0;
        int64_t              token_count = 0;
        std::string          page_id;
        std::vector<blob_id> blobs;
        page_kind            kind = page_kind::kv;
        int64_t              n_bytes = 0;
    };
    status drop(entry_id id, removal_reason reason);

    radix_index &                                         index_;
    exact_state_config                                    config_;
    blob_store                                            blobs_;
    std::unordered_map<entry_id, std::vector<stored_page>> pages_;
    int64_t                                               n_pages_ = 0;
    int64_t                                               n_state_pages_ = 0;
    int64_t                                               state_bytes_ = 0;
    int64_t                                               n_inserts_ = 0;
    int64_t                                               n_refused_ = 0;
    int64_t                                               n_evictions_ = 0;
    int64_t                                               n_quarantines_ = 0;
    int64_t                                               n_held_refs_ = 0;  // block references out in held_pages
};

}  // namespace skippy::cache
