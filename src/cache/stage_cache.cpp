#include "cache/stage_cache.h"

#include "base/log.h"
#include "cache/checkpoint_policy.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace skippy::cache {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

size_t tier_index(cache_tier t) { return static_cast<size_t>(t) - 1; }

// The context every lookup and record event carries.
void note_call(decision_event & ev, int32_t session, uint64_t request_id, std::string_view message_kind) {
    ev.num<attr::kv_session>(session);
    if (request_id != 0) ev.num<attr::kv_request_id>(static_cast<int64_t>(request_id));
    if (!message_kind.empty()) ev.text<attr::kv_message_kind>(message_kind);
}

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

// For tiers called with the lock held (exact state).
class stage_cache::locked_importer final : public page_importer_i {
public:
    locked_importer(stage_cache & c, const digest256 & ns) : cache_(c), ns_(ns) {}
    status import(int32_t session, std::span<const page_bytes> pages, int64_t n_tokens) override {
        return cache_.import_locked(ns_, session, pages, n_tokens);
    }

private:
    stage_cache &   cache_;
    const digest256 ns_;
};

// For io tiers, called without it: the import itself needs it (admission).
class stage_cache::unlocked_importer final : public page_importer_i {
public:
    unlocked_importer(stage_cache & c, const digest256 & ns) : cache_(c), ns_(ns) {}
    status import(int32_t session, std::span<const page_bytes> pages, int64_t n_tokens) override {
        std::lock_guard<std::mutex> lock(cache_.mutex_);
        return cache_.import_locked(ns_, session, pages, n_tokens);
    }

private:
    stage_cache &   cache_;
    const digest256 ns_;
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
        case resident_record_outcome::unsupported: return "unsupported";
    }
    return "off";
}

std::string disk_dir_for_stage(const std::string & dir, int32_t stage_index) {
    if (dir.empty()) return dir;
    return dir + "/stage-" + std::to_string(stage_index);
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
    if (disk_max_bytes < 0) return bad("disk_max_bytes must be >= 0");
    if (redis_timeout_ms < 1 || redis_timeout_ms > 60000) return bad("redis_timeout_ms must be in [1, 60000]");
    if (checkpoint_tokens < 0 || checkpoint_tokens > (int64_t{1} << 24)) return bad("checkpoint_tokens must be in [0, 2^24]");
    if (record_wait_ms < 0 || record_wait_ms > 60000) return bad("record_wait_ms must be in [0, 60000]");
    if (max_pending_records < 1 || max_pending_records > 4096) return bad("max_pending_records must be in [1, 4096]");
    if (!redis_url.empty()) {
        auto url = parse_redis_url(redis_url);
        if (!url.is_ok()) return bad(url.error().message());
    }
    return status::ok();
}

namespace {

disk_tier_config disk_config_of(const stage_cache_config & c) {
    disk_tier_config d;
    d.dir = c.disk_dir;
    d.max_bytes = c.disk_max_bytes;
    d.page_tokens = c.exact_page_tokens;
    d.fault = c.disk_fault_for_testing;
    return d;
}

// The disk and Redis tiers serve a cut of a longer stored prompt (KV slices); a stage
// with recurrent layers restores only whole entries with their snapshot, which those
// tiers do not keep yet: they stay off there.
void warn_page_tiers_off(const stage_cache_config & c) {
    if (!c.disk_dir.empty() || !c.redis_url.empty()) {
        SKIPPY_LOG_WARN("kv cache: the disk and Redis tiers are off on a stage with recurrent layers (they keep no state snapshots)");
    }
}

std::unique_ptr<disk_tier> open_disk_or_warn(const stage_cache_config & c, bool recurrent) {
    if (c.disk_dir.empty() || recurrent) return nullptr;
    auto d = disk_tier::open(disk_config_of(c));
    if (d.is_ok()) return std::move(d).value();
    SKIPPY_LOG_WARN("kv cache: disk tier off: %s", d.error().to_string().c_str());
    return nullptr;
}

}  // namespace

stage_cache::stage_cache(kv_backend_i & backend, const stage_cache_config & config, telemetry::event_sink_ptr sink)
    : stage_cache(backend, config, std::move(sink), open_disk_or_warn(config, backend.has_recurrent_state())) {}

stage_cache::stage_cache(kv_backend_i & backend, const stage_cache_config & config, telemetry::event_sink_ptr sink,
                         std::unique_ptr<disk_tier> disk)
    : backend_(backend),
      config_(config),
      recurrent_(backend.has_recurrent_state()),
      sink_(std::move(sink)),
      exact_(index_, exact_state_config{config.effective_soft_bytes(), config.exact_max_bytes,
                                        static_cast<size_t>(config.exact_block_bytes)}),
      resident_(index_, backend, resident_config{config.max_entries}),
      resident_tier_(resident_, index_, backend, [this](const evicted_resident & ev) { return demote_locked(ev); }),
      exact_tier_(exact_, index_, backend),
      disk_tier_(std::move(disk)),
      activation_(config.activation_max_bytes) {
    if (recurrent_) warn_page_tiers_off(config);
    if (!config.redis_url.empty() && !recurrent_) {
        redis_tier_config rc;
        rc.url = config.redis_url;
        rc.timeout_ms = config.redis_timeout_ms;
        rc.page_tokens = config.exact_page_tokens;
        rc.bytes_per_token = backend.bytes_per_token();
        auto r = redis_tier::create(rc);
        if (r.is_ok()) {
            redis_tier_ = std::move(r).value();
        } else {
            SKIPPY_LOG_WARN("kv cache: Redis tier off: %s", r.error().to_string().c_str());
        }
    }
    tiers_[tier_index(cache_tier::resident)] = &resident_tier_;
    tiers_[tier_index(cache_tier::exact_state)] = &exact_tier_;
    tiers_[tier_index(cache_tier::disk)] = disk_tier_.get();
    tiers_[tier_index(cache_tier::redis)] = redis_tier_.get();
}

result<std::unique_ptr<stage_cache>> stage_cache::create(kv_backend_i & backend, const stage_cache_config & config,
                                                         telemetry::event_sink_ptr sink) {
    SKIPPY_TRY(config.validate());
    std::unique_ptr<disk_tier> disk;
    if (!config.disk_dir.empty() && !backend.has_recurrent_state()) {
        SKIPPY_ASSIGN_OR_RETURN(disk, disk_tier::open(disk_config_of(config)));
    }
    return std::unique_ptr<stage_cache>(new stage_cache(backend, config, std::move(sink), std::move(disk)));
}

