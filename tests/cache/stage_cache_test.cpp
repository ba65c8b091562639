// The stage cache facade on the fake backend: decisions, tiers, records, admission,
// corruption, namespaces, events — and a randomized exactness run with invariants
// after every step.
#include "cache/stage_cache.h"
#include "tier_fakes.h"

#include "fakes.h"
#include "stage_cache_fixture.h"
#include "worker_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>

namespace skippy::cache {
namespace {

using testing::expected_kv;
using testing::fake_kv_backend;
using testing::recording_sink;
using toks = std::vector<token_id>;

namespace_fields fields() {
    namespace_fields f;
    f.model_identity = "model-A";
    f.stage_index = 1;
    f.layer_start = 0;
    f.layer_end = 2;
    f.dtype = kv_dtype::f16;
    f.kv_block_tokens = 4;
    f.ctx_size = 64;
    f.platform_tag = "test";
    return f;
}

cache_namespace ns_with(const std::function<void(namespace_fields &)> & change = nullptr) {
    namespace_fields f = fields();
    if (change) change(f);
    return *make_namespace(f);
}

stage_cache_config small_config() { return testing::small_stage_cache_config(); }

using testing::run_of;

toks prefix(const toks & t, size_t n) { return toks(t.begin(), t.begin() + static_cast<ptrdiff_t>(n)); }

toks concat(toks a, const toks & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

struct stage_cache_fake : testing::stage_cache_fixture<fake_kv_backend> {
    cache_namespace ns = ns_with();

    stage_cache_fake() : stage_cache_fixture(16) {}
    void SetUp() override { make(small_config()); }
    // The stage's request loop, reduced: restore (prompt - 1), prefill the rest,
    // record after the final chunk. Returns the restore result.
    restore_result request(int32_t session, const toks & prompt, bool record = true) {
        restore_result r = cache->restore({ns, session, prompt, static_cast<int64_t>(prompt.size()) - 1});
        EXPECT_EQ(backend.kv_of(session), expected_kv(prefix(prompt, static_cast<size_t>(r.restored_tokens))));
        const int64_t from = r.restored_tokens;
        toks rest(prompt.begin() + from, prompt.end());
        EXPECT_TRUE(cache->make_room_for_write(session, from, static_cast<int64_t>(rest.size())).enough);
        EXPECT_TRUE(backend.compute(session, from, rest).is_ok());
        cache->note_prefill(session, from, rest);
        EXPECT_EQ(backend.kv_of(session), expected_kv(prompt));  // exactness: same KV as a cold run
        if (record) cache->record(ns, session, record_reason::final_prefill);
        return r;
    }
    void end_request(int32_t session) {
        cache->reset_session(session);
        ASSERT_TRUE(backend.truncate_session(session, 0).is_ok());
    }
};

TEST_F(stage_cache_fake, ColdRequestMissesThenRecordsInBothTiers) {
    toks p = run_of(10, 10);
    restore_result r = request(0, p);
    EXPECT_EQ(r.decision, "restore_miss");
    EXPECT_EQ(r.counters.kv_lookup_misses, 1u);
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.decision"), "full_prefill_record");
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.resident"), "recorded");
    EXPECT_EQ(sink->last(record_event_name, "skippy.exact_cache.record"), "queued");
    cache->wait_for_records();
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.resident.n_entries, 1);
    EXPECT_EQ(s.exact.n_entries, 1);
    EXPECT_EQ(s.exact.n_pages, 3);  // [0,4) [4,8) [8,10)
    EXPECT_EQ(s.n_records_stored, 1);
    EXPECT_EQ(s.totals.kv_recorded_pages, 1u);
    EXPECT_EQ(s.totals.kv_recorded_bytes, 80u);
    EXPECT_EQ(s.totals.kv_record_stage_mask, 0b10u);
    check();
}

TEST_F(stage_cache_fake, RepeatedPromptRestoresAllButTheLastToken) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    restore_result r = request(1, p);
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.tier, cache_tier::resident);
    EXPECT_EQ(r.restored_tokens, 9);
    EXPECT_EQ(r.counters.kv_lookup_hits, 1u);
    EXPECT_EQ(r.counters.kv_imported_tokens, 9u);
    EXPECT_EQ(r.counters.kv_imported_pages, 1u);
    EXPECT_EQ(r.counters.kv_hit_stage_mask, 0b10u);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.decision"), "restore_hit");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.tier"), "resident");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.page_id"), prefix_page_id(ns, prefix(p, 9)));
    check();
}

