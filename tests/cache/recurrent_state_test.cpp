// Recurrent state in the cache (docs/kv-cache.md §4 "Exact state", §6 "Checkpoints",
// "Waiting for a queued record"), on fakes: the checkpoint policy; exact-state entries
// with a state page; a stage with recurrent layers restoring only whole checkpoints,
// its resident tier saying why it serves nothing, a foreign or broken snapshot being
// an error decision (never a wrong state); and lookups waiting, bounded, for a record
// still queued for the worker.
#include "cache/checkpoint_policy.h"
#include "cache/exact_state_store.h"
#include "cache/inflight_records.h"
#include "cache/stage_cache.h"
#include "fakes.h"
#include "stage_cache_fixture.h"
#include "tier_fakes.h"
#include "worker_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

namespace skippy::cache {
namespace {

using testing::expected_kv;
using testing::expected_state;
using testing::fake_recurrent_backend;
using testing::recording_sink;
using toks = std::vector<token_id>;

toks first_of(const toks & t, size_t n) { return toks(t.begin(), t.begin() + static_cast<ptrdiff_t>(n)); }

// ---------------------------------------------------------------------------------
// Checkpoint policy

TEST(checkpoint_policy, MultiplesOfTheSpacingInsideTheChunkFromMinTokensOn) {
    using v = std::vector<int64_t>;
    EXPECT_EQ(prefill_checkpoints(0, 128, 64, 32), (v{64, 128}));
    EXPECT_EQ(prefill_checkpoints(128, 71, 64, 32), (v{192}));
    EXPECT_EQ(prefill_checkpoints(64, 64, 64, 32), (v{128})) << "the chunk's start is not inside it";
    EXPECT_EQ(prefill_checkpoints(0, 63, 64, 32), v{});
    EXPECT_EQ(prefill_checkpoints(0, 200, 64, 100), (v{128, 192})) << "below min_tokens nothing is recorded";
    EXPECT_EQ(prefill_checkpoints(0, 200, 0, 1), v{}) << "spacing 0: only the prompt's and answer's ends";
    EXPECT_EQ(prefill_checkpoints(5, 0, 4, 1), v{});
    EXPECT_EQ(prefill_checkpoints(3, 10, 4, 1), (v{4, 8, 12}));
}

// ---------------------------------------------------------------------------------
// Records in flight

TEST(inflight_records, AwaitsTheLongestStoredLengthOnTheQueryPathWithinTheTarget) {
    inflight_records f;
    const digest256 a = testing::ns_of(1), b = testing::ns_of(2);
    const auto t = f.add(a, toks{1, 2, 3, 4, 5, 6}, {4, 6});
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 5, 6, 7}, 6), 6);
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 5, 6, 7}, 5), 4) << "the target caps it";
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 9}, 5), 4) << "6 is not on the path";
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3}, 3), 0);
    EXPECT_EQ(f.awaited(b, toks{1, 2, 3, 4, 5, 6}, 6), 0) << "another namespace";
    const auto u = f.add(a, toks{1, 2, 3, 4, 5, 6, 7, 8}, {8});
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 5, 6, 7, 8, 9}, 9), 8);
    f.remove(u);
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 5, 6, 7, 8, 9}, 9), 6);
    f.remove(t);
    f.remove(t);  // twice: ignored
    EXPECT_EQ(f.size(), 0u);
    EXPECT_EQ(f.awaited(a, toks{1, 2, 3, 4, 5, 6}, 6), 0);
}

// ---------------------------------------------------------------------------------
// The exact-state store with state pages

std::vector<page_bytes> kv_pages(int64_t n, int64_t page) {
    std::vector<page_bytes> out;
    for (int64_t s = 0; s < n; s += page) {
        page_bytes p;
        p.token_start = s;
        p.token_count = std::min(page, n - s);
        p.bytes.assign(static_cast<size_t>(p.token_count) * 8, static_cast<uint8_t>(s + 1));
        out.push_back(std::move(p));
    }
    return out;
}

page_bytes state_page(int64_t n, uint8_t fill = 0x77, size_t n_bytes = 24) {
    page_bytes p;
    p.token_start = 0;
    p.token_count = n;
    p.kind = page_kind::state;
    p.bytes.assign(n_bytes, fill);
    return p;
}