stage_cache::~stage_cache() {
    // Pages queued for a tier that outlives the process are worth the wait; otherwise
    // the running record finishes and the waiting ones are dropped.
    if (any_io_tier()) {
        worker_.wait_idle();
    } else {
        stopping_.store(true);
    }
}  // then worker_ goes first (declared last), then the tiers

void stage_cache::emit(const telemetry::event & ev) const {
    if (sink_) sink_->emit(ev);
}

void stage_cache::emit(const decision_event & ev) const {
    if (sink_) sink_->emit(ev.to_event());
}

// ---------------------------------------------------------------------------------
// Lookups

bool stage_cache::tier_usable(size_t i) const {
    // The resident tier holds KV blocks only: on a stage with recurrent layers it serves
    // and records nothing (recurrent_layers_reason in the events).
    return tiers_[i] && tiers_[i]->enabled() && !(recurrent_ && i == tier_index(cache_tier::resident));
}

namespace {

int64_t best_restorable(std::span<const tier_candidate> c) {
    int64_t best = 0;
    for (const tier_candidate & t : c) {
        if (t.peeked && t.peek.error == error_code::ok) best = std::max(best, t.peek.restorable_tokens);
    }
    return best;
}

}  // namespace

double stage_cache::wait_for_inflight_locked(const digest256 & ns, std::span<const token_id> tokens, int64_t target, int64_t best,
                                             lock_type & lock) {
    auto awaited = [&] {
        const int64_t n = inflight_.awaited(ns, tokens, target);
        return n > best && n >= config_.min_tokens;
    };
    if (config_.record_wait_ms <= 0 || !awaited()) return 0;
    const auto t0 = clock_type::now();
    ++n_lookup_waits_;
    // The worker stores the record, removes it from inflight_ and notifies; a record
    // that is still not stored when the bound passes is given up on (the caller computes).
    if (!records_cv_.wait_until(lock, t0 + std::chrono::milliseconds(config_.record_wait_ms), [&] { return !awaited(); })) {
        ++n_lookup_wait_timeouts_;
    }
    return std::max(ms_since(t0), 1e-3);
}

void stage_cache::peek_tiers(const cache_namespace & ns, std::span<const token_id> tokens, int64_t target, candidates & c,
                             lock_type & lock) {
    const tier_peek_request req{ns, tokens, target};
    int64_t best = 0;
    // The in-memory tiers are always all asked (cheap, under the lock): their matches
    // go into the event whatever serves.
    for (size_t i = 0; i < n_cache_tiers; ++i) {
        c[i].tier = static_cast<cache_tier>(i + 1);
        cache_tier_i * t = tiers_[i];
        if (!tier_usable(i) || t->does_io()) continue;
        c[i].peeked = true;
        c[i].peek = t->peek(req);
        best = std::max(best, c[i].peek.restorable_tokens);
    }
    if (!any_io_tier() || best >= target) return;
    // A file or a network round trip only when the tiers above cannot serve the target.
    lock.unlock();
    for (size_t i = 0; i < n_cache_tiers; ++i) {
        cache_tier_i * t = tiers_[i];
        if (!t || !t->enabled() || !t->does_io()) continue;
        if (best >= target) break;
        c[i].peeked = true;
        c[i].peek = t->peek(req);
        if (c[i].peek.error == error_code::ok) best = std::max(best, c[i].peek.restorable_tokens);
    }
    lock.lock();
}

void stage_cache::note_tier_attrs(decision_event & ev, const candidates & c) const {
    const tier_candidate & r = c[tier_index(cache_tier::resident)];
    const tier_candidate & x = c[tier_index(cache_tier::exact_state)];
    const tier_candidate & d = c[tier_index(cache_tier::disk)];
    const tier_candidate & s = c[tier_index(cache_tier::redis)];
    ev.num<attr::kv_resident_matched_tokens>(r.peek.matched_tokens).num<attr::exact_matched_tokens>(x.peek.matched_tokens);
    if (d.peeked) {
        ev.num<attr::disk_matched_tokens>(d.peek.matched_tokens);
        if (d.peek.error != error_code::ok) ev.text<attr::disk_error_class>(error_class_name(d.peek.error));
    }
    if (s.peeked) {
        ev.num<attr::redis_matched_tokens>(s.peek.matched_tokens);
        if (s.peek.error != error_code::ok) ev.text<attr::redis_error_class>(error_class_name(s.peek.error));
    }
    ev.text<attr::kv_candidates>(candidates_text(c));  // the tiers asked and what each could restore
    if (recurrent_) ev.flag<attr::kv_recurrent>(true).text<attr::kv_resident_reason>(recurrent_layers_reason);
}

void stage_cache::count_look_locked(int32_t session, cache_tier served) {
    look_ledger & l = looks_[session];
    if (served == cache_tier::none) {
        if (l.counted) return;
        for (size_t i = 0; i < n_cache_tiers; ++i) {
            if (tier_usable(i)) ++n_look_misses_[i];
        }
    } else {
        if (l.hit) return;
        // The tiers before the one that served were asked and did not serve (unless a
        // miss was already counted for this request).
        if (!l.counted) {
            for (size_t i = 0; i < tier_index(served); ++i) {
                if (tier_usable(i)) ++n_look_misses_[i];
            }
        }
        ++n_look_hits_[tier_index(served)];
        l.hit = true;
    }
    l.counted = true;
}

probe_result stage_cache::probe(const probe_request & req) {
    probe_result r;
    if (!lookups_enabled()) return r;
    const auto t0 = clock_type::now();
    decision_event ev(lookup_event_name, req.ns.stage_index);
    note_call(ev, req.session, req.request_id, req.message_kind);
    const int64_t target = std::min<int64_t>(std::max<int64_t>(req.max_tokens, 0), static_cast<int64_t>(req.tokens.size()));
    if (!check_token_start(req.ns).is_ok()) {
        ev.text<attr::kv_decision>(nonzero_token_start_decision).text<attr::kv_error_class>("unsupported");
        emit(ev);
        r.decision = nonzero_token_start_decision;
        return r;
    }
    candidates c{};
    double waited_ms = 0;
    {
        lock_type lock(mutex_);
        peek_tiers(req.ns, req.tokens, target, c, lock);
        waited_ms = wait_for_inflight_locked(req.ns.hash, req.tokens, target, best_restorable(c), lock);
        if (waited_ms > 0) {
            c = candidates{};
            peek_tiers(req.ns, req.tokens, target, c, lock);
        }
        const int best = choose_tier(c, config_.min_tokens);
        if (best >= 0) {
            r.restorable_tokens = c[static_cast<size_t>(best)].peek.restorable_tokens;
            r.tier = c[static_cast<size_t>(best)].tier;
            r.outcome = r.restorable_tokens == target ? lookup_outcome::hit : lookup_outcome::short_;
        } else if (req.session >= 0) {
            count_look_locked(req.session, cache_tier::none);  // nothing will be restored here for this request
        }
    }
    r.decision = lookup_decision_name(lookup_kind::probe, r.outcome);
    ev.text<attr::kv_decision>(r.decision)
        .num<attr::kv_query_tokens>(static_cast<int64_t>(req.tokens.size()))
        .num<attr::kv_max_tokens>(req.max_tokens)
        .num<attr::kv_restorable_tokens>(r.restorable_tokens)
        .text<attr::kv_tier>(cache_tier_name(r.tier))
        .num<attr::kv_token_start>(req.ns.token_start)
        .num<attr::kv_token_count>(r.restorable_tokens)
        .real<attr::kv_lookup_ms>(ms_since(t0));
    if (waited_ms > 0) ev.real<attr::kv_record_wait_ms>(waited_ms);
    note_tier_attrs(ev, c);
    emit(ev);
    return r;
}