TEST_F(stage_cache_fake, ALongerCachedSequenceServesAShorterQuery) {
    toks long_p = run_of(10, 12);
    request(0, long_p);
    end_request(0);
    toks q = prefix(long_p, 8);
    q.push_back(500);  // diverges after 8
    restore_result r = request(1, q);
    EXPECT_EQ(r.restored_tokens, 8);
    EXPECT_EQ(r.decision, "restore_hit");  // 8 == prompt - 1
    check();
}

TEST_F(stage_cache_fake, DivergingSequencesServeTheirCommonPrefixAsShort) {
    toks a = run_of(10, 12);
    request(0, a);
    end_request(0);
    toks q = prefix(a, 6);
    for (int i = 0; i < 6; ++i) q.push_back(900 + i);
    restore_result r = request(1, q);
    EXPECT_EQ(r.restored_tokens, 6);
    EXPECT_EQ(r.decision, "restore_short");
    EXPECT_EQ(r.counters.kv_lookup_hits, 1u);
    check();
}

TEST_F(stage_cache_fake, PrefixesShorterThanMinTokensAreNeitherRestoredNorRecorded) {
    toks p = run_of(10, 3);
    request(0, p);
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.decision"), "record_skipped_short");
    EXPECT_EQ(cache->stats().resident.n_entries, 0);
    end_request(0);
    // A 4-token entry exists, but the query can use at most 3 tokens of it.
    toks q = run_of(20, 4);
    request(0, q);
    end_request(0);
    restore_result r = request(1, q);
    EXPECT_EQ(r.decision, "restore_miss");
    check();
}

TEST_F(stage_cache_fake, ProbeChangesNothing) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    ASSERT_TRUE(backend.compute(1, 0, run_of(77, 3)).is_ok());
    const auto kv_before = backend.kv_of(1);
    const auto totals_before = cache->stats().totals;
    probe_result pr = cache->probe({ns, p, 9, 1});
    EXPECT_EQ(pr.decision, "probe_hit");
    EXPECT_EQ(pr.restorable_tokens, 9);
    toks longer = p;
    longer.insert(longer.end(), {1, 2, 3});
    EXPECT_EQ(cache->probe({ns, longer, 12}).decision, "probe_short");
    EXPECT_EQ(cache->probe({ns, run_of(500, 10), 9}).decision, "probe_miss");
    EXPECT_EQ(backend.kv_of(1), kv_before);
    EXPECT_EQ(cache->stats().totals, totals_before);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.decision"), "probe_miss");
    check();
}

TEST_F(stage_cache_fake, AllOrNothingCallerGetsShortWithoutStateChange) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    restore_request rq{ns, 1, p, 12, lookup_kind::try_restore, false};
    toks longer = p;
    longer.push_back(1);
    longer.push_back(2);
    longer.push_back(3);
    rq.tokens = longer;
    restore_result r = cache->restore(rq);
    EXPECT_EQ(r.decision, "try_restore_short");
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_TRUE(backend.kv_of(1).empty());
    EXPECT_EQ(r.counters.kv_lookup_misses, 1u);
    check();
}

