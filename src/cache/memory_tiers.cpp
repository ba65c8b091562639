#include "cache/memory_tiers.h"

#include <algorithm>

namespace skippy::cache {

// ---------------------------------------------------------------------------------
// Resident

resident_tier::resident_tier(resident_cache & cache, radix_index & index, kv_backend_i & backend,
                             std::function<bool(const evicted_resident &)> keep)
    : cache_(cache), index_(index), backend_(backend), keep_(std::move(keep)) {
    hook_ = [this](const evicted_resident & ev) {
        if (keep_ && keep_(ev)) ++n_kept_;
    };
}

tier_peek_result resident_tier::peek(const tier_peek_request & req) {
    tier_peek_result r;
    r.matched_tokens = index_.peek(req.ns.hash, req.tokens, entry_kind::resident).matched_tokens;
    r.restorable_tokens = std::min(r.matched_tokens, req.target);
    return r;
}

tier_restore_result resident_tier::restore(const tier_restore_request & req) {
    tier_restore_result r;
    const match_result m = index_.lookup(req.ns.hash, req.tokens, entry_kind::resident);  // refreshes recency
    status st = cache_.restore(m.id, req.session, req.n_tokens);
    if (!st.is_ok()) {
        r.error = st.code();
        (void)backend_.truncate_session(req.session, 0);
        return r;
    }
    r.imported_pages = 1;
    return r;
}

tier_record_result resident_tier::record(const tier_record_request & req) {
    tier_record_result r;
    auto rr = cache_.record(req.ns.hash, req.tokens, req.session, hook_);
    if (!rr.is_ok()) {
        r.state = tier_record_state::error;
        r.error = rr.error().code();
        return r;
    }
    r.resident = rr->outcome;
    switch (rr->outcome) {
        case resident_record_outcome::recorded: r.state = tier_record_state::taken; break;
        case resident_record_outcome::covered: r.state = tier_record_state::covered; break;
        case resident_record_outcome::full: r.state = tier_record_state::refused; break;
        case resident_record_outcome::off: r.state = tier_record_state::off; break;
        case resident_record_outcome::unsupported: r.state = tier_record_state::refused; break;  // the cache never asks then
    }
    return r;
}

tier_store_result resident_tier::store(const tier_store_request &) {
    return tier_store_result{tier_store_state::refused, error_code::unsupported, 0, 0, 0};  // keeps blocks, not pages
}

tier_evict_result resident_tier::evict(const tier_evict_request & req) {
    const int64_t kept_before = n_kept_;
    const make_room_result m = cache_.make_room(req.free_blocks, hook_);
    tier_evict_result r;
    r.n_evicted = m.n_evicted;
    r.n_kept = n_kept_ - kept_before;
    r.n_free_blocks = m.n_free_blocks;
    r.enough = m.enough;
    return r;
}

tier_stats resident_tier::stats() const {
    const resident_stats s = cache_.stats();
    tier_stats t;
    t.evictions = s.n_evictions;
    t.entries = s.n_entries;
    t.bytes = s.n_blocks_held * backend_.bytes_per_token() * backend_.block_tokens();
    return t;
}

// ---------------------------------------------------------------------------------
// Exact state

exact_tier::exact_tier(exact_state_store & store, radix_index & index, kv_backend_i & backend)
    : store_(store), index_(index), backend_(backend), whole_entries_(backend.has_recurrent_state()) {}

tier_peek_result exact_tier::peek(const tier_peek_request & req) {
    tier_peek_result r;
    if (whole_entries_) {
        // A recurrent state cannot be cut back: only an entry within the target serves.
        const int64_t n = std::clamp<int64_t>(req.target, 0, static_cast<int64_t>(req.tokens.size()));
        r.matched_tokens = index_.peek(req.ns.hash, req.tokens.first(static_cast<size_t>(n)), entry_kind::exact_state).matched_tokens;
        r.restorable_tokens = r.matched_tokens;
        return r;
    }
    r.matched_tokens = index_.peek(req.ns.hash, req.tokens, entry_kind::exact_state).matched_tokens;
    r.restorable_tokens = std::min(r.matched_tokens, req.target);
    return r;
}

tier_restore_result exact_tier::restore(const tier_restore_request & req) {
    tier_restore_result r;
    const std::span<const token_id> query =
        whole_entries_ ? req.tokens.first(static_cast<size_t>(std::clamp<int64_t>(req.n_tokens, 0, static_cast<int64_t>(req.tokens.size()))))
                       : req.tokens;
    const match_result m = index_.lookup(req.ns.hash, query, entry_kind::exact_state);
    // The reference keeps the entry through the import's admission, which may demote
    // resident entries into this tier and so evict exact-state entries.
    if (status st = index_.acquire(m.id); !st.is_ok()) {
        r.error = st.code();
        (void)backend_.truncate_session(req.session, 0);
        ++n_errors_;
        return r;
    }
    auto fail = [&](const status & st) {
        (void)backend_.truncate_session(req.session, 0);
        (void)index_.release(m.id);
        r.error = st.code();
        ++n_errors_;
        if (is_validation_error(st.code())) {
            (void)store_.verify(m.id);  // a block gone bad leaves the content index before the entry goes
            if (store_.quarantine(m.id).is_ok()) r.quarantined = true;
        }
        return r;
    };
    if (status st = backend_.truncate_session(req.session, 0); !st.is_ok()) return fail(st);
    if (whole_entries_ && m.entry_tokens != req.n_tokens) {
        return fail(make_error(error_code::not_found, "no exact-state entry of exactly " + std::to_string(req.n_tokens) + " tokens"));
    }
    // Not re-hashed here: the importer checks every page's own SHA-256 before using a
    // byte of it (and fail() re-hashes the blocks when it refuses one).
    auto pages = store_.read_pages(m.id, req.n_tokens, spare_, /*verify=*/false);
    if (!pages.is_ok()) return fail(pages.error());
    // The vectors go back to spare_ whatever happens below.
    struct give_back {
        std::vector<page_bytes> & pages;
        std::vector<std::vector<uint8_t>> & spare;
        ~give_back() {
            for (page_bytes & p : pages) {
                if (spare.size() < 256) spare.push_back(std::move(p.bytes));  // a restore of 16k tokens at 64 per page
            }
        }
    } keep{*pages, spare_};
    if (whole_entries_ && (pages->empty() || pages->back().kind != page_kind::state)) {
        // Without its snapshot the KV would continue a state it does not match.
        return fail(make_error(error_code::invalid_data, "exact-state entry without its recurrent-state snapshot"));
    }
    if (status st = req.importer->import(req.session, *pages, req.n_tokens); !st.is_ok()) return fail(st);
    (void)index_.release(m.id);
    r.imported_pages = static_cast<int64_t>(pages->size());
    return r;
}

tier_record_result exact_tier::record(const tier_record_request & req) {
    tier_record_result r;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    r.state = index_.peek(req.ns.hash, req.tokens, entry_kind::exact_state).matched_tokens == n ? tier_record_state::covered
                                                                                               : tier_record_state::wants_pages;
    return r;
}

tier_store_result exact_tier::store(const tier_store_request & req) { return store(req, {}); }

tier_store_result exact_tier::store(const tier_store_request & req, std::vector<held_page> held) {
    tier_store_result r;
    auto ins = store_.insert(req.ns.hash, req.tokens, std::move(held), req.pages);
    if (!ins.is_ok()) {
        r.state = tier_store_state::refused;
        r.error = ins.error().code();
        ++n_errors_;
        return r;
    }
    r.state = ins->inserted ? tier_store_state::stored : tier_store_state::present;
    r.n_evicted = ins->n_evicted;
    if (ins->inserted) {
        r.n_pages_written = static_cast<int64_t>(req.pages.size());
        for (const page_bytes & p : req.pages) r.bytes_written += static_cast<int64_t>(p.bytes.size());
    }
    return r;
}

tier_evict_result exact_tier::evict(const tier_evict_request &) {
    return tier_evict_result{};  // bounded by its own byte limits, holds no pool blocks
}

tier_stats exact_tier::stats() const {
    const exact_state_stats s = store_.stats();
    tier_stats t;
    t.errors = n_errors_;
    t.evictions = s.n_evictions;
    t.entries = s.n_entries;
    t.bytes = s.blobs.physical_bytes;
    return t;
}

}  // namespace skippy::cache