restore_result stage_cache::restore(const restore_request & req) {
    const auto t0 = clock_type::now();
    decision_event ev(lookup_event_name, req.ns.stage_index);
    note_call(ev, req.session, req.request_id, req.message_kind);
    restore_result r;
    {
        lock_type lock(mutex_);
        r = restore_impl(req, ev, lock);
    }
    if (!r.decision.empty()) {
        const int64_t n_id = r.restored_tokens > 0 ? r.restored_tokens : static_cast<int64_t>(req.tokens.size());
        ev.text<attr::kv_page_id>(prefix_page_id(req.ns, req.tokens.first(static_cast<size_t>(n_id))))
            .real<attr::kv_lookup_ms>(ms_since(t0));
        emit(ev);
    }
    return r;
}

restore_result stage_cache::restore_impl(const restore_request & req, decision_event & ev, lock_type & lock) {
    restore_result r;
    if (!lookups_enabled()) return r;  // no decision, no event: lookups are off
    const uint64_t bit = stage_bit(req.ns.stage_index);
    const int64_t target = std::min<int64_t>(std::max<int64_t>(req.max_tokens, 0), static_cast<int64_t>(req.tokens.size()));
    ev.num<attr::kv_query_tokens>(static_cast<int64_t>(req.tokens.size()))
        .num<attr::kv_max_tokens>(req.max_tokens)
        .num<attr::kv_token_start>(req.ns.token_start);

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
        count_look_locked(req.session, r.restored_tokens > 0 ? r.tier : cache_tier::none);
        ev.text<attr::kv_decision>(r.decision)
            .text<attr::kv_tier>(cache_tier_name(r.tier))
            .num<attr::kv_matched_tokens>(r.matched_tokens)
            .num<attr::kv_restored_tokens>(r.restored_tokens)
            .num<attr::kv_imported_pages>(r.imported_pages)
            .num<attr::kv_token_count>(r.restored_tokens);
        if (o == lookup_outcome::error) ev.text<attr::kv_error_class>(error_class_name(r.error));
        const exact_state_stats xs = exact_.stats();
        ev.num<attr::exact_entries>(xs.n_entries)
            .num<attr::exact_physical_bytes>(xs.blobs.physical_bytes)
            .num<attr::exact_logical_bytes>(xs.blobs.logical_bytes);
        return r;
    };

    if (!check_token_start(req.ns).is_ok()) {
        r.error = error_code::unsupported;
        r.decision = nonzero_token_start_decision;
        ++r.counters.kv_lookup_misses;
        totals_.merge(r.counters);
        count_look_locked(req.session, cache_tier::none);
        ev.text<attr::kv_decision>(r.decision).text<attr::kv_error_class>("unsupported");
        return r;
    }
    if (recurrent_) ev.flag<attr::kv_recurrent>(true).text<attr::kv_resident_reason>(recurrent_layers_reason);
    if (target < config_.min_tokens) return finish(lookup_outcome::miss);

    candidates c{};
    peek_tiers(req.ns, req.tokens, target, c, lock);
    // Not in-band: that lookup runs inside a step, where a wait would hold up every lane
    // of the step; the chain's own restore (probe, restore) has waited already.
    const bool may_wait = req.kind != lookup_kind::in_band;
    if (const double waited_ms = may_wait ? wait_for_inflight_locked(req.ns.hash, req.tokens, target, best_restorable(c), lock) : 0;
        waited_ms > 0) {
        ev.real<attr::kv_record_wait_ms>(waited_ms);
        c = candidates{};
        peek_tiers(req.ns, req.tokens, target, c, lock);
    }
    for (const tier_candidate & t : c) r.matched_tokens = std::max(r.matched_tokens, t.peek.matched_tokens);
    note_tier_attrs(ev, c);

    int chosen = choose_tier(c, config_.min_tokens);
    if (chosen < 0) {
        // Nothing usable. A tier that could not even answer makes it an error (the
        // request computes all the same).
        for (const tier_candidate & t : c) {
            if (t.peeked && t.peek.error != error_code::ok) {
                r.error = t.peek.error;
                return finish(lookup_outcome::error);
            }
        }
        return finish(lookup_outcome::miss);
    }
    cache_tier tier = c[static_cast<size_t>(chosen)].tier;
    int64_t best = c[static_cast<size_t>(chosen)].peek.restorable_tokens;
    cache_tier_i * source = this->tier(tier);
    if (!source->does_io() && any_io_tier()) {
        // The lock was released while the io tiers were asked: the entry may be gone.
        best = std::min(best, source->peek(tier_peek_request{req.ns, req.tokens, target}).restorable_tokens);
        if (best < config_.min_tokens) return finish(lookup_outcome::miss);
    }
    if (best < target && !req.allow_short) {
        // Nothing restored: a short answer is all-or-nothing for this caller.
        r.outcome = lookup_outcome::short_;
        r.decision = lookup_decision_name(req.kind, lookup_outcome::short_);
        ++r.counters.kv_lookup_misses;
        totals_.merge(r.counters);
        count_look_locked(req.session, cache_tier::none);
        ev.text<attr::kv_decision>(r.decision)
            .text<attr::kv_tier>(cache_tier_name(tier))
            .num<attr::kv_matched_tokens>(r.matched_tokens)
            .num<attr::kv_restorable_tokens>(best)
            .num<attr::kv_restored_tokens>(0)
            .num<attr::kv_token_count>(0);
        return r;
    }

    r.tier = tier;
    tier_restore_result tr;
    if (source->does_io()) {
        unlocked_importer importer(*this, req.ns.hash);
        lock.unlock();
        tr = source->restore(tier_restore_request{req.ns, req.session, req.tokens, best, &importer});
        lock.lock();
    } else {
        locked_importer importer(*this, req.ns.hash);
        tr = source->restore(tier_restore_request{req.ns, req.session, req.tokens, best, &importer});
    }
    if (tr.error != error_code::ok) {
        r.error = tr.error;
        if (tier == cache_tier::exact_state) {
            if (tr.quarantined) ++n_quarantines_;
            if (is_validation_error(r.error)) ev.flag<attr::exact_quarantined>(true);
        } else if (tier == cache_tier::disk && tr.quarantined) {
            ev.flag<attr::disk_quarantined>(true);
        }
        return finish(lookup_outcome::error);
    }
    r.imported_pages = tr.imported_pages;
    r.restored_tokens = best;
    ++n_restores_[tier_index(tier)];
    if (recurrent_) ++n_state_restores_;
    accumulator_.seed(req.session, req.tokens.first(static_cast<size_t>(best)));
    return finish(best == target ? lookup_outcome::hit : lookup_outcome::short_);
}