TEST_F(stage_cache_fake, ExactStateServesWhenTheResidentEntryIsGone) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    // A burst needs the whole pool: the resident entry goes.
    admission_result a = cache->make_room_for_write(2, 0, 64);
    EXPECT_TRUE(a.enough);
    EXPECT_EQ(a.n_evicted, 1);
    restore_result r = request(1, p);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.restored_tokens, 9);
    EXPECT_EQ(r.imported_pages, 3);  // [0,4) [4,8) [8,10) imported, then cut to 9
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.tier"), "exact_state");
    check();
}

// A growing history: the next turn's record shares the exact-state pages the last
// turn's entry holds (not exported and hashed again), and a restore from that tier
// alone still gives the KV of a cold run (request() checks it).
TEST_F(stage_cache_fake, ARecordSharesTheLeadingPagesTheExactTierHolds) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    EXPECT_EQ(sink->last(exact_store_event_name, "skippy.exact_cache.shared_pages"), "0");
    const toks longer = concat(p, run_of(50, 6));
    request(1, longer);
    end_request(1);
    cache->wait_for_records();
    EXPECT_EQ(sink->last(exact_store_event_name, "skippy.exact_cache.record"), "stored");
    // [0,4) [4,8) shared; [8,12) (the first entry's page was [8,10)) and [12,16) exported.
    EXPECT_EQ(sink->last(exact_store_event_name, "skippy.exact_cache.shared_pages"), "2");
    EXPECT_EQ(sink->last(exact_store_event_name, "skippy.exact_cache.pages"), "4");
    // The resident entries go; both turns restore from the exact-state tier.
    EXPECT_TRUE(cache->make_room_for_write(2, 0, 64).enough);
    ASSERT_TRUE(backend.truncate_session(2, 0).is_ok());
    restore_result r = request(0, longer, false);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.restored_tokens, 15);
    end_request(0);
    r = request(1, p, false);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.restored_tokens, 9);
    check();
}

TEST_F(stage_cache_fake, RecordsAreNeverWaitedForAndWaitInAQueue) {
    testing::worker_gate gate(*cache);
    const toks a = run_of(10, 8), b = run_of(100, 8), c = run_of(200, 8);
    request(0, a);
    gate.wait_until_held();  // the worker is inside a's record
    request(1, b);                // returns at once: b's record waits
    EXPECT_EQ(sink->last(record_event_name, "skippy.exact_cache.record"), "queued");
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.decision"), "full_prefill_record");
    request(2, c);                // returns at once: c's record waits behind b's
    EXPECT_EQ(sink->last(record_event_name, "skippy.exact_cache.record"), "queued");
    gate.open();
    cache->wait_for_records();
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_records_superseded, 0);
    EXPECT_EQ(s.n_records_merged, 0);
    EXPECT_EQ(s.n_records_dropped_for_room, 0);
    EXPECT_EQ(s.n_records_skipped_busy, 0);
    EXPECT_EQ(s.n_records_stored, 3) << "a's, b's and c's: concurrent requests do not drop each other's records";
    EXPECT_EQ(s.exact.n_entries, 3);
    check();
}

TEST_F(stage_cache_fake, BeyondMaxPendingRecordsTheOldestWaitingOneIsDropped) {
    stage_cache_config c = small_config();
    c.max_pending_records = 2;
    make(c);
    testing::worker_gate gate(*cache);
    const toks a = run_of(10, 8), b = run_of(100, 8), d = run_of(200, 8), e = run_of(300, 8);
    request(0, a);
    gate.wait_until_held();
    request(1, b);
    request(2, d);
    end_request(1);
    request(1, e);  // b's record, the oldest waiting, makes room for e's
    gate.open();
    cache->wait_for_records();
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_records_superseded, 1);
    EXPECT_EQ(s.n_records_stored, 3) << "a's, d's and e's";
    for (int32_t session = 0; session < 3; ++session) end_request(session);
    EXPECT_TRUE(cache->make_room_for_write(0, 0, 64).enough);  // every resident entry goes
    EXPECT_EQ(request(0, d, false).tier, cache_tier::exact_state);
    end_request(0);
    EXPECT_EQ(request(0, e, false).tier, cache_tier::exact_state);
    end_request(0);
    check();
}

