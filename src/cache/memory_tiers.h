// The two in-memory tiers behind cache_tier_i (tier.h): resident entries (pool
// blocks, resident_cache.h) and exact-state entries (pages in the blob store,
// exact_state_store.h). Both live in the stage cache's radix index and are called with
// the stage cache's lock held (does_io() == false).
#pragma once

#include "cache/exact_state_store.h"
#include "cache/kv_backend.h"
#include "cache/radix_index.h"
#include "cache/resident_cache.h"
#include "cache/tier.h"

#include <functional>

namespace skippy::cache {

class resident_tier final : public cache_tier_i {
public:
    // keep(ev) runs before an evicted entry's blocks go and says whether another tier
    // holds its prefix afterwards (demoted or already there). REQUIRES: cache, index
    // and backend outlive the tier.
    resident_tier(resident_cache & cache, radix_index & index, kv_backend_i & backend,
                  std::function<bool(const evicted_resident &)> keep);

    cache_tier id() const override { return cache_tier::resident; }
    bool enabled() const override { return cache_.enabled(); }
    bool does_io() const override { return false; }
    tier_peek_result peek(const tier_peek_request & req) override;
    tier_restore_result restore(const tier_restore_request & req) override;
    tier_record_result record(const tier_record_request & req) override;
    tier_store_result store(const tier_store_request & req) override;
    tier_evict_result evict(const tier_evict_request & req) override;
    tier_stats stats() const override;

    // The hook resident_cache calls on every eviction (it counts kept entries).
    const evict_hook & hook() const { return hook_; }

private:
    resident_cache &                              cache_;
    radix_index &                                 index_;
    kv_backend_i &                                backend_;
    std::function<bool(const evicted_resident &)> keep_;
    evict_hook                                    hook_;
    int64_t                                       n_kept_ = 0;
};

class exact_tier final : public cache_tier_i {
public:
    // REQUIRES: store, index and backend outlive the tier. With the backend's recurrent
    // state (has_recurrent_state), entries carry a state page and restore only whole:
    // peek answers the longest entry within the target, never a cut of a longer one.
    exact_tier(exact_state_store & store, radix_index & index, kv_backend_i & backend);

    cache_tier id() const override { return cache_tier::exact_state; }
    bool enabled() const override { return store_.config().hard_limit_bytes > 0; }
    bool does_io() const override { return false; }
    tier_peek_result peek(const tier_peek_request & req) override;
    // Imports the entry's pages up to the one covering n_tokens (with recurrent state:
    // the entry of exactly n_tokens, its KV pages and its state page); a page failing
    // validation, or such an entry without its state page, quarantines the entry.
    tier_restore_result restore(const tier_restore_request & req) override;
    // covered when an entry holds exactly these tokens, else wants_pages.
    tier_record_result record(const tier_record_request & req) override;
    tier_store_result store(const tier_store_request & req) override;
    // The same, the entry starting with `held` (exact_state_store::hold_leading_pages,
    // whose references it takes over) and req.pages covering the rest.
    tier_store_result store(const tier_store_request & req, std::vector<held_page> held);
    tier_evict_result evict(const tier_evict_request & req) override;
    tier_stats stats() const override;

private:
    exact_state_store & store_;
    radix_index &       index_;
    kv_backend_i &      backend_;
    const bool          whole_entries_;  // the backend has recurrent state
    int64_t             n_errors_ = 0;
    // The byte vectors of the last restore's pages, handed back for the next: a restore
    // reads megabytes (a state snapshot is several), and fresh memory costs a page fault
    // per 4 KiB. Holds at most what the largest restore read.
    std::vector<std::vector<uint8_t>> spare_;
};

}  // namespace skippy::cache