int64_t stage_cache::drop_waiting_records_locked(int64_t needed_blocks) {
    int64_t n_dropped = 0;
    while (backend_.n_free_blocks() < needed_blocks && !pending_records_.empty()) {
        inflight_.remove(pending_records_.front()->ticket);
        pending_records_.pop_front();  // releases its references on blocks
        ++n_dropped;
    }
    n_records_dropped_for_room_ += n_dropped;
    if (n_dropped > 0) records_cv_.notify_all();  // a lookup waiting for a dropped record gives up on it
    return n_dropped;
}

status stage_cache::import_locked(const digest256 & ns, int32_t session, std::span<const page_bytes> pages, int64_t n_tokens) {
    auto fail = [&](const status & st) {
        (void)backend_.truncate_session(session, 0);
        return st;
    };
    status st = backend_.truncate_session(session, 0);
    if (!st.is_ok()) return fail(st);
    int64_t end = 0;
    const page_bytes * state = nullptr;
    for (const page_bytes & p : pages) {
        if (p.kind == page_kind::state) {
            state = &p;
        } else {
            end = std::max(end, p.token_start + p.token_count);
        }
    }
    const int64_t bt = backend_.block_tokens();
    const int64_t needed_blocks = (end + bt - 1) / bt;
    if (!resident_tier_.evict(tier_evict_request{needed_blocks}).enough) (void)drop_waiting_records_locked(needed_blocks);
    for (const page_bytes & p : pages) {
        if (p.kind != page_kind::kv) continue;
        st = backend_.import_page(session, p.bytes);
        if (!st.is_ok()) return fail(st);
    }
    st = backend_.truncate_session(session, n_tokens);
    if (!st.is_ok()) return fail(st);
    // The state last: the backend checks it sits exactly at the KV's end.
    if (recurrent_ && !state) return fail(make_error(error_code::invalid_data, "KV pages without the recurrent-state snapshot"));
    if (state) {
        if (state->token_count != n_tokens) {
            return fail(make_error(error_code::invalid_data, "a recurrent-state snapshot of another length than the restore"));
        }
        st = backend_.import_state(session, state->bytes, ns);
        if (!st.is_ok()) return fail(st);
    }
    return status::ok();
}

activation_restore_result stage_cache::restore_with_activation(const activation_restore_request & req) {
    activation_restore_result out;
    const auto t0 = clock_type::now();
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const int64_t max_tokens = req.max_tokens < 0 ? n : std::min(req.max_tokens, n);
    decision_event ev(lookup_event_name, req.ns.stage_index);
    note_call(ev, req.session, req.request_id, req.message_kind);
    // A frame would skip this stage's compute, and so the recurrent state it updates.
    const bool want_frame = lookups_enabled() && activation_.enabled() && max_tokens == n && n >= config_.min_tokens &&
                            check_token_start(req.ns).is_ok() && !recurrent_;
    activation_key key;
    if (want_frame) key = activation_key{prefix_hash(req.ns, req.tokens), n, req.width};
    // Only a full hit skips compute, and a chunk that does not skip is computed whole, so
    // KV restored without its frame, or short of it, would only be rolled back: without a
    // frame the KV is not looked up, and with one it is all-or-nothing.
    restore_request kv_req{req.ns, req.session, req.tokens, max_tokens, lookup_kind::in_band, false, req.request_id, req.message_kind};
    {
        lock_type lock(mutex_);
        if (want_frame) out.frame = activation_.lookup(key);
        if (out.frame) {
            out.kv = restore_impl(kv_req, ev, lock);
        } else if (lookups_enabled()) {
            count_look_locked(req.session, cache_tier::none);  // the stage looked and computes the chunk
        }
    }
    if (!out.frame) {
        out.outcome = activation_outcome::miss;
        // No KV tier was asked: the chunk is computed from position token_start.
        ev.num<attr::kv_token_start>(req.ns.token_start).num<attr::kv_token_count>(0).text<attr::kv_candidates>("activation=0");
        if (recurrent_) ev.flag<attr::kv_recurrent>(true).text<attr::kv_resident_reason>(recurrent_layers_reason);
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
    ev.move<attr::kv_decision, attr::kv_restore_decision>()
        .text<attr::kv_decision>(out.decision)
        .flag<attr::activation_hit>(out.outcome == activation_outcome::hit)
        .num<attr::activation_width>(req.width)
        .num<attr::activation_bytes>(activation_.stats().n_bytes)
        .text<attr::kv_page_id>(prefix_page_id(req.ns, req.tokens))
        .real<attr::kv_lookup_ms>(ms_since(t0));
    emit(ev);
    return out;
}

// ---------------------------------------------------------------------------------
// Admission and demotion

admission_result stage_cache::make_room_for_write(int32_t session, int64_t pos_start, int64_t n_tokens,
                                                  const std::function<status()> & write) {
    admission_result out;
    int64_t n_demoted = 0;
    int32_t stage_index = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto needed = backend_.blocks_needed(session, pos_start, n_tokens);
        if (!needed.is_ok()) {
            out.error = needed.error().code();
            out.n_free_blocks = backend_.n_free_blocks();
            if (write) out.write_status = write();  // it reports what is wrong with the write
            return out;
        }
        out.needed_blocks = *needed;
        const int64_t demotions_before = n_demotions_;
        const tier_evict_result m = resident_tier_.evict(tier_evict_request{out.needed_blocks});
        out.n_free_blocks = m.n_free_blocks;
        out.n_evicted = m.n_evicted;
        out.n_lost = m.n_evicted - m.n_kept;
        out.enough = m.enough;
        n_demoted = n_demotions_ - demotions_before;
        if (!out.enough && drop_waiting_records_locked(out.needed_blocks) > 0) {
            out.n_free_blocks = backend_.n_free_blocks();
            out.enough = out.n_free_blocks >= out.needed_blocks;
        }
        // Still under the lock restores allocate under (import_locked): the write takes
        // the room made here before a restore on another session can.
        if (write) out.write_status = write();
        // Every namespace of one cache names the same stage; an eviction implies one.
        if (!namespaces_.empty()) stage_index = namespaces_.begin()->second.stage_index;
    }
    if ((out.n_evicted > 0 || !out.enough) && sink_) {  // emitted outside the lock: the sink may write a file
        // Summary when something left the cache for good or the write will not fit;
        // evictions whose prefixes another tier keeps are routine (debug).
        const bool notable = out.n_lost > 0 || !out.enough;
        decision_event ev(eviction_event_name, stage_index, notable ? telemetry::event_level::summary : telemetry::event_level::debug);
        ev.num<attr::kv_session>(session)
            .num<attr::kv_needed_blocks>(out.needed_blocks)
            .num<attr::kv_evicted_entries>(out.n_evicted)
            .num<attr::kv_demoted_entries>(n_demoted)
            .num<attr::kv_lost_entries>(out.n_lost)
            .num<attr::kv_free_blocks>(out.n_free_blocks)
            .flag<attr::kv_enough>(out.enough);
        emit(ev);
    }
    return out;
}

