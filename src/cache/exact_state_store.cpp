#include "cache/exact_state_store.h"

#include <algorithm>
#include <cassert>

namespace skippy::cache {

exact_state_store::exact_state_store(radix_index & index, const exact_state_config & config)
    : index_(index), config_(config), blobs_(config.block_bytes > 0 ? config.block_bytes : 1) {}

exact_state_store::~exact_state_store() {
    std::vector<entry_id> ids;
    for (const auto & [id, pages] : pages_) ids.push_back(id);
    for (entry_id id : ids) {
        // Entries still referenced at shutdown are a caller bug; drop ours regardless
        // of the index so no blob outlives the store.
        (void)index_.remove(id, removal_reason::dropped);
        for (const stored_page & p : pages_.at(id)) (void)blobs_.release_all(p.blobs);
        pages_.erase(id);
    }
}

result<exact_insert_result> exact_state_store::insert(const digest256 & ns, std::span<const token_id> tokens,
                                                      std::vector<page_bytes> pages) {
    return insert(ns, tokens, std::span<const page_bytes>(pages));
}

result<exact_insert_result> exact_state_store::insert(const digest256 & ns, std::span<const token_id> tokens,
                                                      std::span<const page_bytes> pages) {
    return insert(ns, tokens, std::vector<held_page>{}, pages);
}

std::vector<held_page> exact_state_store::hold_leading_pages(const digest256 & ns, std::span<const token_id> tokens,
                                                            std::span<const std::string> page_ids) {
    std::vector<held_page> held;
    const match_result m = index_.peek_common(ns, tokens, entry_kind::exact_state);
    auto it = pages_.find(m.id);
    if (m.id == no_entry || it == pages_.end()) return held;
    int64_t next = 0;
    for (const stored_page & sp : it->second) {
        const size_t i = held.size();
        if (i >= page_ids.size() || sp.kind != page_kind::kv || sp.token_start != next ||
            sp.token_start + sp.token_count > m.matched_tokens || sp.page_id != page_ids[i]) {
            break;
        }
        // A block found bad (unlinked) is not shared: the record exports that page afresh,
        // as a put of its bytes would store a fresh copy.
        if (!std::all_of(sp.blobs.begin(), sp.blobs.end(), [&](blob_id b) { return blobs_.linked(b); })) break;
        held.push_back(held_page{sp.token_start, sp.token_count, sp.page_id, sp.blobs, sp.n_bytes});
        for (blob_id b : sp.blobs) {
            const status st = blobs_.retain(b);
            assert(st.is_ok() && "an entry's blocks are held");
            (void)st;
        }
        n_held_refs_ += static_cast<int64_t>(sp.blobs.size());
        next += sp.token_count;
    }
    return held;
}

void exact_state_store::release_held(std::span<const held_page> held) {
    for (const held_page & h : held) {
        (void)blobs_.release_all(h.blobs);
        n_held_refs_ -= static_cast<int64_t>(h.blobs.size());
    }
}

result<exact_insert_result> exact_state_store::insert(const digest256 & ns, std::span<const token_id> tokens, std::vector<held_page> held,
                                                      std::span<const page_bytes> pages) {
    // The held references are ours to release unless the entry takes them.
    struct give_back {
        exact_state_store &      store;
        std::vector<held_page> & held;
        ~give_back() { store.release_held(held); }
    } guard{*this, held};
    if (config_.hard_limit_bytes <= 0) return make_error(error_code::unavailable, "exact-state tier is off");
    if (tokens.empty()) return make_error(error_code::invalid_argument, "exact-state insert without tokens");
    int64_t next = 0;
    size_t n_state = 0;
    for (const held_page & h : held) {
        if (h.token_start != next || h.token_count <= 0 || h.blobs.empty()) {
            return make_error(error_code::invalid_argument, "held exact-state pages are not contiguous from 0");
        }
        next += h.token_count;
    }
    for (const page_bytes & p : pages) {
        if (p.bytes.empty()) return make_error(error_code::invalid_argument, "exact-state page without bytes");
        if (p.kind == page_kind::state) {
            ++n_state;
            continue;  // checked below, against the KV pages' end
        }
        if (n_state > 0 || p.token_start != next || p.token_count <= 0) {
            return make_error(error_code::invalid_argument, "exact-state pages are not contiguous from 0");
        }
        next += p.token_count;
    }
    if (next != static_cast<int64_t>(tokens.size())) {
        return make_error(error_code::invalid_argument, "exact-state pages cover " + std::to_string(next) + " of " +
                                                            std::to_string(tokens.size()) + " tokens");
    }
    if (n_state > 1 || (n_state == 1 && (pages.back().token_start != 0 || pages.back().token_count != next))) {
        return make_error(error_code::invalid_argument, "an exact-state entry holds at most one state page, last, of its whole length");
    }

    insert_result ir = index_.insert(ns, tokens, entry_kind::exact_state);
    if (!ir.inserted) return exact_insert_result{ir.id, false, 0};

    std::vector<stored_page> stored;
    std::vector<blob_id> all;
    for (held_page & h : held) {
        n_held_refs_ -= static_cast<int64_t>(h.blobs.size());
        all.insert(all.end(), h.blobs.begin(), h.blobs.end());
        stored.push_back(stored_page{h.token_start, h.token_count, std::move(h.page_id), std::move(h.blobs), page_kind::kv, h.n_bytes});
    }
    held.clear();  // the entry holds those references now
    for (const page_bytes & p : pages) {
        stored_page sp{p.token_start, p.token_count, p.page_id,
                       p.block_digests.empty() ? blobs_.put(p.bytes) : blobs_.put(p.bytes, p.block_digests), p.kind,
                       static_cast<int64_t>(p.bytes.size())};
        if (p.kind == page_kind::state) {
            ++n_state_pages_;
            state_bytes_ += sp.n_bytes;
        }
        all.insert(all.end(), sp.blobs.begin(), sp.blobs.end());
        stored.push_back(std::move(sp));
    }
    n_pages_ += static_cast<int64_t>(stored.size());
    pages_.emplace(ir.id, std::move(stored));

    auto refuse = [&](const std::string & why) -> status {
        (void)drop(ir.id, removal_reason::dropped);
        ++n_refused_;
        return make_error(error_code::unavailable, "exact-state entry refused: " + why);
    };
    if (blobs_.unique_bytes(all) > config_.hard_limit_bytes) return refuse("larger than the hard limit");

    exact_insert_result out{ir.id, true, 0};
    out.n_evicted += evict_to(config_.hard_limit_bytes, ir.id);
    if (blobs_.stats().physical_bytes > config_.hard_limit_bytes) return refuse("entries in use hold the space");
    ++n_inserts_;
    out.n_evicted += evict_to(config_.soft_limit_bytes, ir.id);
    return out;
}

int64_t exact_state_store::evict_to(int64_t limit_bytes, entry_id keep) {
    // A reference on `keep` takes it out of the eviction order for the duration.
    const bool pinned = keep != no_entry && index_.acquire(keep).is_ok();
    int64_t n = 0;
    while (blobs_.stats().physical_bytes > limit_bytes && pages_.size() > 1) {
        entry_id victim = index_.next_victim(entry_kind::exact_state);
        if (victim == no_entry) break;
        if (!drop(victim, removal_reason::evicted).is_ok()) break;
        ++n_evictions_;
        ++n;
    }
    if (pinned) (void)index_.release(keep);
    return n;
}

result<std::vector<page_bytes>> exact_state_store::read_pages(entry_id id, int64_t max_tokens) {
    std::vector<std::vector<uint8_t>> none;
    return read_pages(id, max_tokens, none);
}

status exact_state_store::verify(entry_id id) {
    auto it = pages_.find(id);
    if (it == pages_.end()) return make_error(error_code::not_found, "exact-state entry " + std::to_string(id) + " not held");
    status first;
    for (const stored_page & sp : it->second) {
        status st = blobs_.verify(sp.blobs);
        if (!st.is_ok() && first.is_ok()) first = st;
    }
    return first;
}

result<std::vector<page_bytes>> exact_state_store::read_pages(entry_id id, int64_t max_tokens,
                                                              std::vector<std::vector<uint8_t>> & spare, bool verify) {
    auto it = pages_.find(id);
    if (it == pages_.end()) return make_error(error_code::not_found, "exact-state entry " + std::to_string(id) + " not held");
    std::vector<page_bytes> out;
    for (const stored_page & sp : it->second) {
        // A state page stands for the entry's whole length: only a read of all of it gets it.
        if (sp.kind == page_kind::state ? sp.token_count > max_tokens : sp.token_start >= max_tokens) continue;
        // The smallest spare vector that holds the page without growing, else the largest.
        std::vector<uint8_t> bytes;
        size_t pick = spare.size();
        for (size_t i = 0; i < spare.size(); ++i) {
            const size_t cap = spare[i].capacity(), need = static_cast<size_t>(sp.n_bytes);
            if (pick == spare.size()) {
                pick = i;
                continue;
            }
            const size_t best = spare[pick].capacity();
            if ((cap >= need && (best < need || cap < best)) || (best < need && cap > best)) pick = i;
        }
        if (pick < spare.size()) {
            bytes = std::move(spare[pick]);
            spare.erase(spare.begin() + static_cast<ptrdiff_t>(pick));
        }
        SKIPPY_TRY(blobs_.read_into(sp.blobs, bytes, verify));
        out.push_back(page_bytes{sp.token_start, sp.token_count, sp.page_id, std::move(bytes), {}, sp.kind});
    }
    return out;
}

status exact_state_store::drop(entry_id id, removal_reason reason) {
    auto it = pages_.find(id);
    if (it == pages_.end()) return make_error(error_code::not_found, "exact-state entry " + std::to_string(id) + " not held");
    SKIPPY_TRY(index_.remove(id, reason));
    status first;
    for (const stored_page & sp : it->second) {
        status st = blobs_.release_all(sp.blobs);
        if (!st.is_ok() && first.is_ok()) first = st;
    }
    n_pages_ -= static_cast<int64_t>(it->second.size());
    for (const stored_page & sp : it->second) {
        if (sp.kind != page_kind::state) continue;
        --n_state_pages_;
        state_bytes_ -= sp.n_bytes;
    }
    pages_.erase(it);
    return first;
}

status exact_state_store::evict(entry_id id) {
    SKIPPY_TRY(drop(id, removal_reason::evicted));
    ++n_evictions_;
    return status::ok();
}

status exact_state_store::quarantine(entry_id id) {
    SKIPPY_TRY(drop(id, removal_reason::quarantined));
    ++n_quarantines_;
    return status::ok();
}

exact_state_stats exact_state_store::stats() const {
    exact_state_stats s;
    s.n_entries = static_cast<int64_t>(pages_.size());
    s.n_pages = n_pages_;
    s.n_state_pages = n_state_pages_;
    s.state_bytes = state_bytes_;
    s.blobs = blobs_.stats();
    s.n_inserts = n_inserts_;
    s.n_refused = n_refused_;
    s.n_evictions = n_evictions_;
    s.n_quarantines = n_quarantines_;
    return s;
}

std::vector<blob_id> exact_state_store::blobs_for_testing(entry_id id) const {
    std::vector<blob_id> out;
    auto it = pages_.find(id);
    if (it == pages_.end()) return out;
    for (const stored_page & sp : it->second) out.insert(out.end(), sp.blobs.begin(), sp.blobs.end());
    return out;
}

std::vector<entry_id> exact_state_store::entries_for_testing() const {
    std::vector<entry_id> out;
    for (const auto & [id, pages] : pages_) out.push_back(id);
    return out;
}

status exact_state_store::check_invariants() const {
    SKIPPY_TRY(blobs_.check_invariants());
    if (index_.n_entries(entry_kind::exact_state) != static_cast<int64_t>(pages_.size())) {
        return make_error(error_code::internal, "exact-state invariant: index and store disagree on entries");
    }
    int64_t n_pages = 0, n_block_refs = 0, n_state = 0, state_bytes = 0;
    for (const auto & [id, pages] : pages_) {
        const entry_info * info = index_.find(id);
        if (!info || info->kind != entry_kind::exact_state) {
            return make_error(error_code::internal, "exact-state invariant: entry missing from the index");
        }
        int64_t next = 0;
        for (const stored_page & sp : pages) {
            n_block_refs += static_cast<int64_t>(sp.blobs.size());
            if (sp.kind == page_kind::state) {
                ++n_state;
                state_bytes += sp.n_bytes;
                if (&sp != &pages.back() || sp.token_count != info->n_tokens) {
                    return make_error(error_code::internal, "exact-state invariant: a state page not last or not of the entry's length");
                }
                continue;
            }
            if (sp.token_start != next) return make_error(error_code::internal, "exact-state invariant: page gap");
            next += sp.token_count;
        }
        if (next != info->n_tokens) return make_error(error_code::internal, "exact-state invariant: pages vs tokens");
        n_pages += static_cast<int64_t>(pages.size());
    }
    if (n_pages != n_pages_) return make_error(error_code::internal, "exact-state invariant: page count");
    if (n_state != n_state_pages_ || state_bytes != state_bytes_) {
        return make_error(error_code::internal, "exact-state invariant: state page count or bytes");
    }
    // Held pages (hold_leading_pages) keep references of their own until an insert takes them.
    if (n_block_refs + n_held_refs_ != blobs_.stats().n_refs) return make_error(error_code::internal, "exact-state invariant: blob references");
    return status::ok();
}

}  // namespace skippy::cache
