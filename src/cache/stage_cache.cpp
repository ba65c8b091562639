#include "cache/stage_cache.h"

#include <algorithm>
#include <string>

namespace skippy::cache {
namespace {

bool is_validation_error(error_code c) {
    // A page that is not what it claims to be: never imported, its entry quarantined.
    return c == error_code::integrity || c == error_code::invalid_data || c == error_code::unsupported;
}

telemetry::event make_event(std::string_view name, const cache_namespace & ns, int32_t session) {
    telemetry::event ev;
    ev.name = std::string(name);
    ev.stage = ns.stage_index;
    ev.attr("skippy.kv.session", int64_t{session});
    return ev;
}

std::string attr_text(std::string_view v) { return std::string(v); }

}  // namespace

// References on a session's blocks, taken on the request's thread and dropped wherever
// the snapshot dies (the worker, or the caller when the worker was busy).
struct stage_cache::block_snapshot {
    kv_backend_i &           backend;
    std::vector<kv_block_id> blocks;
    block_snapshot(kv_backend_i & b, std::vector<kv_block_id> ids) : backend(b), blocks(std::move(ids)) { backend.retain(blocks); }
    ~block_snapshot() { backend.release(blocks); }
    block_snapshot(const block_snapshot &) = delete;
    block_snapshot & operator=(const block_snapshot &) = delete;
};

std::string_view exact_record_state_name(exact_record_state s) {
    switch (s) {
        case exact_record_state::off: return "off";
        case exact_record_state::queued: return "queued";
        case exact_record_state::present: return "present";
        case exact_record_state::skipped_busy: return "skipped_busy";
        case exact_record_state::error: return "error";
    }
    return "error";
}

std::string_view resident_record_name(resident_record_outcome o) {
    switch (o) {
        case resident_record_outcome::recorded: return "recorded";
        case resident_record_outcome::covered: return "covered";
        case resident_record_outcome::full: return "full";
        case resident_record_outcome::off: return "off";
    }
    return "off";
}

status stage_cache_config::validate() const {
    auto bad = [](const std::string & what) { return make_error(error_code::invalid_argument, "kv cache config: " + what); };
    if (min_tokens < 1) return bad("min_tokens must be at least 1");
    if (max_entries < 0) return bad("max_entries must be >= 0");
    if (exact_max_bytes < 0 || exact_soft_bytes < 0) return bad("exact-state limits must be >= 0");
    if (exact_soft_bytes > exact_max_bytes) return bad("exact-state soft limit above the hard limit");
    if (exact_page_tokens < 1) return bad("exact_page_tokens must be >= 1");
    if (exact_block_bytes < 1 || exact_block_bytes > (int64_t{1} << 30)) return bad("exact_block_bytes must be in [1, 2^30]");
    if (activation_max_bytes < 0) return bad("activation_max_bytes must be >= 0");
    return status::ok();
}

stage_cache::stage_cache(kv_backend_i & backend, const stage_cache_config & config, telemetry::event_sink_ptr sink)
    : backend_(backend),
      config_(config),
      sink_(std::move(sink)),
      exact_(index_, exact_state_config{config.effective_soft_bytes(), config.exact_max_bytes,
                                        static_cast<size_t>(config.exact_block_bytes)}),
      resident_(index_, backend, resident_config{config.max_entries}),
      activation_(config.activation_max_bytes) {
    demote_hook_ = [this](const evicted_resident & ev) { demote_locked(ev); };
}

result<std::unique_ptr<stage_cache>> stage_cache::create(kv_backend_i & backend, const stage_cache_config & config,
                                                         telemetry::event_sink_ptr sink) {
    SKIPPY_TRY(config.validate());
    return std::make_unique<stage_cache>(backend, config, std::move(sink));
}

stage_cache::~stage_cache() = default;  // worker_ goes first (declared last), then the tiers

void stage_cache::emit(const telemetry::event & ev) const {
    if (sink_) sink_->emit(ev);
}

// ---------------------------------------------------------------------------------
// Lookups

probe_result stage_cache::probe(const probe_request & req) {
    probe_result r;
    if (!lookups_enabled()) return r;
    telemetry::event ev = make_event(lookup_event_name, req.ns, req.session);
    const int64_t target = std::min<int64_t>(std::max<int64_t>(req.max_tokens, 0), static_cast<int64_t>(req.tokens.size()));
    if (!check_token_start(req.ns).is_ok()) {
        ev.attr("skippy.kv.decision", attr_text(nonzero_token_start_decision)).attr("skippy.kv.error_class", "unsupported");
        emit(ev);
        r.decision = nonzero_token_start_decision;
        return r;
    }
    int64_t resident_tokens = 0, exact_tokens = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (resident_.enabled()) resident_tokens = std::min(index_.peek(req.ns.hash, req.tokens, entry_kind::resident).matched_tokens, target);
        if (config_.exact_max_bytes > 0) exact_tokens = std::min(index_.peek(req.ns.hash, req.tokens, entry_kind::exact_state).matched_tokens, target);
    }
    const int64_t best = std::max(resident_tokens, exact_tokens);
    if (best >= config_.min_tokens) {
        r.restorable_tokens = best;
        r.tier = resident_tokens >= exact_tokens ? cache_tier::resident : cache_tier::exact_state;
        r.outcome = best == target ? lookup_outcome::hit : lookup_outcome::short_;
    }
    r.decision = lookup_decision_name(lookup_kind::probe, r.outcome);
    ev.attr("skippy.kv.decision", attr_text(r.decision))
        .attr("skippy.kv.query_tokens", static_cast<int64_t>(req.tokens.size()))
        .attr("skippy.kv.max_tokens", req.max_tokens)
        .attr("skippy.kv.restorable_tokens", r.restorable_tokens)
        .attr("skippy.kv.tier", attr_text(cache_tier_name(r.tier)))
        .attr("skippy.kv.resident_matched_tokens", resident_tokens)
        .attr("skippy.exact_cache.matched_tokens", exact_tokens);
    emit(ev);
    return r;
}