bool stage_cache::demote_locked(const evicted_resident & ev) {
    if (config_.exact_max_bytes > 0 &&
        index_.peek(ev.ns, ev.tokens, entry_kind::exact_state).matched_tokens == static_cast<int64_t>(ev.tokens.size())) {
        return true;  // already there (recorded by the worker)
    }
    if (disk_tier_ && disk_tier_->holds(ev.ns, ev.tokens)) return true;
    if (!config_.demote_on_evict || config_.exact_max_bytes <= 0) return false;
    auto ns = namespaces_.find(ev.ns);
    if (ns == namespaces_.end()) return false;
    // Pages the tier holds already (a longer or shorter entry of the same prefix) are
    // shared rather than exported and hashed again, here under the lock.
    const std::vector<std::string> ids = page_ids(ns->second, ev.tokens);
    std::vector<held_page> held = exact_.hold_leading_pages(ev.ns, ev.tokens, ids);
    auto pages = export_pages(ev.tokens, ev.blocks, ids, held.size());
    if (!pages.is_ok()) {
        exact_.release_held(held);
        return false;
    }
    uint64_t bytes = 0;
    for (const page_bytes & p : *pages) bytes += p.bytes.size();
    const uint64_t n_pages = pages->size();
    auto ins = exact_.insert(ev.ns, ev.tokens, std::move(held), *pages);
    if (ins.is_ok() && ins->inserted) {
        ++n_demotions_;
        totals_.kv_recorded_pages += n_pages;
        totals_.kv_recorded_bytes += bytes;
        return true;
    }
    return false;
}

std::vector<std::string> stage_cache::page_ids(const cache_namespace & ns, std::span<const token_id> tokens) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<std::string> ids;
    for (int64_t start = 0; start < n; start += config_.exact_page_tokens) {
        const int64_t count = std::min(config_.exact_page_tokens, n - start);
        ids.push_back(page_id(ns, start, count, prefix_hash(ns, tokens.first(static_cast<size_t>(start + count)))));
    }
    return ids;
}

result<std::vector<page_bytes>> stage_cache::export_pages(std::span<const token_id> tokens, std::span<const kv_block_id> blocks,
                                                          std::span<const std::string> ids, size_t from_page) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<page_bytes> pages;
    for (size_t i = from_page; i < ids.size(); ++i) {
        const int64_t start = static_cast<int64_t>(i) * config_.exact_page_tokens;
        const int64_t count = std::min(config_.exact_page_tokens, n - start);
        SKIPPY_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, backend_.export_page(blocks, n, start, count));
        pages.push_back(page_bytes{start, count, ids[i], std::move(bytes), {}});
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
    return record(record_request{ns, session, reason, 0, {}});
}

record_result stage_cache::record(const record_request & req) {
    std::vector<token_id> tokens;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!records_enabled() || !accumulator_.dirty(req.session)) return record_result{};
        std::span<const token_id> acc = accumulator_.tokens(req.session);
        tokens.assign(acc.begin(), acc.end());
        accumulator_.mark_recorded(req.session);
    }
    return record_tokens(req, tokens);
}

record_result stage_cache::record_tokens(const cache_namespace & ns, int32_t session, std::span<const token_id> tokens,
                                         record_reason reason) {
    return record_tokens(record_request{ns, session, reason, 0, {}}, tokens);
}

std::vector<int64_t> stage_cache::prefill_checkpoints(int64_t pos_start, int64_t n_tokens) const {
    if (!recurrent_ || !records_enabled()) return {};
    return cache::prefill_checkpoints(pos_start, n_tokens, config_.checkpoint_tokens, config_.min_tokens);
}

std::vector<int64_t> stage_cache::prefill_checkpoints(const cache_namespace & ns, int32_t session, int64_t pos_start,
                                                     std::span<const token_id> chunk) const {
    const int64_t n = static_cast<int64_t>(chunk.size());
    std::vector<int64_t> out = prefill_checkpoints(pos_start, n);
    if (!recurrent_ || !records_enabled() || config_.checkpoint_tokens <= 0 || n == 0) return out;
    std::vector<token_id> tokens;
    int64_t branch = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const std::span<const token_id> before = accumulator_.tokens(session);
        if (static_cast<int64_t>(before.size()) != pos_start) return out;
        tokens.reserve(before.size() + chunk.size());
        tokens.assign(before.begin(), before.end());
        tokens.insert(tokens.end(), chunk.begin(), chunk.end());
        branch = index_.peek_common(ns.hash, tokens, entry_kind::exact_state).matched_tokens;
        // Inside the chunk (a path the whole chunk follows leaves it later, or is the
        // prompt itself, whose end is recorded anyway), and not restorable already.
        if (branch <= pos_start || branch >= pos_start + n || branch < config_.min_tokens ||
            index_.peek(ns.hash, std::span<const token_id>(tokens).first(static_cast<size_t>(branch)), entry_kind::exact_state)
                    .matched_tokens == branch) {
            return out;
        }
    }
    out.insert(std::lower_bound(out.begin(), out.end(), branch), branch);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

