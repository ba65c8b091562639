// Resident tier (L1): cached prefixes kept as references on live pool blocks
// (DESIGN §6 "Tiers"; docs/kv-cache.md "Resident tier and admission").
//
// Recording a session's prefix takes one more reference on each block backing it;
// restoring shares those blocks into another session. Nothing is copied either way;
// the pool's copy on write keeps the entry's bytes fixed when a session writes on.
//
//   fake pool, block_tokens 4, five blocks:
//   session 0 after prefilling 6 tokens    [b0: t0 t1 t2 t3][b1: t4 t5 .  .]
//   record(tokens t0..t5) -> entry E       E holds b0 b1          refcounts b0:2 b1:2
//   session 0 decodes t6 into b1           b1 shared -> copied to b2; E keeps b1
//   restore(t0..t4, session 1)             session 1 shares b0 b1 (5 tokens)
//
// The tier competes with live sessions for the pool, so before work that needs blocks
// make_room evicts unreferenced entries, cheapest to recompute first, then least
// recently used (eviction_policy.h) — never an entry in use.
//
// Not thread-safe: the caller serializes. The index and backend must outlive it.
#pragma once

#include "base/status.h"
#include "cache/identity.h"
#include "cache/kv_backend.h"
#include "cache/radix_index.h"
#include "cache/tier.h"

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

struct resident_config {
    int64_t max_entries = 256;  // entries kept at most; 0 disables the tier
};

// What an evicted entry held, shown to the eviction hook before its blocks go.
struct evicted_resident {
    entry_id                        id = no_entry;
    digest256                       ns;
    std::span<const token_id>       tokens;
    std::span<const kv_block_id>    blocks;
};
// Called before an evicted entry's blocks are released (demotion exports them).
using evict_hook = std::function<void(const evicted_resident &)>;

struct resident_record_result {
    resident_record_outcome outcome = resident_record_outcome::off;
    entry_id                id = no_entry;
    int64_t                 n_covered_removed = 0;  // shorter entries on the path it replaced
    int64_t                 n_evicted = 0;          // entries evicted for the entry cap
};

struct make_room_result {
    int64_t n_evicted = 0;
    int64_t n_free_blocks = 0;  // after eviction
    bool    enough = false;     // n_free_blocks >= the blocks asked for
};

struct resident_stats {
    int64_t n_entries = 0;
    int64_t n_blocks_held = 0;    // references held (a block shared by two entries counts twice)
    // Cumulative:
    int64_t n_records = 0;
    int64_t n_restores = 0;
    int64_t n_evictions = 0;
    int64_t n_covered_removals = 0;
    int64_t n_full = 0;           // records refused by the entry cap
};

class resident_cache {
public:
    resident_cache(radix_index & index, kv_backend_i & backend, const resident_config & config);
    // Releases every block its entries hold and removes them from the index.
    ~resident_cache();
    resident_cache(const resident_cache &) = delete;
    resident_cache & operator=(const resident_cache &) = delete;

    bool enabled() const { return config_.max_entries > 0; }

    // Keeps positions [0, tokens.size()) of `session` as the entry for (ns, tokens).
    // REQUIRES: !tokens.empty(); the session holds at least tokens.size() positions
    //   computed from exactly these tokens (else the backend's invalid_argument).
    // Shorter unreferenced entries on the same path are removed (the new entry serves
    // all they did). Above max_entries victims are evicted (through `on_evict`); when
    // every other entry is in use the new one is dropped again (outcome full).
    result<resident_record_result> record(const digest256 & ns, std::span<const token_id> tokens, int32_t session,
                                          const evict_hook & on_evict);

    // Longest match for the query without changing anything.
    match_result peek(const digest256 & ns, std::span<const token_id> tokens) const;

    // Shares the first n_tokens positions of entry `id` into `session` (replacing its
    // contents) and marks the entry used. REQUIRES: 0 < n_tokens <= the entry's tokens.
    // not_found for an id this tier does not hold; backend errors pass through.
    status restore(entry_id id, int32_t session, int64_t n_tokens);

    // Evicts unreferenced entries in eviction order until the backend has n_blocks free
    // blocks or nothing evictable remains.
    make_room_result make_room(int64_t n_blocks, const evict_hook & on_evict);

    // Evicts one unreferenced entry (unavailable while referenced, not_found if unknown).
    status evict(entry_id id, const evict_hook & on_evict);

    bool holds(entry_id id) const { return blocks_.count(id) > 0; }
    resident_stats stats() const;
    // ok, or internal: index and tier agree, every entry holds exactly the blocks for
    // its tokens. For tests.
    status check_invariants() const;

private:
    status drop(entry_id id, removal_reason reason, const evict_hook * on_evict);

    radix_index &                                           index_;
    kv_backend_i &                                          backend_;
    resident_config                                         config_;
    std::unordered_map<entry_id, std::vector<kv_block_id>>  blocks_;
    int64_t                                                 n_blocks_held_ = 0;
    int64_t                                                 n_records_ = 0;
    int64_t                                                 n_restores_ = 0;
    int64_t                                                 n_evictions_ = 0;
    int64_t                                                 n_covered_removals_ = 0;
    int64_t                                                 n_full_ = 0;
};

}  // namespace skippy::cache