restore_result stage_cache::restore(const restore_request & req) {
    telemetry::event ev = make_event(lookup_event_name, req.ns, req.session);
    restore_result r;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        r = restore_locked(req, ev);
    }
    if (!r.decision.empty()) {
        const int64_t n_id = r.restored_tokens > 0 ? r.restored_tokens : static_cast<int64_t>(req.tokens.size());
        ev.attr("skippy.kv.page_id", prefix_page_id(req.ns, req.tokens.first(static_cast<size_t>(n_id))));
        emit(ev);
    }
    return r;
}

restore_result stage_cache::restore_locked(const restore_request & req, telemetry::event & ev) {
    restore_result r;
    if (!lookups_enabled()) return r;  // no decision, no event: lookups are off
    const uint64_t bit = stage_bit(req.ns.stage_index);
    const int64_t target = std::min<int64_t>(std::max<int64_t>(req.max_tokens, 0), static_cast<int64_t>(req.tokens.size()));
    ev.attr("skippy.kv.query_tokens", static_cast<int64_t>(req.tokens.size())).attr("skippy.kv.max_tokens", req.max_tokens);

    auto finish = [&](lookup_outcome o) -> restore_result & {
        r.outcome = o;
        r.decision = lookup_decision_name(req.kind, o);
        if (o == lookup_outcome::error) {
            ++r.counters.kv_lookup_errors;
        } else if (r.restored_tokens > 0) {
            ++r.counters.kv_lookup_hits;
            r.counters.kv_imported_tokens += static_cast<uint64_t>(r.restored_tokens);
            r.counters.kv_imported_pages += static_cast<uint64_t>(r.imported_pages);
            r.counters.kv_hit_stage_mask |= bit;
        } else {
            ++r.counters.kv_lookup_misses;
        }
        totals_.merge(r.counters);
        ev.attr("skippy.kv.decision", attr_text(r.decision))
            .attr("skippy.kv.tier", attr_text(cache_tier_name(r.tier)))
            .attr("skippy.kv.matched_tokens", r.matched_tokens)
            .attr("skippy.kv.restored_tokens", r.restored_tokens)
            .attr("skippy.kv.imported_pages", r.imported_pages);
        if (o == lookup_outcome::error) ev.attr("skippy.kv.error_class", attr_text(error_class_name(r.error)));
        const exact_state_stats xs = exact_.stats();
        ev.attr("skippy.exact_cache.entries", xs.n_entries)
            .attr("skippy.exact_cache.physical_bytes", xs.blobs.physical_bytes)
            .attr("skippy.exact_cache.logical_bytes", xs.blobs.logical_bytes);
        return r;
    };

    if (!check_token_start(req.ns).is_ok()) {
        r.error = error_code::unsupported;
        r.decision = nonzero_token_start_decision;
        ++r.counters.kv_lookup_misses;
        totals_.merge(r.counters);
        ev.attr("skippy.kv.decision", attr_text(r.decision)).attr("skippy.kv.error_class", "unsupported");
        return r;
    }
    if (target < config_.min_tokens) return finish(lookup_outcome::miss);

    const match_result rm = resident_.enabled() ? index_.peek(req.ns.hash, req.tokens, entry_kind::resident) : match_result{};
    const match_result em = config_.exact_max_bytes > 0 ? index_.peek(req.ns.hash, req.tokens, entry_kind::exact_state) : match_result{};
    const int64_t resident_tokens = std::min(rm.matched_tokens, target);
    const int64_t exact_tokens = std::min(em.matched_tokens, target);
    r.matched_tokens = std::max(rm.matched_tokens, em.matched_tokens);
    ev.attr("skippy.kv.resident_matched_tokens", rm.matched_tokens).attr("skippy.exact_cache.matched_tokens", em.matched_tokens);

    // Resident first (no copy); exact state only when it restores more.
    cache_tier tier = cache_tier::none;
    int64_t best = 0;
    if (resident_tokens >= config_.min_tokens && resident_tokens >= exact_tokens) {
        tier = cache_tier::resident;
        best = resident_tokens;
    } else if (exact_tokens >= config_.min_tokens) {
        tier = cache_tier::exact_state;
        best = exact_tokens;
    }
    if (tier == cache_tier::none) return finish(lookup_outcome::miss);
    if (best < target && !req.allow_short) {
        // Nothing restored: a short answer is all-or-nothing for this caller.
        r.outcome = lookup_outcome::short_;
        r.decision = lookup_decision_name(req.kind, lookup_outcome::short_);
        ++r.counters.kv_lookup_misses;
        totals_.merge(r.counters);
        ev.attr("skippy.kv.decision", attr_text(r.decision))
            .attr("skippy.kv.tier", attr_text(cache_tier_name(tier)))
            .attr("skippy.kv.matched_tokens", r.matched_tokens)
            .attr("skippy.kv.restorable_tokens", best)
            .attr("skippy.kv.restored_tokens", int64_t{0});
        return r;
    }

    r.tier = tier;
    if (tier == cache_tier::resident) {
        match_result m = index_.lookup(req.ns.hash, req.tokens, entry_kind::resident);  // refreshes recency
        status st = resident_.restore(m.id, req.session, best);
        if (!st.is_ok()) {
            r.error = st.code();
            (void)backend_.truncate_session(req.session, 0);
            return finish(lookup_outcome::error);
        }
        r.imported_pages = 1;
    } else {
        match_result m = index_.lookup(req.ns.hash, req.tokens, entry_kind::exact_state);
        auto pages = restore_exact_locked(m.id, req.session, best);
        if (!pages.is_ok()) {
            r.error = pages.error().code();
            if (is_validation_error(r.error)) ev.attr("skippy.exact_cache.quarantined", true);
            return finish(lookup_outcome::error);
        }
        r.imported_pages = *pages;
    }
    r.restored_tokens = best;
    ++(tier == cache_tier::resident ? n_resident_restores_ : n_exact_restores_);
    accumulator_.seed(req.session, req.tokens.first(static_cast<size_t>(best)));
    return finish(best == target ? lookup_outcome::hit : lookup_outcome::short_);
}