record_result stage_cache::record_checkpoint(const record_request & req, int64_t n_tokens, state_snapshot_ptr state) {
    std::vector<token_id> tokens;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!records_enabled()) return record_result{};
        const std::span<const token_id> acc = accumulator_.tokens(req.session);
        if (n_tokens <= 0 || static_cast<int64_t>(acc.size()) < n_tokens) return record_result{};  // broken or not noted
        tokens.assign(acc.begin(), acc.begin() + n_tokens);
    }
    record_request r = req;
    r.reason = record_reason::checkpoint;
    return record_tokens_impl(r, tokens, std::move(state));
}

record_result stage_cache::record_tokens(const record_request & req, std::span<const token_id> tokens) {
    return record_tokens_impl(req, tokens, nullptr);
}

record_result stage_cache::record_tokens_impl(const record_request & req, std::span<const token_id> tokens, state_snapshot_ptr snap) {
    record_result r;
    if (!records_enabled()) return r;
    const auto t0 = clock_type::now();
    const cache_namespace & ns = req.ns;
    const int32_t session = req.session;
    const int64_t n = static_cast<int64_t>(tokens.size());
    r.tokens = n;
    decision_event ev(record_event_name, ns.stage_index);
    note_call(ev, session, req.request_id, req.message_kind);
    ev.text<attr::kv_reason>(req.reason == record_reason::final_prefill ? "final_prefill"
                             : req.reason == record_reason::stop        ? "stop"
                                                                        : "checkpoint")
        .num<attr::kv_record_tokens>(n)
        .num<attr::kv_token_start>(ns.token_start)
        .num<attr::kv_token_count>(n);
    auto finish = [&](record_outcome o) {
        r.outcome = o;
        r.decision = record_decision_name(o);
        ev.text<attr::kv_decision>(r.decision)
            .text<attr::kv_resident>(resident_record_name(r.resident))
            .text<attr::exact_record>(exact_record_state_name(r.exact))
            .num<attr::kv_recorded_bytes>(static_cast<int64_t>(r.counters.kv_recorded_bytes))
            .real<attr::kv_record_ms>(ms_since(t0));
        if (disk_tier_) ev.text<attr::disk_record>(exact_record_state_name(r.disk));
        if (redis_tier_) ev.text<attr::redis_record>(exact_record_state_name(r.redis));
        if (o == record_outcome::error || o == record_outcome::unsupported) {
            ev.text<attr::kv_error_class>(error_class_name(r.error));
        }
        if (n > 0) ev.text<attr::kv_page_id>(prefix_page_id(ns, tokens));
        emit(ev);
        return r;
    };

    if (!check_token_start(ns).is_ok()) {
        r.error = error_code::unsupported;
        return finish(record_outcome::unsupported);
    }
    if (recurrent_) {
        r.resident = resident_record_outcome::unsupported;
        ev.flag<attr::kv_recurrent>(true).text<attr::kv_resident_reason>(recurrent_layers_reason);
    }
    if (n < config_.min_tokens) return finish(record_outcome::skipped_short);
    auto held = backend_.session_tokens(session);
    if (!held.is_ok() || *held < n) {
        r.error = held.is_ok() ? error_code::internal : held.error().code();
        return finish(record_outcome::error);
    }
    if (snap && snap->n_tokens() != n) {
        r.error = error_code::internal;
        return finish(record_outcome::error);
    }

    const tier_record_request tier_req{ns, tokens, session};
    page_wants wants;
    auto page_state = [&](cache_tier_i * t, page_record_state & state, bool & want) {
        if (!t || !t->enabled()) return;
        const tier_record_result tr = t->record(tier_req);
        if (tr.state == tier_record_state::covered) {
            state = page_record_state::present;
        } else if (tr.state == tier_record_state::wants_pages) {
            want = true;
        } else if (tr.state == tier_record_state::error) {
            state = page_record_state::error;
            r.error = tr.error;
        }
    };
    {
        std::lock_guard<std::mutex> lock(mutex_);
        namespaces_.emplace(ns.hash, ns);
        if (resident_tier_.enabled() && !recurrent_) {
            const tier_record_result rr = resident_tier_.record(tier_req);
            r.resident = rr.resident;
            if (rr.state == tier_record_state::error) r.error = rr.error;
        }
        page_state(&exact_tier_, r.exact, wants.exact);
    }
    page_state(disk_tier_.get(), r.disk, wants.disk);    // io tiers: without the lock
    page_state(redis_tier_.get(), r.redis, wants.redis);

    if (recurrent_ && !snap && wants.any()) {
        // The live state must sit at this record's end (it does after the final chunk
        // and at Stop); a boundary it has moved past cannot be recorded any more.
        auto live = backend_.snapshot_state(session, n);
        if (!live.is_ok()) {
            r.error = live.error().code();
            r.exact = page_record_state::error;
            return finish(record_outcome::error);
        }
        snap = std::move(live).value();
    }

    const page_wants asked = wants;
    std::unique_ptr<pending_record> job;
    bool blocks_failed = false;
    if (wants.any()) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto blocks = backend_.session_blocks(session, n); blocks.is_ok()) {
            job = std::make_unique<pending_record>();
            job->ns = ns;
            job->tokens.assign(tokens.begin(), tokens.end());
            job->snapshot = std::make_shared<block_snapshot>(backend_, std::move(*blocks));
            job->state = snap;
            job->wants = wants;
            job->hook = record_hook_;
        } else {
            r.error = blocks.error().code();
            blocks_failed = true;
        }
    }
    bool queued = false;
    if (job) {
        // Never waited for: the record joins the records waiting for the worker. When it
        // extends one of them (same namespace, its tokens a prefix), it takes that one
        // along as a checkpoint: a conversation's prompt and its prompt plus answer (or a
        // prompt's successive checkpoints) are all stored, from the newer, larger
        // snapshot (the exact-state tier serves only whole entries). Beyond
        // max_pending_records the oldest waiting record is dropped.
        std::vector<std::unique_ptr<pending_record>> released;  // released outside the lock
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (auto it = pending_records_.begin(); it != pending_records_.end(); ++it) {
                const pending_record & older = **it;
                const bool extends = older.ns.hash == ns.hash && older.tokens.size() < job->tokens.size() &&
                                     std::equal(older.tokens.begin(), older.tokens.end(), job->tokens.begin());
                if (!extends) continue;
                job->checkpoints = std::move((*it)->checkpoints);
                job->checkpoints.push_back(checkpoint{static_cast<int64_t>(older.tokens.size()), older.state});
                job->wants.exact = job->wants.exact || older.wants.exact;
                job->wants.disk = job->wants.disk || older.wants.disk;
                job->wants.redis = job->wants.redis || older.wants.redis;
                ++n_records_merged_;
                inflight_.remove(older.ticket);
                released.push_back(std::move(*it));
                pending_records_.erase(it);
                break;
            }
            while (pending_records_.size() >= static_cast<size_t>(config_.max_pending_records)) {
                ++n_records_superseded_;
                inflight_.remove(pending_records_.front()->ticket);
                released.push_back(std::move(pending_records_.front()));
                pending_records_.pop_front();
            }
            std::vector<int64_t> lengths;
            for (const checkpoint & c : job->checkpoints) lengths.push_back(c.n_tokens);
            lengths.push_back(static_cast<int64_t>(job->tokens.size()));
            job->ticket = inflight_.add(ns.hash, job->tokens, std::move(lengths));
            pending_records_.push_back(std::move(job));
        }
        if (!released.empty()) records_cv_.notify_all();  // a lookup waiting for a dropped record gives up on it
        released.clear();
        queued = worker_.submit([this] { run_pending_records(); });
        if (!queued) {  // the worker is stopping
            std::deque<std::unique_ptr<pending_record>> dropped;
            std::lock_guard<std::mutex> lock(mutex_);
            dropped.swap(pending_records_);
            for (const auto & d : dropped) inflight_.remove(d->ticket);
        }
    }
    auto settle = [&](bool was_asked, page_record_state & state) {
        if (!was_asked) return;
        state = blocks_failed ? page_record_state::error : queued ? page_record_state::queued : page_record_state::skipped_busy;
    };
    settle(asked.exact, r.exact);
    settle(asked.disk, r.disk);
    settle(asked.redis, r.redis);

    const bool resident_took = r.resident == resident_record_outcome::recorded;
    const bool pages_took = queued;
    if (resident_took) {
        r.counters.kv_recorded_pages += 1;
        r.counters.kv_recorded_bytes += static_cast<uint64_t>(n * backend_.bytes_per_token());
    }
    if (resident_took || pages_took) r.counters.kv_record_stage_mask |= stage_bit(ns.stage_index);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        totals_.merge(r.counters);
        if (pages_took) ++n_records_queued_;
        if (r.exact == exact_record_state::skipped_busy || r.disk == page_record_state::skipped_busy ||
            r.redis == page_record_state::skipped_busy) {
            ++n_records_skipped_busy_;
        }
    }

    auto has = [](page_record_state s) { return s == page_record_state::present || s == page_record_state::off; };
    const bool resident_has = r.resident == resident_record_outcome::covered || r.resident == resident_record_outcome::off ||
                              r.resident == resident_record_outcome::unsupported;
    const bool any_tier = (resident_tier_.enabled() && !recurrent_) || exact_tier_.enabled() || disk_tier_ || redis_tier_;
    if (resident_took || pages_took) return finish(record_outcome::recorded);
    if (r.error != error_code::ok) return finish(record_outcome::error);
    if (any_tier && resident_has && has(r.exact) && has(r.disk) && has(r.redis)) return finish(record_outcome::skipped_cached);
    return finish(record_outcome::skipped);
}