TEST(exact_state_store, KeepsOneStatePageLastAndReadsItOnlyWithTheWholeEntry) {
    radix_index ix;
    exact_state_store store(ix, exact_state_config{1 << 20, 1 << 20, 8});
    const toks t{1, 2, 3, 4, 5};
    auto pages = kv_pages(5, 2);
    pages.push_back(state_page(5));
    auto r = store.insert(testing::ns_of(1), t, pages);
    ASSERT_TRUE(r.is_ok()) << r.error().to_string();
    auto all = store.read_pages(r->id, 5);
    ASSERT_TRUE(all.is_ok());
    ASSERT_EQ(all->size(), 4u);
    EXPECT_EQ(all->back().kind, page_kind::state);
    EXPECT_EQ(all->back().bytes, state_page(5).bytes);
    auto part = store.read_pages(r->id, 4);
    ASSERT_TRUE(part.is_ok());
    EXPECT_EQ(part->size(), 2u) << "a cut of the entry does not get the state of its whole length";
    EXPECT_EQ(store.stats().n_state_pages, 1);
    EXPECT_EQ(store.stats().state_bytes, 24);
    EXPECT_TRUE(store.check_invariants().is_ok());
    ASSERT_TRUE(store.evict(r->id).is_ok());
    EXPECT_EQ(store.stats().n_state_pages, 0);
    EXPECT_EQ(store.stats().state_bytes, 0);
    EXPECT_TRUE(store.check_invariants().is_ok());
}

TEST(exact_state_store, RefusesMisplacedStatePages) {
    radix_index ix;
    exact_state_store store(ix, exact_state_config{1 << 20, 1 << 20, 8});
    const toks t{1, 2, 3, 4};
    auto refused = [&](std::vector<page_bytes> pages) {
        auto r = store.insert(testing::ns_of(1), t, pages);
        return !r.is_ok() && r.error().code() == error_code::invalid_argument;
    };
    auto p = kv_pages(4, 2);
    EXPECT_TRUE(refused({state_page(4), p[0], p[1]})) << "not last";
    EXPECT_TRUE(refused({p[0], p[1], state_page(3)})) << "not the entry's length";
    EXPECT_TRUE(refused({p[0], p[1], state_page(4), state_page(4)})) << "two";
    page_bytes shifted = state_page(4);
    shifted.token_start = 1;
    EXPECT_TRUE(refused({p[0], p[1], shifted}));
    EXPECT_EQ(store.stats().n_entries, 0);
    EXPECT_TRUE(store.check_invariants().is_ok());
}

// ---------------------------------------------------------------------------------
// A stage with recurrent layers

stage_cache_config recurrent_config() {
    stage_cache_config c = testing::small_stage_cache_config();
    c.activation_max_bytes = 64ll << 20;  // the default: off on its own on a stage with recurrent layers
    c.checkpoint_tokens = 8;
    c.record_wait_ms = 10000;
    return c;
}

cache_namespace recurrent_ns() { return testing::test_namespace("model-R", 0, 0, 4); }

struct recurrent_stage : testing::stage_cache_fixture<fake_recurrent_backend> {
    cache_namespace ns = recurrent_ns();

    recurrent_stage() : stage_cache_fixture(32) {}
    void SetUp() override { make(recurrent_config()); }
    // A request as the stage runs it: restore (all but the last prompt token), prefill
    // the rest in chunks with the snapshots prefill_checkpoints asks for (the fake takes
    // them at chunk ends, so chunks are cut there), record after the prompt.
    restore_result request(int32_t session, const toks & prompt, int64_t chunk = 5) {
        cache->reset_session(session);
        const int64_t n = static_cast<int64_t>(prompt.size()) - 1;
        restore_result r = cache->restore({ns, session, prompt, n, lookup_kind::restore, true, 0, {}});
        EXPECT_NE(r.outcome, lookup_outcome::error) << r.decision;
        int64_t pos = r.restored_tokens;
        if (pos == 0) {
            EXPECT_TRUE(backend.truncate_session(session, 0).is_ok());
        }
        while (pos < n) {
            int64_t m = std::min(chunk, n - pos);
            const std::vector<int64_t> cps = cache->prefill_checkpoints(ns, session, pos, toks(prompt.begin() + pos, prompt.begin() + pos + m));
            int64_t end = pos + m;
            std::vector<int64_t> stops(cps.begin(), cps.end());
            stops.push_back(end);
            for (int64_t stop : stops) {
                if (stop <= pos) continue;
                const toks part(prompt.begin() + pos, prompt.begin() + stop);
                EXPECT_TRUE(backend.compute(session, pos, part).is_ok());
                cache->note_prefill(session, pos, part);
                if (std::find(cps.begin(), cps.end(), stop) != cps.end()) {
                    auto snap = backend.snapshot_state(session, stop);
                    EXPECT_TRUE(snap.is_ok());
                    cache->record_checkpoint(record_request{ns, session, record_reason::checkpoint, 0, {}}, stop, *snap);
                }
                pos = stop;
            }
        }
        cache->record(ns, session, record_reason::final_prefill);
        return r;
    }
    // The session holds exactly what a fresh compute of the first n tokens gives.
    void expect_exact(int32_t session, const toks & prompt, int64_t n) {
        const toks prefix = first_of(prompt, static_cast<size_t>(n));
        EXPECT_EQ(backend.kv_of(session), expected_kv(prefix));
        EXPECT_EQ(backend.state_tokens(session), n);
        EXPECT_EQ(backend.state_of(session), expected_state(prefix));
    }
};