result<int64_t> stage_cache::restore_exact_locked(entry_id id, int32_t session, int64_t n_tokens) {
    // The reference keeps the entry through admission below, which may demote resident
    // entries into this tier and so evict exact-state entries.
    SKIPPY_TRY(index_.acquire(id));
    auto fail = [&](const status & st) -> status {
        (void)backend_.truncate_session(session, 0);
        (void)index_.release(id);
        if (is_validation_error(st.code()) && exact_.quarantine(id).is_ok()) ++n_quarantines_;
        return st;
    };
    status st = backend_.truncate_session(session, 0);
    if (!st.is_ok()) return fail(st);
    auto pages = exact_.read_pages(id, n_tokens);
    if (!pages.is_ok()) return fail(pages.error());
    const int64_t end = pages->empty() ? 0 : pages->back().token_start + pages->back().token_count;
    const int64_t bt = backend_.block_tokens();
    (void)resident_.make_room((end + bt - 1) / bt, demote_hook_);
    for (const page_bytes & p : *pages) {
        st = backend_.import_page(session, p.bytes);
        if (!st.is_ok()) return fail(st);
    }
    st = backend_.truncate_session(session, n_tokens);
    if (!st.is_ok()) return fail(st);
    (void)index_.release(id);
    return static_cast<int64_t>(pages->size());
}