void stage_cache::run_pending_records() {
    // One submitted job drains the queue; the submits that found it running or waiting
    // find it empty (or the records queued since).
    while (!stopping_.load()) {
        std::unique_ptr<pending_record> job;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (pending_records_.empty()) return;
            job = std::move(pending_records_.front());
            pending_records_.pop_front();
        }
        if (job->hook) job->hook();
        const std::vector<kv_block_id> & blocks = job->snapshot->blocks;
        const int32_t block_tokens = backend_.block_tokens();
        for (const checkpoint & c : job->checkpoints) {
            const std::vector<token_id> prefix(job->tokens.begin(), job->tokens.begin() + c.n_tokens);
            const size_t n_blocks = static_cast<size_t>((c.n_tokens + block_tokens - 1) / block_tokens);
            run_record_job(job->ns, prefix, std::span<const kv_block_id>(blocks).first(n_blocks), job->wants, c.state);
        }
        run_record_job(job->ns, job->tokens, blocks, job->wants, job->state);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            inflight_.remove(job->ticket);
        }
        records_cv_.notify_all();
    }
}

void stage_cache::run_record_job(const cache_namespace & ns, const std::vector<token_id> & tokens,
                                 std::span<const kv_block_id> blocks, page_wants wants, const state_snapshot_ptr & state) {
    // The leading pages the exact-state tier holds already (the shorter checkpoint of a
    // long prompt, the last turn of a growing history) are shared, not exported and
    // hashed again: a record costs its new pages. The io tiers want every page's bytes.
    const std::vector<std::string> ids = page_ids(ns, tokens);
    std::vector<held_page> held;
    if (wants.exact && !wants.disk && !wants.redis) {
        std::lock_guard<std::mutex> lock(mutex_);
        held = exact_.hold_leading_pages(ns.hash, tokens, ids);
    }
    int64_t held_bytes = 0;
    for (const held_page & h : held) held_bytes += h.n_bytes;
    const int64_t n_held = static_cast<int64_t>(held.size());
    // Export without the lock: the snapshot's references keep the blocks unchanged
    // (a session writing on copies a shared block first).
    auto pages = export_pages(tokens, blocks, ids, held.size());
    int64_t state_bytes = 0;
    if (pages.is_ok() && state) {
        // Serialized here, not on the request thread: encoding and hashing megabytes of
        // state would hold up the prefill that took it.
        auto bytes = state->serialize(ns.hash);
        if (bytes.is_ok()) {
            state_bytes = static_cast<int64_t>(bytes->size());
            const int64_t n = static_cast<int64_t>(tokens.size());
            pages->push_back(page_bytes{0, n, page_id(ns, 0, n, prefix_hash(ns, tokens)), std::move(bytes).value(), {}, page_kind::state});
        } else {
            pages = bytes.error();
        }
    }
    // Content addresses too: hashing megabytes under the lock would stall every
    // forward waiting in make_room_for_write behind this background job.
    if (pages.is_ok() && wants.exact) {
        for (page_bytes & p : *pages) p.block_digests = blob_store::block_digests(p.bytes, exact_.config().block_bytes);
    }
    const int64_t n_tokens = static_cast<int64_t>(tokens.size());
    int64_t page_bytes_total = 0;
    if (pages.is_ok()) {
        for (const page_bytes & p : *pages) page_bytes_total += static_cast<int64_t>(p.bytes.size());
    }
    if (wants.exact) {
        decision_event ev(exact_store_event_name, ns.stage_index, telemetry::event_level::debug);  // no session: the request may be gone
        ev.num<attr::kv_record_tokens>(n_tokens);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!pages.is_ok()) {
                exact_.release_held(held);
                ++n_records_failed_;
                ev.text<attr::exact_record>("error").text<attr::kv_error_class>(error_class_name(pages.error().code()));
            } else {
                ev.num<attr::exact_pages>(static_cast<int64_t>(pages->size()) + n_held)
                    .num<attr::exact_page_bytes>(page_bytes_total + held_bytes)
                    .num<attr::exact_shared_pages>(n_held);
                if (state) ev.num<attr::exact_state_bytes>(state_bytes);
                const tier_store_result st = exact_tier_.store(tier_store_request{ns, tokens, *pages}, std::move(held));
                if (st.state == tier_store_state::refused) {
                    ++n_records_failed_;
                    ev.text<attr::exact_record>("refused").text<attr::kv_error_class>(error_class_name(st.error));
                } else {
                    ++n_records_stored_;
                    if (state && st.state == tier_store_state::stored) ++n_state_records_;
                    ev.text<attr::exact_record>(tier_store_state_name(st.state)).num<attr::exact_evicted_entries>(st.n_evicted);
                }
                // Summary when entries left the tier (or it refused): the cache lost something.
                if (st.n_evicted > 0 || st.state == tier_store_state::refused) ev.set_level(telemetry::event_level::summary);
                const auto xs = exact_.stats();
                ev.num<attr::exact_entries>(xs.n_entries).num<attr::exact_physical_bytes>(xs.blobs.physical_bytes);
            }
            if (!pages.is_ok()) ev.set_level(telemetry::event_level::summary);
        }
        emit(ev);
    }
    auto store_io = [&](cache_tier_i * t, std::string_view event_name, bool want) {
        if (!t || !want) return;
        const auto t0 = clock_type::now();
        decision_event ev(event_name, ns.stage_index, telemetry::event_level::debug);
        ev.num<attr::kv_record_tokens>(n_tokens);
        const bool is_disk = t->id() == cache_tier::disk;
        tier_store_result st;
        if (!pages.is_ok()) {
            st.state = tier_store_state::error;
            st.error = pages.error().code();
        } else {
            st = t->store(tier_store_request{ns, tokens, *pages});
        }
        if (is_disk) {
            ev.text<attr::disk_record>(tier_store_state_name(st.state))
                .num<attr::disk_pages>(st.n_pages_written)
                .num<attr::disk_bytes_written>(st.bytes_written)
                .num<attr::disk_evicted_entries>(st.n_evicted);
            const disk_tier_stats ds = disk_tier_->disk_stats();
            ev.num<attr::disk_entries>(ds.n_entries).num<attr::disk_bytes>(ds.bytes);
        } else {
            ev.text<attr::redis_record>(tier_store_state_name(st.state))
                .num<attr::redis_pages>(st.n_pages_written)
                .num<attr::redis_bytes_written>(st.bytes_written);
        }
        if (st.state == tier_store_state::refused || st.state == tier_store_state::error) {
            ev.text<attr::kv_error_class>(error_class_name(st.error));
        }
        if (st.n_evicted > 0 || st.state == tier_store_state::refused || st.state == tier_store_state::error) {
            ev.set_level(telemetry::event_level::summary);
        }
        ev.real<attr::kv_record_ms>(ms_since(t0));
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (st.state == tier_store_state::stored || st.state == tier_store_state::present) {
                ++n_records_stored_;
            } else {
                ++n_records_failed_;
            }
        }
        emit(ev);
    };
    store_io(disk_tier_.get(), disk_store_event_name, wants.disk);
    store_io(redis_tier_.get(), redis_store_event_name, wants.redis);
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
    looks_.erase(session);
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
        s.n_records_superseded = n_records_superseded_;
        s.n_records_merged = n_records_merged_;
        s.n_records_dropped_for_room = n_records_dropped_for_room_;
        s.n_records_stored = n_records_stored_;
        s.n_records_failed = n_records_failed_;
        s.n_quarantines = n_quarantines_;
        s.n_resident_restores = n_restores_[tier_index(cache_tier::resident)];
        s.n_exact_restores = n_restores_[tier_index(cache_tier::exact_state)];
        s.n_disk_restores = n_restores_[tier_index(cache_tier::disk)];
        s.n_redis_restores = n_restores_[tier_index(cache_tier::redis)];
        s.n_state_records = n_state_records_;
        s.n_state_restores = n_state_restores_;
        s.n_lookup_waits = n_lookup_waits_;
        s.n_lookup_wait_timeouts = n_lookup_wait_timeouts_;
    }
    if (disk_tier_) s.disk = disk_tier_->disk_stats();
    if (redis_tier_) s.redis = redis_tier_->redis_stats();
    s.worker = worker_.stats();
    return s;
}