TEST_F(stage_cache_fake, AWriteThatDoesNotFitDropsWaitingRecordsOldestFirst) {
    testing::worker_gate gate(*cache);
    const toks a = run_of(10, 8), b = run_of(100, 8), c = run_of(200, 8);
    request(0, a);
    gate.wait_until_held();
    request(1, b);  // b's and c's records wait, holding their blocks
    request(2, c);
    end_request(1);
    end_request(2);
    // Room for 48 positions (12 of the 16 blocks; a's running record holds 2): the
    // resident entries go, and the waiting records' blocks are needed too.
    const admission_result room = cache->make_room_for_write(1, 0, 48);
    EXPECT_TRUE(room.enough);
    EXPECT_GE(cache->stats().n_records_dropped_for_room, 1);
    gate.open();
    cache->wait_for_records();
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_records_stored + s.n_records_dropped_for_room, 3);
    check();
}

// A conversation's record at Stop extends its record after the prompt: when the
// latter still waits for the worker, the newer one takes it along, and the exact-state
// tier (whole entries only) gets both the prompt and the prompt plus answer.
TEST_F(stage_cache_fake, ARecordAtStopTakesTheWaitingPromptRecordAlong) {
    testing::worker_gate gate(*cache);
    const toks a = run_of(10, 8), b = run_of(100, 9), answer = run_of(300, 5);
    request(0, a);
    gate.wait_until_held();  // the worker is inside a's record
    request(1, b);                // b's record waits
    // Decode steps, then Stop: b plus its answer.
    EXPECT_TRUE(cache->make_room_for_write(1, 9, 5).enough);
    EXPECT_TRUE(backend.compute(1, 9, answer).is_ok());
    cache->note_prefill(1, 9, answer);
    cache->record(ns, 1, record_reason::stop);
    gate.open();
    cache->wait_for_records();
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_records_merged, 1);
    EXPECT_EQ(s.n_records_superseded, 0);
    EXPECT_EQ(s.exact.n_entries, 3) << "a, b, and b with its answer";
    end_request(0);
    end_request(1);
    // Both of b's checkpoints serve from the exact-state tier once the resident entries go.
    EXPECT_TRUE(cache->make_room_for_write(2, 0, 64).enough);
    restore_result r = request(2, concat(b, run_of(500, 3)), false);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.restored_tokens, 9);
    end_request(2);
    r = request(2, concat(concat(b, answer), run_of(600, 3)), false);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.restored_tokens, 14);
    check();
}

TEST_F(stage_cache_fake, EvictedResidentEntriesAreDemotedToExactState) {
    stage_cache_config one_waiting = small_config();
    one_waiting.max_pending_records = 1;
    make(one_waiting);
    testing::worker_gate gate(*cache);
    toks a = run_of(10, 8), b = run_of(100, 8), c = run_of(200, 8);
    request(0, a);
    gate.wait_until_held();
    request(1, b);  // its exact record waits...
    request(2, c);  // ...and is superseded by c's: only the resident tier has b
    end_request(0);
    end_request(1);
    end_request(2);
    gate.open();
    cache->wait_for_records();
    ASSERT_EQ(cache->stats().exact.n_entries, 2);
    EXPECT_TRUE(cache->make_room_for_write(2, 0, 64).enough);  // evicts every resident entry
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_demotions, 1);  // b exported on eviction; a and c were already there
    EXPECT_EQ(s.exact.n_entries, 3);
    // Debug-level events tell the story: the background records stored, then one
    // admission evicting the three entries and demoting b.
    EXPECT_EQ(sink->last(exact_store_event_name, "skippy.exact_cache.record"), "stored");
    EXPECT_EQ(sink->last(eviction_event_name, "skippy.kv.evicted_entries"), "3");
    EXPECT_EQ(sink->last(eviction_event_name, "skippy.kv.demoted_entries"), "1");
    EXPECT_EQ(sink->last(eviction_event_name, "skippy.kv.enough"), "true");
    for (const auto & e : sink->events()) {
        const bool debug_only = e.name == eviction_event_name || e.name == exact_store_event_name;
        EXPECT_EQ(e.level, debug_only ? telemetry::event_level::debug : telemetry::event_level::summary) << e.name;
    }
    restore_result r = request(2, b, false);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.restored_tokens, 7);
    check();
}