TEST_F(recurrent_stage, RestoresTheLongestStoredCheckpointInsideTheSharedPrefix) {
    const toks a = testing::run_of(100, 30);  // checkpoints 8, 16, 24 and the prompt's end, 29
    request(0, a);
    cache->wait_for_records();
    check();
    EXPECT_EQ(cache->stats().n_state_records, 4);
    EXPECT_EQ(cache->stats().exact.n_state_pages, 4);

    // Shares 20 tokens: the checkpoint at 16 restores, with its own state.
    const toks b = testing::concat(first_of(a, 20), testing::run_of(500, 10));
    restore_result r = request(1, b);
    EXPECT_EQ(r.restored_tokens, 16);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.outcome, lookup_outcome::short_);
    EXPECT_EQ(r.counters.kv_hit_stage_mask, 1u);
    EXPECT_EQ(r.imported_pages, 5) << "4 KV pages and the snapshot";
    // The request computed on from the restored state: the same as computing it all.
    expect_exact(1, b, static_cast<int64_t>(b.size()) - 1);

    // The same prompt again: all but its last token, at the prompt's end record.
    r = request(2, a);
    EXPECT_EQ(r.restored_tokens, 29);
    EXPECT_EQ(r.outcome, lookup_outcome::hit);
    expect_exact(2, a, 29);

    // Shares 7 tokens: no checkpoint inside, a miss (never a cut of a longer entry).
    const toks c = testing::concat(first_of(a, 7), testing::run_of(900, 20));
    r = request(0, c);
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(r.outcome, lookup_outcome::miss);
    expect_exact(0, c, static_cast<int64_t>(c.size()) - 1);
    cache->wait_for_records();
    check();
}

// A prompt that leaves the stored paths between checkpoints snapshots its state where it
// leaves them (its branch point): the first such prompt computes from the checkpoint
// before, the next ones restore the whole shared prefix.
TEST_F(recurrent_stage, APromptSnapshotsWhereItLeavesTheStoredPaths) {
    const toks a = testing::run_of(100, 30);  // checkpoints 8, 16, 24, the end 29
    request(0, a);
    cache->wait_for_records();
    const toks b = testing::concat(first_of(a, 20), testing::run_of(500, 10));
    EXPECT_EQ(cache->prefill_checkpoints(ns, 1, 0, first_of(b, 5)), std::vector<int64_t>{}) << "no session noted yet: plain";
    restore_result r = request(1, b);
    EXPECT_EQ(r.restored_tokens, 16);
    expect_exact(1, b, static_cast<int64_t>(b.size()) - 1);
    cache->wait_for_records();
    // b's chunk [16, 21) held its branch point, 20: a third prompt restores all 20.
    EXPECT_EQ(cache->stats().n_state_records, 4 + 3) << "a's 4, then b's 20, 24 and end";
    const toks c = testing::concat(first_of(a, 20), testing::run_of(700, 12));
    r = request(2, c);
    EXPECT_EQ(r.restored_tokens, 20);
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    expect_exact(2, c, static_cast<int64_t>(c.size()) - 1);
    cache->wait_for_records();
    // c leaves the stored paths at 20, where an entry ends now: nothing more is asked.
    EXPECT_EQ(cache->stats().n_state_records, 7 + 2) << "c's 24 and end";
    // A prompt that follows a stored path through the whole chunk has no branch inside it.
    cache->reset_session(0);
    ASSERT_TRUE(backend.truncate_session(0, 0).is_ok());
    cache->note_prefill(0, 0, first_of(a, 5));
    EXPECT_EQ(cache->prefill_checkpoints(ns, 0, 5, toks(a.begin() + 5, a.begin() + 10)), std::vector<int64_t>{8});
    check();
}

