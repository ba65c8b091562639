// The stage cache over the real kv_pool (pool_kv_backend): restores through the
// resident and the exact-state tier give byte-identical K/V rows to a cold compute;
// a corrupted stored block falls back to compute; the record worker exports while
// sessions keep writing (run under TSan).
#include "cache/pool_kv_backend.h"
#include "tier_fakes.h"
#include "cache/stage_cache.h"
#include "kv/kv_page.h"

#include "fakes.h"
#include "worker_gate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <atomic>
#include <future>
#include <thread>

namespace skippy::cache {
namespace {

using toks = std::vector<token_id>;

kv_geometry geometry() {
    kv_geometry g;
    g.n_layers = 2;
    g.kv_dim = 4;
    g.block_tokens = 4;
    g.dtype = kv_dtype::f16;
    return g;
}

// The K (kind 0) or V (kind 1) element a "forward" writes: depends on every token up
// to the position, like real KV.
uint16_t kv_elem(uint64_t prefix_state, int32_t il, int kind, int e) {
    uint64_t x = testing::mix_kv(prefix_state, il * 16 + kind * 8 + e);
    return static_cast<uint16_t>(x >> 17);
}

void compute(kv_sequence & s, int64_t pos_start, const toks & all_tokens, int64_t end) {
    ASSERT_TRUE(s.prepare_write(pos_start, end - pos_start).is_ok());
    uint64_t state = 0;
    for (int64_t p = 0; p < end; ++p) {
        state = testing::mix_kv(state, all_tokens[static_cast<size_t>(p)]);
        if (p < pos_start) continue;
        for (int32_t il = 0; il < 2; ++il) {
            uint16_t k[4], v[4];
            for (int e = 0; e < 4; ++e) {
                k[e] = kv_elem(state, il, 0, e);
                v[e] = kv_elem(state, il, 1, e);
            }
            std::memcpy(s.k_row(il, p), k, sizeof(k));
            std::memcpy(s.v_row(il, p), v, sizeof(v));
        }
    }
}

// Whether positions [0, n) of s hold exactly what a cold compute of tokens writes.
bool rows_match(const kv_sequence & s, const toks & tokens, int64_t n) {
    if (s.n_tokens() != n) return false;
    uint64_t state = 0;
    for (int64_t p = 0; p < n; ++p) {
        state = testing::mix_kv(state, tokens[static_cast<size_t>(p)]);
        for (int32_t il = 0; il < 2; ++il) {
            uint16_t k[4], v[4];
            std::memcpy(k, s.k_row(il, p), sizeof(k));
            std::memcpy(v, s.v_row(il, p), sizeof(v));
            for (int e = 0; e < 4; ++e) {
                if (k[e] != kv_elem(state, il, 0, e) || v[e] != kv_elem(state, il, 1, e)) return false;
            }
        }
    }
    return true;
}

cache_namespace pool_ns() {
    namespace_fields f;
    f.model_identity = "pool-test";
    f.layer_start = 2;
    f.layer_end = 4;
    f.kv_block_tokens = 4;
    return *make_namespace(f);
}

using testing::run_of;

struct pool_fixture : ::testing::Test {
    kv_pool                  pool{geometry(), 48};
    kv_sequence              s0{pool}, s1{pool}, s2{pool};
    pool_kv_backend          backend{pool, {&s0, &s1, &s2}, 2, 4};
    cache_namespace          ns = pool_ns();
    std::unique_ptr<stage_cache> cache;

    stage_cache_config config(int64_t max_entries, int64_t exact_bytes) {
        stage_cache_config c;
        c.min_tokens = 4;
        c.max_entries = max_entries;
        c.exact_max_bytes = exact_bytes;
        c.exact_page_tokens = 8;
        c.exact_block_bytes = 64;
        return c;
    }
    void make(const stage_cache_config & c) { cache = std::move(stage_cache::create(backend, c).value()); }
    kv_sequence & seq(int32_t s) { return s == 0 ? s0 : s == 1 ? s1 : s2; }