TEST_F(stage_cache_fake, CorruptedExactStateBlockIsQuarantinedAndTheCallerFallsBack) {
    stage_cache_config c = small_config();
    c.max_entries = 0;  // exact state only
    make(c);
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    exact_state_store & store = cache->exact_store_for_testing();
    ASSERT_EQ(store.entries_for_testing().size(), 1u);
    auto blobs = store.blobs_for_testing(store.entries_for_testing()[0]);
    ASSERT_TRUE(store.corrupt_for_testing(blobs[blobs.size() / 2], 5));

    restore_result r = request(1, p);  // request() checks the KV equals a cold compute
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(r.error, error_code::integrity);
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(r.counters.kv_lookup_errors, 1u);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "integrity");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.exact_cache.quarantined"), "true");
    stage_cache_stats s = cache->stats();
    EXPECT_EQ(s.n_quarantines, 1);
    EXPECT_EQ(s.exact.n_quarantines, 1);
    EXPECT_EQ(s.totals.kv_lookup_errors, 1u);
    check();
    // The quarantined entry is gone: the next request misses, then records afresh.
    end_request(1);
    cache->wait_for_records();
    EXPECT_EQ(request(2, p).decision, "restore_hit");
    check();
}

TEST_F(stage_cache_fake, APageFailingValidationInTheBackendIsQuarantined) {
    stage_cache_config c = small_config();
    c.max_entries = 0;
    make(c);
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    backend.fail_next_import(error_code::invalid_data);
    restore_result r = request(1, p);
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(cache->stats().n_quarantines, 1);
    check();
}

TEST_F(stage_cache_fake, PoolExhaustionDuringImportIsAnErrorWithoutQuarantine) {
    stage_cache_config c = small_config();
    c.max_entries = 0;
    make(c);
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    backend.fail_next_import(error_code::unavailable);
    restore_result r = cache->restore({ns, 1, p, 9});
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(r.error, error_code::unavailable);
    EXPECT_TRUE(backend.kv_of(1).empty());
    EXPECT_EQ(cache->stats().n_quarantines, 0);
    EXPECT_EQ(cache->restore({ns, 1, p, 9}).decision, "restore_hit");  // still there
    check();
}

TEST_F(stage_cache_fake, NamespacesDoNotShareEntries) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    const std::vector<std::function<void(namespace_fields &)>> others = {
        [](namespace_fields & f) { f.cache_key = "tenant-b"; },
        [](namespace_fields & f) { f.stage_index = 2; },
        [](namespace_fields & f) { f.layer_start = 2; f.layer_end = 4; },
        [](namespace_fields & f) { f.dtype = kv_dtype::f32; },
        [](namespace_fields & f) { f.model_identity = "model-B"; },
    };
    for (const auto & change : others) {
        restore_result r = cache->restore({ns_with(change), 1, p, 9});
        EXPECT_EQ(r.decision, "restore_miss");
        EXPECT_TRUE(backend.kv_of(1).empty());
    }
    EXPECT_EQ(cache->restore({ns, 1, p, 9}).decision, "restore_hit");
    check();
}

