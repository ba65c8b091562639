#include "cache/resident_cache.h"

#include <string>

namespace skippy::cache {

resident_cache::resident_cache(radix_index & index, kv_backend_i & backend, const resident_config & config)
    : index_(index), backend_(backend), config_(config) {}

resident_cache::~resident_cache() {
    for (auto & [id, blocks] : blocks_) {
        (void)index_.remove(id, removal_reason::dropped);
        backend_.release(blocks);
    }
}

result<resident_record_result> resident_cache::record(const digest256 & ns, std::span<const token_id> tokens,
                                                      int32_t session, const evict_hook & on_evict) {
    resident_record_result out;
    if (!enabled()) return out;
    if (tokens.empty()) return make_error(error_code::invalid_argument, "resident record without tokens");
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (index_.peek(ns, tokens, entry_kind::resident).matched_tokens == n) {
        out.outcome = resident_record_outcome::covered;
        return out;
    }
    SKIPPY_ASSIGN_OR_RETURN(std::vector<kv_block_id> blocks, backend_.session_blocks(session, n));

    insert_result ir = index_.insert(ns, tokens, entry_kind::resident);
    backend_.retain(blocks);
    n_blocks_held_ += static_cast<int64_t>(blocks.size());
    blocks_.emplace(ir.id, std::move(blocks));
    // Pinned while the cap is enforced, so it is never its own victim.
    (void)index_.acquire(ir.id);

    // Shorter entries on the same path serve nothing the new one does not.
    for (entry_id a : index_.ancestors_with(ir.id, entry_kind::resident)) {
        if (index_.find(a)->refs > 0) continue;  // in use: it goes later, by eviction
        if (drop(a, removal_reason::covered, nullptr).is_ok()) {
            ++n_covered_removals_;
            ++out.n_covered_removed;
        }
    }
    while (index_.n_entries(entry_kind::resident) > config_.max_entries) {
        entry_id victim = index_.next_victim(entry_kind::resident);
        if (victim == no_entry || !drop(victim, removal_reason::evicted, &on_evict).is_ok()) {
            // Every other entry is in use: the new one does not fit.
            (void)index_.release(ir.id);
            (void)drop(ir.id, removal_reason::dropped, nullptr);
            ++n_full_;
            out.outcome = resident_record_outcome::full;
            return out;
        }
        ++n_evictions_;
        ++out.n_evicted;
    }
    (void)index_.release(ir.id);
    ++n_records_;
    out.outcome = resident_record_outcome::recorded;
    out.id = ir.id;
    return out;
}

match_result resident_cache::peek(const digest256 & ns, std::span<const token_id> tokens) const {
    return index_.peek(ns, tokens, entry_kind::resident);
}

status resident_cache::restore(entry_id id, int32_t session, int64_t n_tokens) {
    auto it = blocks_.find(id);
    const entry_info * info = index_.find(id);
    if (it == blocks_.end() || !info) return make_error(error_code::not_found, "resident entry " + std::to_string(id) + " not held");
    if (n_tokens <= 0 || n_tokens > info->n_tokens) {
        return make_error(error_code::internal, "resident restore of " + std::to_string(n_tokens) + " tokens from an entry of " +
                                                    std::to_string(info->n_tokens));
    }
    const int64_t bt = backend_.block_tokens();
    const size_t n_blocks = static_cast<size_t>((n_tokens + bt - 1) / bt);
    SKIPPY_TRY(backend_.share_into(session, std::span<const kv_block_id>(it->second.data(), n_blocks), n_tokens));
    ++n_restores_;
    return status::ok();
}

make_room_result resident_cache::make_room(int64_t n_blocks, const evict_hook & on_evict) {
    make_room_result out;
    out.n_free_blocks = backend_.n_free_blocks();
    while (out.n_free_blocks < n_blocks) {
        entry_id victim = index_.next_victim(entry_kind::resident);
        if (victim == no_entry) break;
        if (!drop(victim, removal_reason::evicted, &on_evict).is_ok()) break;
        ++n_evictions_;
        ++out.n_evicted;
        out.n_free_blocks = backend_.n_free_blocks();
    }
    out.enough = out.n_free_blocks >= n_blocks;
    return out;
}

status resident_cache::evict(entry_id id, const evict_hook & on_evict) {
    SKIPPY_TRY(drop(id, removal_reason::evicted, &on_evict));
    ++n_evictions_;
    return status::ok();
}

status resident_cache::drop(entry_id id, removal_reason reason, const evict_hook * on_evict) {
    auto it = blocks_.find(id);
    const entry_info * info = index_.find(id);
    if (it == blocks_.end() || !info) return make_error(error_code::not_found, "resident entry " + std::to_string(id) + " not held");
    if (info->refs > 0) return make_error(error_code::unavailable, "resident entry " + std::to_string(id) + " is in use");
    if (on_evict && *on_evict) {
        std::vector<token_id> tokens = index_.tokens_of(id);
        (*on_evict)(evicted_resident{id, info->ns, tokens, it->second});
    }
    SKIPPY_TRY(index_.remove(id, reason));
    backend_.release(it->second);
    n_blocks_held_ -= static_cast<int64_t>(it->second.size());
    blocks_.erase(it);
    return status::ok();
}

resident_stats resident_cache::stats() const {
    resident_stats s;
    s.n_entries = static_cast<int64_t>(blocks_.size());
    s.n_blocks_held = n_blocks_held_;
    s.n_records = n_records_;
    s.n_restores = n_restores_;
    s.n_evictions = n_evictions_;
    s.n_covered_removals = n_covered_removals_;
    s.n_full = n_full_;
    return s;
}

status resident_cache::check_invariants() const {
    if (index_.n_entries(entry_kind::resident) != static_cast<int64_t>(blocks_.size())) {
        return make_error(error_code::internal, "resident invariant: index and tier disagree on entries");
    }
    const int64_t bt = backend_.block_tokens();
    int64_t held = 0;
    for (const auto & [id, blocks] : blocks_) {
        const entry_info * info = index_.find(id);
        if (!info || info->kind != entry_kind::resident) return make_error(error_code::internal, "resident invariant: entry missing");
        if (static_cast<int64_t>(blocks.size()) != (info->n_tokens + bt - 1) / bt) {
            return make_error(error_code::internal, "resident invariant: blocks do not match tokens");
        }
        held += static_cast<int64_t>(blocks.size());
    }
    if (held != n_blocks_held_) return make_error(error_code::internal, "resident invariant: held block count");
    return status::ok();
}

}  // namespace skippy::cache