    // Cold prefill of `prompt` on a session, then a record.
    void prefill_and_record(int32_t s, const toks & prompt) {
        compute(seq(s), 0, prompt, static_cast<int64_t>(prompt.size()));
        cache->note_prefill(s, 0, prompt);
        cache->record(ns, s, record_reason::final_prefill);
    }
    void check() {
        status st = cache->check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
};

TEST_F(pool_fixture, ResidentRestoreIsByteIdentical) {
    make(config(8, 0));
    toks p = run_of(5, 14);
    prefill_and_record(0, p);
    // Session 0 decodes on: the shared tail block is copied, the entry keeps its bytes.
    toks decoded = p;
    decoded.push_back(77);
    compute(s0, 14, decoded, 15);
    restore_result r = cache->restore({ns, 1, p, 13});
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.tier, cache_tier::resident);
    EXPECT_TRUE(rows_match(s1, p, 13));
    EXPECT_EQ(s1.blocks()[0], s0.blocks()[0]);  // shared, not copied
    compute(s1, 13, p, 14);                     // the last prompt token
    EXPECT_TRUE(rows_match(s1, p, 14));
    EXPECT_TRUE(rows_match(s0, decoded, 15));
    check();
}

TEST_F(pool_fixture, ExactStateRestoreIsByteIdenticalAndPagesAreValid) {
    make(config(0, 1 << 20));
    toks p = run_of(5, 19);
    prefill_and_record(0, p);
    cache->wait_for_records();
    exact_state_store & store = cache->exact_store_for_testing();
    ASSERT_EQ(store.entries_for_testing().size(), 1u);
    auto pages = store.read_pages(store.entries_for_testing()[0], 19);
    ASSERT_TRUE(pages.is_ok());
    ASSERT_EQ(pages->size(), 3u);  // [0,8) [8,16) [16,19)
    for (const page_bytes & pg : *pages) {
        auto h = validate_page(pg.bytes);
        ASSERT_TRUE(h.is_ok()) << h.error().to_string();
        EXPECT_EQ(h->token_start, pg.token_start);
        EXPECT_EQ(h->geometry.layer_start, 2);
    }
    s0.clear();
    restore_result r = cache->restore({ns, 1, p, 18});
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_EQ(r.imported_pages, 3);
    EXPECT_TRUE(rows_match(s1, p, 18));
    check();
}

TEST_F(pool_fixture, CorruptedStoredBlockFallsBackToAnExactCompute) {
    make(config(0, 1 << 20));
    toks p = run_of(5, 16);
    prefill_and_record(0, p);
    cache->wait_for_records();
    s0.clear();
    exact_state_store & store = cache->exact_store_for_testing();
    auto blobs = store.blobs_for_testing(store.entries_for_testing()[0]);
    ASSERT_TRUE(store.corrupt_for_testing(blobs[3], 10));
    restore_result r = cache->restore({ns, 1, p, 15});
    EXPECT_EQ(r.outcome, lookup_outcome::error);
    EXPECT_EQ(r.error, error_code::integrity);
    EXPECT_EQ(r.counters.kv_lookup_errors, 1u);
    EXPECT_EQ(s1.n_tokens(), 0);
    EXPECT_EQ(cache->stats().n_quarantines, 1);
    compute(s1, 0, p, 16);  // the caller computes: same bytes as ever
    EXPECT_TRUE(rows_match(s1, p, 16));
    check();
}

TEST_F(pool_fixture, DemotedEntryRestoresByteIdentical) {
    stage_cache_config one_waiting = config(8, 1 << 20);
    one_waiting.max_pending_records = 1;  // so that c's record drops b's, which only the resident tier keeps
    make(one_waiting);
    testing::worker_gate gate(*cache);
    toks a = run_of(5, 10), b = run_of(50, 12), c = run_of(90, 8);
    prefill_and_record(0, a);
    gate.wait_until_held();
    prefill_and_record(1, b);  // worker busy: b's record waits...
    prefill_and_record(2, c);  // ...and c's supersedes it: only the resident tier has b
    s0.clear();
    s1.clear();
    s2.clear();
    gate.open();
    cache->wait_for_records();
    EXPECT_EQ(cache->stats().n_records_superseded, 1);
    EXPECT_TRUE(cache->make_room_for_write(2, 0, 48 * 4).enough);  // every resident entry goes
    EXPECT_EQ(cache->stats().n_demotions, 1);
    s2.clear();
    restore_result r = cache->restore({ns, 2, b, 11});
    EXPECT_EQ(r.tier, cache_tier::exact_state);
    EXPECT_TRUE(rows_match(s2, b, 11));
    check();
}

// A write admitted by make_room_for_write takes its blocks under the cache's lock; a
// restore on another session (which imports under that lock) waits, and finds the
// pool full afterwards instead of taking the room the write was admitted with.
TEST_F(pool_fixture, ARestoreCannotTakeTheRoomMadeForAWrite) {
    make(config(0, 1 << 20));  // exact-state only: restores import fresh blocks
    const toks p = run_of(5, 40);  // 10 blocks
    prefill_and_record(0, p);
    cache->wait_for_records();
    s0.clear();
    compute(s2, 0, run_of(60, 152), 152);  // 38 blocks: room for one of the two below
    ASSERT_EQ(pool.n_free(), 10);

    std::atomic<bool> restore_started{false}, restore_done{false};
    bool done_before_write = true;
    restore_result r;
    std::thread other;
    const admission_result a = cache->make_room_for_write(0, 0, 40, [&] {
        other = std::thread([&] {
            restore_started = true;
            r = cache->restore({ns, 1, p, 39});
            restore_done = true;
        });
        while (!restore_started) std::this_thread::yield();
        // Long enough for a restore of 10 small pages to finish if it could get in.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        done_before_write = restore_done;
        return s0.prepare_write(0, 40);
    });
    other.join();
    EXPECT_FALSE(done_before_write) << "the restore ran between the admission and the write";
    EXPECT_TRUE(a.enough);
    EXPECT_TRUE(a.write_status.is_ok()) << a.write_status.to_string();
    EXPECT_EQ(s0.n_tokens(), 40);
    // The restore found no room: a clean error, and its session is left empty.
    EXPECT_EQ(r.outcome, lookup_outcome::error);
    EXPECT_EQ(r.error, error_code::unavailable);
    EXPECT_EQ(s1.n_tokens(), 0);
    EXPECT_EQ(pool.n_free(), 0);
    check();
}

// Two lanes on two threads share one cache; the worker exports snapshots while the
// lanes keep writing, truncating and reusing blocks. Every restore must be exact.
TEST_F(pool_fixture, LanesAndTheRecordWorkerRunConcurrently) {
    make(config(6, 1 << 16));
    auto lane = [&](int32_t s, uint32_t seed) {
        uint32_t x = seed;
        auto next = [&] { x = x * 1664525u + 1013904223u; return static_cast<int>(x >> 16); };
        for (int i = 0; i < 60; ++i) {
            toks p;
            const int base = next() % 4;
            for (int j = 0; j < 6 + next() % 14; ++j) p.push_back(j < 8 ? base : next() % 3);
            const int64_t n = static_cast<int64_t>(p.size());
            restore_result r = cache->restore({ns, s, p, n - 1});
            if (!rows_match(seq(s), p, r.restored_tokens)) {
                ADD_FAILURE() << "lane " << s << " request " << i << " restored wrong KV";
                return;
            }
            // Each write takes its blocks inside its admission, as a stage's does, so the
            // other lane's restore cannot take them in between: with at most 18 of the
            // 48 blocks held by the lanes and a running record, every write fits.
            // compute() then finds them prepared.
            const auto admit = [&](int64_t from, int64_t count) {
                const status st =
                    cache->make_room_for_write(s, from, count, [&] { return seq(s).prepare_write(from, count); }).write_status;
                if (!st.is_ok()) ADD_FAILURE() << "lane " << s << " request " << i << ": " << st.to_string();
                return st.is_ok();
            };
            if (!admit(r.restored_tokens, n - r.restored_tokens)) return;
            compute(seq(s), r.restored_tokens, p, n);
            cache->note_prefill(s, r.restored_tokens, toks(p.begin() + r.restored_tokens, p.end()));
            cache->record(ns, s, record_reason::final_prefill);
            toks decoded = p;
            decoded.push_back(99);
            decoded.push_back(98);
            if (!admit(n, 2)) return;
            compute(seq(s), n, decoded, n + 2);  // decode writes into the recorded tail
            cache->record(ns, s, record_reason::stop);
            cache->reset_session(s);
            seq(s).clear();
        }
    };
    std::thread t0(lane, 0, 1u), t1(lane, 1, 2u);
    t0.join();
    t1.join();
    cache->wait_for_records();
    check();
    stage_cache_stats st = cache->stats();
    EXPECT_GT(st.totals.kv_lookup_hits, 0u);
    EXPECT_GT(st.worker.n_run, 0);
    cache.reset();
    EXPECT_EQ(pool.n_free(), 48);
}

}  // namespace
}  // namespace skippy::cache