TEST_F(stage_cache_fake, NonZeroTokenStartIsRefused) {
    cache_namespace shifted = ns_with([](namespace_fields & f) { f.token_start = 4; });
    restore_result r = cache->restore({shifted, 0, run_of(1, 10), 9});
    EXPECT_EQ(r.decision, "nonzero_token_start_unsupported");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "unsupported");
    ASSERT_TRUE(backend.compute(0, 0, run_of(1, 10)).is_ok());
    record_result rec = cache->record_tokens(shifted, 0, run_of(1, 10), record_reason::final_prefill);
    EXPECT_EQ(rec.decision, "nonzero_token_start_unsupported");
    EXPECT_EQ(cache->probe({shifted, run_of(1, 10), 9}).decision, "nonzero_token_start_unsupported");
    EXPECT_EQ(cache->stats().resident.n_entries, 0);
    check();
}

TEST_F(stage_cache_fake, ModeOffDoesNothingAndEmitsNothing) {
    stage_cache_config c = small_config();
    c.mode = cache_mode::off;
    make(c);
    request(0, run_of(10, 10));
    end_request(0);
    EXPECT_EQ(request(1, run_of(10, 10)).restored_tokens, 0);
    EXPECT_TRUE(sink->events().empty());
    EXPECT_EQ(cache->stats().index.n_namespaces, 0);
}

TEST_F(stage_cache_fake, ModeRecordRecordsButNeverRestores) {
    stage_cache_config c = small_config();
    c.mode = cache_mode::record;
    make(c);
    request(0, run_of(10, 10));
    end_request(0);
    EXPECT_EQ(request(1, run_of(10, 10)).restored_tokens, 0);
    EXPECT_EQ(cache->stats().resident.n_entries, 1);
}

TEST_F(stage_cache_fake, StopRecordsAgainOnlyWhenMoreWasAdded) {
    toks p = run_of(10, 8);
    request(0, p);
    const size_t n_events = sink->events().size();
    record_result again = cache->record(ns, 0, record_reason::stop);
    EXPECT_TRUE(again.decision.empty());
    EXPECT_EQ(sink->events().size(), n_events);
    // More prompt arrives on the same session (contiguous): Stop records the longer path.
    toks more = run_of(40, 4);
    ASSERT_TRUE(backend.compute(0, 8, more).is_ok());
    cache->note_prefill(0, 8, more);
    record_result at_stop = cache->record(ns, 0, record_reason::stop);
    EXPECT_EQ(at_stop.decision, "full_prefill_record");
    EXPECT_EQ(at_stop.tokens, 12);
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.reason"), "stop");
    EXPECT_EQ(cache->stats().resident.n_entries, 1);  // the 8-token entry was covered
    check();
}

TEST_F(stage_cache_fake, ARestoredPromptIsNotRecordedAgain) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    cache->wait_for_records();
    request(1, p);  // restores 9, prefills the last one, records
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.decision"), "record_skipped_cached");
    EXPECT_EQ(cache->stats().resident.n_records, 1);
    EXPECT_EQ(cache->stats().n_records_queued, 1);
    check();
}

TEST_F(stage_cache_fake, AGapInPrefillStopsTheRecord) {
    ASSERT_TRUE(backend.compute(0, 0, run_of(10, 8)).is_ok());
    cache->note_prefill(0, 0, run_of(10, 4));
    cache->note_prefill(0, 6, run_of(16, 2));  // positions 4, 5 never noted
    record_result r = cache->record(ns, 0, record_reason::final_prefill);
    EXPECT_TRUE(r.decision.empty());
    EXPECT_EQ(cache->stats().accumulator.n_gaps, 1);
    EXPECT_EQ(cache->stats().resident.n_entries, 0);
}

TEST_F(stage_cache_fake, AdmissionCountsTheCopyOfASharedTailBlock) {
    toks p = run_of(10, 6);  // [b: 0-3][b: 4 5 . .]
    request(0, p);        // recorded: the tail block is shared with the entry
    admission_result a = cache->make_room_for_write(0, 6, 1);
    EXPECT_EQ(a.needed_blocks, 1);  // the copy of the shared tail block
    admission_result b = cache->make_room_for_write(0, 8, 1);
    EXPECT_EQ(b.needed_blocks, 1);  // a fresh block
    EXPECT_EQ(cache->make_room_for_write(7, 0, 1).error, error_code::invalid_argument);
    check();
}