TEST_F(recurrent_stage, TheResidentTierSaysWhyItServesNothing) {
    const toks a = testing::run_of(100, 20);
    request(0, a);
    cache->wait_for_records();
    EXPECT_EQ(cache->stats().index.n_entries[static_cast<size_t>(entry_kind::resident)], 0);
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.resident"), "unsupported");
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.resident_reason"), std::string(recurrent_layers_reason));
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.recurrent"), "true");
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.decision"), "full_prefill_record");
    request(1, a);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.decision"), "restore_hit");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.resident_reason"), std::string(recurrent_layers_reason));
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.candidates"), "exact_state=19") << "the resident tier is not asked";
    // One lookup per request: a miss of the first (the resident tier is not counted),
    // then a hit of the exact-state tier.
    for (const tier_snapshot & t : cache->tier_snapshots()) {
        if (t.name == "resident") {
            EXPECT_EQ(t.stats.hits + t.stats.misses, 0);
        }
        if (t.name == "exact_state") {
            EXPECT_EQ(t.stats.hits, 1);
            EXPECT_EQ(t.stats.misses, 1);
        }
    }
}

TEST_F(recurrent_stage, ARecordAtABoundaryTheStateHasLeftIsAnError) {
    const toks a = testing::run_of(100, 12);
    ASSERT_TRUE(backend.compute(0, 0, a).is_ok());
    const record_result r = cache->record_tokens(ns, 0, first_of(a, 8), record_reason::final_prefill);
    EXPECT_EQ(r.outcome, record_outcome::error);
    EXPECT_EQ(sink->last(record_event_name, "skippy.kv.error_class"), "internal") << "a bad argument from our caller";
    EXPECT_EQ(cache->stats().index.n_entries[static_cast<size_t>(entry_kind::exact_state)], 0);
}

TEST_F(recurrent_stage, ASnapshotNamingAnotherNamespaceIsAnErrorDecisionAndQuarantined) {
    backend.serialize_foreign_namespace(true);
    const toks a = testing::run_of(100, 20);
    request(0, a);
    cache->wait_for_records();
    backend.serialize_foreign_namespace(false);
    const restore_result r = cache->restore({ns, 1, a, 19, lookup_kind::try_restore, false, 0, {}});
    EXPECT_EQ(r.outcome, lookup_outcome::error);
    EXPECT_EQ(r.decision, "try_restore_error");
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(r.counters.kv_lookup_errors, 1u);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "invalid_data");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.exact_cache.quarantined"), "true");
    EXPECT_EQ(*backend.session_tokens(1), 0) << "nothing of it stays in the session";
    EXPECT_EQ(cache->stats().n_quarantines, 1);
    // The bad entry is gone; the shorter checkpoints (equally foreign) fail in turn.
    check();
}

// A bad byte in a stored snapshot is caught by the snapshot's own checksum when the
// restore decodes it: an error decision, nothing left in the session, the entry
// quarantined.
TEST_F(recurrent_stage, ACorruptedSnapshotBlockIsAnIntegrityErrorAndQuarantined) {
    const toks a = testing::run_of(100, 20);  // checkpoints 8, 16 and the end, 19
    request(0, a);
    cache->wait_for_records();
    exact_state_store & store = cache->exact_store_for_testing();
    for (entry_id id : store.entries_for_testing()) {
        const auto blobs = store.blobs_for_testing(id);
        ASSERT_FALSE(blobs.empty());
        ASSERT_TRUE(store.corrupt_for_testing(blobs.back(), 9));  // the state page is last
    }
    const restore_result r = cache->restore({ns, 1, a, 19, lookup_kind::try_restore, false, 0, {}});
    EXPECT_EQ(r.outcome, lookup_outcome::error);
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "integrity");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.exact_cache.quarantined"), "true");
    EXPECT_EQ(*backend.session_tokens(1), 0) << "nothing of it stays in the session";
    EXPECT_GE(cache->stats().n_quarantines, 1);
    check();
}