activation_restore_result stage_cache::restore_with_activation(const activation_restore_request & req) {
    activation_restore_result out;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const int64_t max_tokens = req.max_tokens < 0 ? n : std::min(req.max_tokens, n);
    telemetry::event ev = make_event(lookup_event_name, req.ns, req.session);
    const bool want_frame = lookups_enabled() && activation_.enabled() && max_tokens == n && n >= config_.min_tokens &&
                            check_token_start(req.ns).is_ok();
    activation_key key;
    if (want_frame) key = activation_key{prefix_hash(req.ns, req.tokens), n, req.width};
    // Only a full hit skips compute, and a chunk that does not skip is computed whole, so
    // KV restored without its frame, or short of it, would only be rolled back: without a
    // frame the KV is not looked up, and with one it is all-or-nothing.
    restore_request kv_req{req.ns, req.session, req.tokens, max_tokens, lookup_kind::in_band, false};
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (want_frame) out.frame = activation_.lookup(key);
        if (out.frame) out.kv = restore_locked(kv_req, ev);
    }
    if (!out.frame) {
        out.outcome = activation_outcome::miss;
    } else if (out.kv.outcome == lookup_outcome::error) {
        out.outcome = activation_outcome::kv_error;
    } else if (out.kv.outcome == lookup_outcome::hit) {
        out.outcome = activation_outcome::hit;
    } else if (out.kv.outcome == lookup_outcome::short_) {
        out.outcome = activation_outcome::prefix_short;
    } else {
        out.outcome = activation_outcome::kv_miss;
    }
    if (out.outcome != activation_outcome::hit) out.frame = nullptr;  // only a full hit may skip compute
    out.decision = activation_decision_name(out.outcome);
    if (!lookups_enabled()) return out;
    // The event's decision is the activation's; the KV decision rides along.
    for (auto & a : ev.attrs) {
        if (a.first == "skippy.kv.decision") a.first = "skippy.kv.restore_decision";
    }
    ev.attr("skippy.kv.decision", attr_text(out.decision))
        .attr("skippy.activation_cache.hit", out.outcome == activation_outcome::hit)
        .attr("skippy.activation_cache.width", int64_t{req.width})
        .attr("skippy.activation_cache.bytes", activation_.stats().n_bytes)
        .attr("skippy.kv.page_id", prefix_page_id(req.ns, req.tokens));
    emit(ev);
    return out;
}

// ---------------------------------------------------------------------------------
// Admission and demotion