TEST_F(stage_cache_fake, AdmissionOnAFiveBlockPoolEvictsCheapestFirst) {
    fake_kv_backend five{5, 4, 2};
    stage_cache_config c = small_config();
    c.exact_max_bytes = 0;
    auto small = std::move(stage_cache::create(five, c, sink).value());
    auto cached = [&](const toks & t) {
        ASSERT_TRUE(five.compute(0, 0, t).is_ok());
        small->note_prefill(0, 0, t);
        small->record(ns, 0, record_reason::final_prefill);
        small->reset_session(0);
        ASSERT_TRUE(five.truncate_session(0, 0).is_ok());
    };
    //   A = 8 tokens [b0 b1]   B = 4 tokens [b2]   free: b3 b4
    cached(run_of(10, 8));
    cached(run_of(100, 4));
    // Session 1 needs 3 blocks: B (cheaper) goes, A stays.
    admission_result a = small->make_room_for_write(1, 0, 12);
    EXPECT_TRUE(a.enough);
    EXPECT_EQ(a.n_evicted, 1);
    EXPECT_EQ(small->probe({ns, run_of(10, 8), 8}).decision, "probe_hit");
    EXPECT_EQ(small->probe({ns, run_of(100, 4), 4}).decision, "probe_miss");
    EXPECT_EQ(five.violations(), 0);
}

TEST_F(stage_cache_fake, ActivationHitNeedsTheFullKv) {
    toks t = run_of(10, 8);
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    cache->note_prefill(0, 0, t);
    cache->record(ns, 0, record_reason::final_prefill);
    ASSERT_TRUE(cache->record_activation(ns, t, 2, std::vector<uint8_t>(64, 9)));
    end_request(0);

    activation_restore_result hit = cache->restore_with_activation({ns, 1, t, 2});
    EXPECT_EQ(hit.decision, "activation_resident_hit");
    ASSERT_TRUE(hit.frame);
    EXPECT_EQ(hit.frame->size(), 64u);
    EXPECT_EQ(hit.kv.restored_tokens, 8);
    EXPECT_EQ(backend.kv_of(1), expected_kv(t));
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.decision"), "activation_resident_hit");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.restore_decision"), "resident_hit");
    end_request(1);

    // Other width: no frame, so the chunk is computed whole and its KV is not looked up
    // (restoring it would only be rolled back), nor counted as a hit.
    activation_restore_result miss = cache->restore_with_activation({ns, 1, t, 4});
    EXPECT_EQ(miss.decision, "activation_resident_miss");
    EXPECT_FALSE(miss.frame);
    EXPECT_EQ(miss.kv.restored_tokens, 0);
    EXPECT_EQ(miss.kv.counters.kv_lookup_hits, 0u);
    EXPECT_TRUE(backend.kv_of(1).empty());
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.restore_decision"), "") << "no KV lookup without a frame";
    end_request(1);
    check();
}

TEST_F(stage_cache_fake, ActivationWithShortOrMissingKvIsNotAHit) {
    stage_cache_config c = small_config();
    c.exact_max_bytes = 0;  // resident only, so eviction loses the KV
    make(c);
    toks t = run_of(10, 8);
    // KV only for the first 6 tokens; the frame for all 8.
    ASSERT_TRUE(backend.compute(0, 0, prefix(t, 6)).is_ok());
    cache->record_tokens(ns, 0, prefix(t, 6), record_reason::final_prefill);
    ASSERT_TRUE(cache->record_activation(ns, t, 2, std::vector<uint8_t>(16, 1)));
    end_request(0);
    activation_restore_result s = cache->restore_with_activation({ns, 1, t, 2});
    EXPECT_EQ(s.decision, "activation_hit_prefix_short");
    EXPECT_FALSE(s.frame);
    EXPECT_EQ(s.kv.restored_tokens, 0) << "all or nothing: a short KV would be rolled back";
    EXPECT_EQ(s.kv.counters.kv_lookup_hits, 0u);
    EXPECT_TRUE(backend.kv_of(1).empty());
    end_request(1);
    EXPECT_TRUE(cache->make_room_for_write(2, 0, 64).enough);  // the KV entry goes
    activation_restore_result m = cache->restore_with_activation({ns, 1, t, 2});
    EXPECT_EQ(m.decision, "activation_hit_kv_miss");
    EXPECT_FALSE(m.frame);
    check();
}