TEST_F(recurrent_stage, CheckpointsMergedInThePendingSlotKeepTheirOwnSnapshots) {
    // The worker held inside an unrelated record: every record of the next prompt waits
    // in the pending slot and merges there.
    testing::worker_gate gate(*cache);
    const toks other = testing::run_of(700, 10);
    request(2, other);
    gate.wait_until_held();
    const toks a = testing::run_of(100, 30);
    request(0, a);
    EXPECT_GE(cache->stats().n_records_merged, 3) << "8, 16, 24 and 29 in one job";
    gate.open();
    cache->wait_for_records();
    for (int64_t n : {8, 16, 24}) {
        const toks q = testing::concat(first_of(a, static_cast<size_t>(n)), toks{1});
        const restore_result r = cache->restore({ns, 1, q, n, lookup_kind::restore, false, 0, {}});
        ASSERT_EQ(r.restored_tokens, n);
        expect_exact(1, q, n);
    }
    check();
}

// ---------------------------------------------------------------------------------
// Waiting for a queued record

TEST_F(recurrent_stage, ALookupWaitsForAQueuedRecordThatWouldServeIt) {
    testing::worker_gate gate(*cache);
    request(2, testing::run_of(700, 10));  // the worker is held inside this one
    gate.wait_until_held();
    const toks a = testing::run_of(100, 20);
    request(0, a);  // queued behind it: 8, 16 and 19
    auto pending = std::async(std::launch::async, [&] { return cache->restore({ns, 1, a, 19, lookup_kind::restore, false, 0, {}}); });
    // Let the record go once the lookup is waiting for it.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (cache->stats().n_lookup_waits == 0 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(cache->stats().n_lookup_waits, 1);
    gate.open();
    const restore_result r = pending.get();
    EXPECT_EQ(r.outcome, lookup_outcome::hit);
    EXPECT_EQ(r.restored_tokens, 19);
    expect_exact(1, a, 19);
    EXPECT_EQ(cache->stats().n_lookup_wait_timeouts, 0);
    EXPECT_NE(sink->last(lookup_event_name, "skippy.kv.record_wait_ms"), "");
    cache->wait_for_records();
    check();
}

TEST_F(recurrent_stage, TheWaitIsBoundedAndOnlyForARecordThatWouldServe) {
    stage_cache_config c = recurrent_config();
    c.record_wait_ms = 30;
    make(c);
    testing::worker_gate gate(*cache);
    request(2, testing::run_of(700, 10));
    gate.wait_until_held();
    const toks a = testing::run_of(100, 20);
    request(0, a);

    // Another prompt: nothing queued would serve it, no wait.
    const toks other = testing::run_of(300, 20);
    restore_result r = cache->restore({ns, 1, other, 19, lookup_kind::restore, true, 0, {}});
    EXPECT_EQ(r.outcome, lookup_outcome::miss);
    EXPECT_EQ(cache->stats().n_lookup_waits, 0);

    // The queued prompt: waits 30 ms, then misses (the caller computes).
    const auto t0 = std::chrono::steady_clock::now();
    r = cache->restore({ns, 1, a, 19, lookup_kind::restore, true, 0, {}});
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
    EXPECT_EQ(r.outcome, lookup_outcome::miss);
    EXPECT_EQ(cache->stats().n_lookup_waits, 1);
    EXPECT_EQ(cache->stats().n_lookup_wait_timeouts, 1);
    // A probe waits the same way.
    probe_result p = cache->probe({ns, a, 19, 1, 0, {}});
    EXPECT_EQ(p.outcome, lookup_outcome::miss);
    EXPECT_EQ(cache->stats().n_lookup_wait_timeouts, 2);

    gate.open();
    cache->wait_for_records();
    p = cache->probe({ns, a, 19, 1, 0, {}});
    EXPECT_EQ(p.outcome, lookup_outcome::hit);
    EXPECT_EQ(p.restorable_tokens, 19);
    EXPECT_EQ(cache->stats().n_lookup_waits, 2) << "nothing queued any more: no wait";
    check();
}

TEST(stage_cache_config, CheckpointSpacingAndRecordWaitAreValidated) {
    stage_cache_config c;
    EXPECT_EQ(c.checkpoint_tokens, 64);
    EXPECT_EQ(c.record_wait_ms, 2000);
    c.checkpoint_tokens = -1;
    EXPECT_FALSE(c.validate().is_ok());
    c.checkpoint_tokens = 0;
    EXPECT_TRUE(c.validate().is_ok());
    c.record_wait_ms = -1;
    EXPECT_FALSE(c.validate().is_ok());
}

}  // namespace
}  // namespace skippy::cache