admission_result stage_cache::make_room_for_write(int32_t session, int64_t pos_start, int64_t n_tokens) {
    admission_result out;
    int64_t n_demoted = 0;
    int32_t stage_index = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto needed = backend_.blocks_needed(session, pos_start, n_tokens);
        if (!needed.is_ok()) {
            out.error = needed.error().code();
            out.n_free_blocks = backend_.n_free_blocks();
            return out;
        }
        out.needed_blocks = *needed;
        const int64_t demotions_before = n_demotions_;
        make_room_result m = resident_.make_room(out.needed_blocks, demote_hook_);
        out.n_free_blocks = m.n_free_blocks;
        out.n_evicted = m.n_evicted;
        out.enough = m.enough;
        n_demoted = n_demotions_ - demotions_before;
        // Every namespace of one cache names the same stage; an eviction implies one.
        if (!namespaces_.empty()) stage_index = namespaces_.begin()->second.stage_index;
    }
    if (out.n_evicted > 0 && sink_) {  // emitted outside the lock: the sink may write a file
        telemetry::event ev;
        ev.name = std::string(eviction_event_name);
        ev.stage = stage_index;
        ev.level = telemetry::event_level::debug;
        ev.attr("skippy.kv.session", int64_t{session})
            .attr("skippy.kv.needed_blocks", out.needed_blocks)
            .attr("skippy.kv.evicted_entries", out.n_evicted)
            .attr("skippy.kv.demoted_entries", n_demoted)
            .attr("skippy.kv.free_blocks", out.n_free_blocks)
            .attr("skippy.kv.enough", out.enough);
        emit(ev);
    }
    return out;
}

void stage_cache::demote_locked(const evicted_resident & ev) {
    if (!config_.demote_on_evict || config_.exact_max_bytes <= 0) return;
    if (index_.peek(ev.ns, ev.tokens, entry_kind::exact_state).matched_tokens == static_cast<int64_t>(ev.tokens.size())) {
        return;  // already there (recorded by the worker)
    }
    auto ns = namespaces_.find(ev.ns);
    if (ns == namespaces_.end()) return;
    auto pages = export_pages(ns->second, ev.tokens, ev.blocks);
    if (!pages.is_ok()) return;
    uint64_t bytes = 0;
    for (const page_bytes & p : *pages) bytes += p.bytes.size();
    const uint64_t n_pages = pages->size();
    auto ins = exact_.insert(ev.ns, ev.tokens, std::move(*pages));
    if (ins.is_ok() && ins->inserted) {
        ++n_demotions_;
        totals_.kv_recorded_pages += n_pages;
        totals_.kv_recorded_bytes += bytes;
    }
}

result<std::vector<page_bytes>> stage_cache::export_pages(const cache_namespace & ns, std::span<const token_id> tokens,
                                                          std::span<const kv_block_id> blocks) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<page_bytes> pages;
    for (int64_t start = 0; start < n; start += config_.exact_page_tokens) {
        const int64_t count = std::min(config_.exact_page_tokens, n - start);
        SKIPPY_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, backend_.export_page(blocks, n, start, count));
        const digest256 h = prefix_hash(ns, tokens.first(static_cast<size_t>(start + count)));
        pages.push_back(page_bytes{start, count, page_id(ns, start, count, h), std::move(bytes)});
    }
    return pages;
}

// ---------------------------------------------------------------------------------
// Records

void stage_cache::note_prefill(int32_t session, int64_t pos_start, std::span<const token_id> tokens) {
    if (!records_enabled()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    accumulator_.note_prefill(session, pos_start, tokens);
}

record_result stage_cache::record(const cache_namespace & ns, int32_t session, record_reason reason) {
    std::vector<token_id> tokens;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!records_enabled() || !accumulator_.dirty(session)) return record_result{};
        std::span<const token_id> acc = accumulator_.tokens(session);
        tokens.assign(acc.begin(), acc.end());
        accumulator_.mark_recorded(session);
    }
    return record_tokens(ns, session, tokens, reason);
}