TEST_F(stage_cache_fake, ActivationWithFailingKvIsAKvError) {
    stage_cache_config c = small_config();
    c.max_entries = 0;  // exact state only: the import can fail
    make(c);
    toks t = run_of(10, 8);
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    cache->record_tokens(ns, 0, t, record_reason::final_prefill);
    cache->wait_for_records();
    ASSERT_TRUE(cache->record_activation(ns, t, 2, std::vector<uint8_t>(16, 1)));
    backend.fail_next_import(error_code::integrity);
    activation_restore_result e = cache->restore_with_activation({ns, 1, t, 2});
    EXPECT_EQ(e.decision, "activation_hit_kv_error");
    EXPECT_FALSE(e.frame);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.restore_decision"), "resident_error");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "integrity");
    check();
}

TEST_F(stage_cache_fake, RollbackEmptiesTheSession) {
    toks p = run_of(10, 10);
    request(0, p);
    end_request(0);
    restore_result r = cache->restore({ns, 1, p, 9, lookup_kind::try_restore});
    EXPECT_EQ(r.decision, "try_restore_hit");
    cache->rollback_session(1);
    EXPECT_TRUE(backend.kv_of(1).empty());
    check();
}

TEST_F(stage_cache_fake, InvalidConfigIsRefused) {
    stage_cache_config c = small_config();
    c.min_tokens = 0;
    EXPECT_EQ(stage_cache::create(backend, c).error().code(), error_code::invalid_argument);
    c = small_config();
    c.exact_soft_bytes = c.exact_max_bytes + 1;
    EXPECT_EQ(stage_cache::create(backend, c).error().code(), error_code::invalid_argument);
}

TEST_F(stage_cache_fake, DestructionReleasesEveryBlock) {
    request(0, run_of(10, 10));
    end_request(0);
    cache.reset();
    EXPECT_EQ(backend.n_free_blocks(), 16);
    EXPECT_EQ(backend.violations(), 0);
}

// Random requests over a small alphabet (shared prefixes, divergences, repeats) on
// a pool small enough that admission evicts. Every restored KV must equal a cold
// compute; invariants hold after every request.
TEST_F(stage_cache_fake, RandomRequestsStayExact) {
    std::mt19937 rng(7);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    std::vector<toks> seen;
    int64_t hits = 0;
    for (int step = 0; step < 400; ++step) {
        toks p;
        if (!seen.empty() && pick(3) > 0) {
            p = seen[static_cast<size_t>(pick(static_cast<int>(seen.size())))];
            p.resize(static_cast<size_t>(std::max(2, pick(static_cast<int>(p.size()) + 8))), pick(3));
        } else {
            p.resize(static_cast<size_t>(2 + pick(14)));
            for (auto & x : p) x = pick(3);
        }
        if (p.size() > 20) p.resize(20);
        const int32_t session = pick(3);
        restore_result r = request(session, p, pick(4) > 0);
        ASSERT_NE(r.outcome, lookup_outcome::error) << "step " << step;
        hits += r.restored_tokens > 0;
        if (pick(5) == 0) cache->wait_for_records();
        end_request(session);
        seen.push_back(p);
        check();
    }
    cache->wait_for_records();
    EXPECT_GT(hits, 100);
    EXPECT_GT(cache->stats().resident.n_evictions, 0);
}

}  // namespace
}  // namespace skippy::cache