std::vector<tier_snapshot> stage_cache::tier_snapshots() const {
    std::vector<tier_snapshot> out;
    std::array<int64_t, n_cache_tiers> hits{}, misses{};
    activation_stats act;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        hits = n_look_hits_;
        misses = n_look_misses_;
        act = activation_.stats();
        for (cache_tier t : {cache_tier::resident, cache_tier::exact_state}) {
            out.push_back(tier_snapshot{cache_tier_name(t), tier(t)->stats()});
        }
    }
    for (cache_tier_i * t : {static_cast<cache_tier_i *>(disk_tier_.get()), static_cast<cache_tier_i *>(redis_tier_.get())}) {
        if (t) out.push_back(tier_snapshot{cache_tier_name(t->id()), t->stats()});
    }
    for (tier_snapshot & s : out) {
        for (size_t i = 0; i < n_cache_tiers; ++i) {
            if (cache_tier_name(static_cast<cache_tier>(i + 1)) == s.name) {
                s.stats.hits = hits[i];
                s.stats.misses = misses[i];
            }
        }
    }
    tier_stats a;
    a.hits = act.n_hits;
    a.misses = act.n_misses;
    a.evictions = act.n_evictions;
    a.entries = act.n_entries;
    a.bytes = act.n_bytes;
    out.push_back(tier_snapshot{"activation", a});
    return out;
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
    if (disk_tier_) SKIPPY_TRY(disk_tier_->check_invariants());
    return status::ok();
}

}  // namespace skippy::cache