record_result stage_cache::record_tokens(const cache_namespace & ns, int32_t session, std::span<const token_id> tokens,
                                         record_reason reason) {
    record_result r;
    if (!records_enabled()) return r;
    const int64_t n = static_cast<int64_t>(tokens.size());
    r.tokens = n;
    telemetry::event ev = make_event(record_event_name, ns, session);
    ev.attr("skippy.kv.reason", reason == record_reason::final_prefill ? "final_prefill" : "stop")
        .attr("skippy.kv.record_tokens", n);
    auto finish = [&](record_outcome o) {
        r.outcome = o;
        r.decision = record_decision_name(o);
        ev.attr("skippy.kv.decision", attr_text(r.decision))
            .attr("skippy.kv.resident", attr_text(resident_record_name(r.resident)))
            .attr("skippy.exact_cache.record", attr_text(exact_record_state_name(r.exact)))
            .attr("skippy.kv.recorded_bytes", static_cast<int64_t>(r.counters.kv_recorded_bytes));
        if (o == record_outcome::error || o == record_outcome::unsupported) {
            ev.attr("skippy.kv.error_class", attr_text(error_class_name(r.error)));
        }
        if (n > 0) ev.attr("skippy.kv.page_id", prefix_page_id(ns, tokens));
        emit(ev);
        return r;
    };

    if (!check_token_start(ns).is_ok()) {
        r.error = error_code::unsupported;
        return finish(record_outcome::unsupported);
    }
    if (n < config_.min_tokens) return finish(record_outcome::skipped_short);
    auto held = backend_.session_tokens(session);
    if (!held.is_ok() || *held < n) {
        r.error = held.is_ok() ? error_code::internal : held.error().code();
        return finish(record_outcome::error);
    }

    std::shared_ptr<block_snapshot> snapshot;
    std::function<void()> hook;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        namespaces_.emplace(ns.hash, ns);
        if (resident_.enabled()) {
            auto rr = resident_.record(ns.hash, tokens, session, demote_hook_);
            if (rr.is_ok()) {
                r.resident = rr->outcome;
            } else {
                r.error = rr.error().code();
            }
        }
        if (config_.exact_max_bytes > 0) {
            if (index_.peek(ns.hash, tokens, entry_kind::exact_state).matched_tokens == n) {
                r.exact = exact_record_state::present;
            } else if (worker_.busy()) {
                r.exact = exact_record_state::skipped_busy;
            } else if (auto blocks = backend_.session_blocks(session, n); blocks.is_ok()) {
                snapshot = std::make_shared<block_snapshot>(backend_, std::move(*blocks));
                hook = record_hook_;
            } else {
                r.exact = exact_record_state::error;
                r.error = blocks.error().code();
            }
        }
    }
    if (snapshot) {
        // Outside the lock: a dropped job releases its snapshot on this thread.
        const bool queued = worker_.try_submit(
            [this, ns, copy = std::vector<token_id>(tokens.begin(), tokens.end()), snapshot, hook]() {
                if (hook) hook();
                run_record_job(ns, copy, snapshot->blocks);
            });
        r.exact = queued ? exact_record_state::queued : exact_record_state::skipped_busy;
        snapshot.reset();  // a queued job holds its own reference
    }

    const bool resident_took = r.resident == resident_record_outcome::recorded;
    const bool exact_took = r.exact == exact_record_state::queued;
    if (resident_took) {
        r.counters.kv_recorded_pages += 1;
        r.counters.kv_recorded_bytes += static_cast<uint64_t>(n * backend_.bytes_per_token());
    }
    if (resident_took || exact_took) r.counters.kv_record_stage_mask |= stage_bit(ns.stage_index);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        totals_.merge(r.counters);
        if (exact_took) ++n_records_queued_;
        if (r.exact == exact_record_state::skipped_busy) ++n_records_skipped_busy_;
    }

    const bool resident_has = r.resident == resident_record_outcome::covered || r.resident == resident_record_outcome::off;
    const bool exact_has = r.exact == exact_record_state::present || r.exact == exact_record_state::off;
    const bool any_tier = resident_.enabled() || config_.exact_max_bytes > 0;
    if (resident_took || exact_took) return finish(record_outcome::recorded);
    if (r.error != error_code::ok) return finish(record_outcome::error);
    if (any_tier && resident_has && exact_has) return finish(record_outcome::skipped_cached);
    return finish(record_outcome::skipped);
}

