// Eviction order of cache entries (docs/kv-cache.md "Eviction order and cost model").
//
// Only unreferenced entries are ever ordered: the radix index keeps them, and only
// them, in one ordered set per kind, so eviction never scans past an entry in use.
//
// Resident entries go cheapest-to-recompute first, then least recently used. The cost
// of recomputing a prefix of n tokens is a prefill: a*n (every weight applied to every
// token) + b*n^2 (attention over the earlier positions), with a, b > 0 depending on
// the model. Both terms grow with n, so ordering by n ranks entries exactly as the
// model does without knowing a or b: the key's cost is n_tokens.
// Exact-state and disk entries hold no pool blocks; their tiers evict by bytes in
// plain LRU order (cost 0 for every entry).
#pragma once

#include "cache/entry.h"

#include <compare>
#include <cstdint>

namespace skippy::cache {

struct eviction_key {
    int64_t  cost = 0;            // lower is evicted first
    uint64_t last_used_tick = 0;  // then older first
    entry_id id = no_entry;       // then by id: a total order

    auto operator<=>(const eviction_key &) const = default;
};

// Relative cost of recomputing an entry of `kind` holding n_tokens tokens.
int64_t recompute_cost(entry_kind kind, int64_t n_tokens);

eviction_key make_eviction_key(entry_kind kind, int64_t n_tokens, uint64_t last_used_tick, entry_id id);

}  // namespace skippy::cache