void stage_cache::run_record_job(const cache_namespace & ns, const std::vector<token_id> & tokens,
                                 const std::vector<kv_block_id> & blocks) {
    // Export without the lock: the snapshot's references keep the blocks unchanged
    // (a session writing on copies a shared block first).
    auto pages = export_pages(ns, tokens, blocks);
    // Content addresses too: hashing megabytes under the lock would stall every
    // forward waiting in make_room_for_write behind this background job.
    if (pages.is_ok()) {
        for (page_bytes & p : *pages) p.block_digests = blob_store::block_digests(p.bytes, exact_.config().block_bytes);
    }
    telemetry::event ev;  // no session: the request that asked may be long gone
    ev.name = std::string(exact_store_event_name);
    ev.stage = ns.stage_index;
    ev.level = telemetry::event_level::debug;
    ev.attr("skippy.kv.record_tokens", static_cast<int64_t>(tokens.size()));
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!pages.is_ok()) {
            ++n_records_failed_;
            ev.attr("skippy.exact_cache.record", attr_text("error")).attr("skippy.kv.error_class", attr_text(error_class_name(pages.error().code())));
        } else {
            int64_t bytes = 0;
            for (const page_bytes & p : *pages) bytes += static_cast<int64_t>(p.bytes.size());
            ev.attr("skippy.exact_cache.pages", static_cast<int64_t>(pages->size())).attr("skippy.exact_cache.page_bytes", bytes);
            auto ins = exact_.insert(ns.hash, tokens, std::move(*pages));
            if (ins.is_ok()) {
                ++n_records_stored_;
                ev.attr("skippy.exact_cache.record", attr_text(ins->inserted ? "stored" : "present"))
                    .attr("skippy.exact_cache.evicted_entries", ins->n_evicted);
            } else {
                ++n_records_failed_;
                ev.attr("skippy.exact_cache.record", attr_text("refused")).attr("skippy.kv.error_class", attr_text(error_class_name(ins.error().code())));
            }
            const auto s = exact_.stats();
            ev.attr("skippy.exact_cache.entries", s.n_entries).attr("skippy.exact_cache.physical_bytes", s.blobs.physical_bytes);
        }
    }
    emit(ev);
}

bool stage_cache::record_activation(const cache_namespace & ns, std::span<const token_id> tokens, int32_t width,
                                    std::vector<uint8_t> frame) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (!records_enabled() || !activation_.enabled() || n < config_.min_tokens || !check_token_start(ns).is_ok()) return false;
    activation_key key{prefix_hash(ns, tokens), n, width};
    std::lock_guard<std::mutex> lock(mutex_);
    return activation_.store(key, std::move(frame));
}

void stage_cache::reset_session(int32_t session) {
    std::lock_guard<std::mutex> lock(mutex_);
    accumulator_.reset(session);
}

void stage_cache::rollback_session(int32_t session) {
    std::lock_guard<std::mutex> lock(mutex_);
    (void)backend_.truncate_session(session, 0);
    accumulator_.reset(session);
}

// ---------------------------------------------------------------------------------
// Stats and test hooks

stage_cache_stats stage_cache::stats() const {
    stage_cache_stats s;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        s.totals = totals_;
        s.resident = resident_.stats();
        s.exact = exact_.stats();
        s.activation = activation_.stats();
        s.index = index_.stats();
        s.accumulator = accumulator_.stats();
        s.n_demotions = n_demotions_;
        s.n_records_queued = n_records_queued_;
        s.n_records_skipped_busy = n_records_skipped_busy_;
        s.n_records_stored = n_records_stored_;
        s.n_records_failed = n_records_failed_;
        s.n_quarantines = n_quarantines_;
        s.n_resident_restores = n_resident_restores_;
        s.n_exact_restores = n_exact_restores_;
    }
    s.worker = worker_.stats();
    return s;
}

void stage_cache::wait_for_records() { worker_.wait_idle(); }

void stage_cache::set_record_hook_for_testing(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    record_hook_ = std::move(hook);
}

status stage_cache::check_invariants() const {
    std::lock_guard<std::mutex> lock(mutex_);
    SKIPPY_TRY(index_.check_invariants());
    SKIPPY_TRY(resident_.check_invariants());
    SKIPPY_TRY(exact_.check_invariants());
    return status::ok();
}

}  // namespace skippy::cache
