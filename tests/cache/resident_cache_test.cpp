// Resident tier on the fake pool (block_tokens 4, five blocks): records hold blocks,
// restores share them, admission evicts cheapest first then least recently used,
// never an entry in use.
#include "cache/resident_cache.h"
#include "tier_fakes.h"

#include "fakes.h"

#include <gtest/gtest.h>

namespace skippy::cache {
namespace {

using testing::expected_kv;
using testing::fake_kv_backend;
using toks = std::vector<token_id>;

using testing::ns_of;

toks run(int32_t first, int n) {
    toks t;
    for (int i = 0; i < n; ++i) t.push_back(first + i);
    return t;
}

struct resident_tier_fixture : ::testing::Test {
    fake_kv_backend backend{5, 4, 2};
    radix_index     index;
    resident_cache  cache{index, backend, resident_config{8}};
    std::vector<entry_id> evicted;  // in eviction order
    evict_hook hook = [this](const evicted_resident & e) {
        // Called before the blocks go: the entry still holds them.
        for (kv_block_id b : e.blocks) EXPECT_GE(backend.refcount(b), 1);
        evicted.push_back(e.id);
    };

    void check() {
        status st = index.check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        st = cache.check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_EQ(backend.violations(), 0);
    }
    // Computes `t` in session 0, records it, empties session 0: only the entry holds it.
    entry_id cached(const toks & t) {
        EXPECT_TRUE(backend.compute(0, 0, t).is_ok());
        auto r = cache.record(ns_of(1), t, 0, hook);
        EXPECT_TRUE(r.is_ok());
        EXPECT_TRUE(backend.truncate_session(0, 0).is_ok());
        return r->id;
    }
};

TEST_F(resident_tier_fixture, RecordHoldsTheSessionsBlocks) {
    // session 0: [b0: t0 t1 t2 t3][b1: t4 t5 . .]
    toks t = run(10, 6);
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    auto blocks = backend.blocks_of(0);
    auto r = cache.record(ns_of(1), t, 0, hook);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->outcome, resident_record_outcome::recorded);
    // entry E holds b0 b1 too: refcounts 2
    EXPECT_EQ(backend.refcount(blocks[0]), 2);
    EXPECT_EQ(backend.refcount(blocks[1]), 2);
    EXPECT_EQ(cache.stats().n_blocks_held, 2);
    check();
}

TEST_F(resident_tier_fixture, RestoreSharesTheBlocksWithoutCopying) {
    toks t = run(10, 6);
    entry_id e = cached(t);
    const int64_t free_before = backend.n_free_blocks();
    // session 1 restores 5 of the 6 tokens: shares [b0][b1], no new block
    ASSERT_TRUE(cache.restore(e, 1, 5).is_ok());
    EXPECT_EQ(backend.n_free_blocks(), free_before);
    auto kv = backend.kv_of(1);
    auto want = expected_kv(t);
    want.resize(5);
    EXPECT_EQ(kv, want);
    check();
}

TEST_F(resident_tier_fixture, AWriteAfterRecordCopiesTheSharedBlock) {
    toks t = run(10, 6);
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    auto r = cache.record(ns_of(1), t, 0, hook);
    // session 0 decodes t6 into b1, which E shares: b1 is copied to b2 first
    //   E:         [b0][b1: t4 t5 . .]
    //   session 0: [b0][b2: t4 t5 t6 .]
    ASSERT_TRUE(backend.compute(0, 6, toks{99}).is_ok());
    ASSERT_TRUE(cache.restore(r->id, 1, 6).is_ok());
    EXPECT_EQ(backend.kv_of(1), expected_kv(t));  // the entry's bytes did not change
    check();
}

TEST_F(resident_tier_fixture, ARecordAlreadyServedIsCovered) {
    toks t = run(10, 6);
    cached(t);
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    auto r = cache.record(ns_of(1), toks(t.begin(), t.begin() + 4), 0, hook);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->outcome, resident_record_outcome::covered);
    EXPECT_EQ(cache.stats().n_entries, 1);
    check();
}

TEST_F(resident_tier_fixture, ALongerRecordReplacesTheShorterEntryOnItsPath) {
    toks t = run(10, 8);
    entry_id short_e = cached(toks(t.begin(), t.begin() + 4));
    ASSERT_TRUE(backend.compute(0, 0, t).is_ok());
    auto r = cache.record(ns_of(1), t, 0, hook);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->n_covered_removed, 1);
    EXPECT_FALSE(cache.holds(short_e));
    EXPECT_EQ(cache.peek(ns_of(1), toks(t.begin(), t.begin() + 4)).matched_tokens, 4);
    EXPECT_EQ(cache.stats().n_covered_removals, 1);
    EXPECT_TRUE(evicted.empty());  // covered entries are not evictions (no demotion)
    check();
}

TEST_F(resident_tier_fixture, MakeRoomEvictsCheapestFirstThenLeastRecentlyUsed) {
    //   E1 = 4 tokens [b0]   E2 = 8 tokens [b1 b2]   E3 = 4 tokens [b3]   free: b4
    entry_id e1 = cached(run(100, 4));
    entry_id e2 = cached(run(200, 8));
    entry_id e3 = cached(run(300, 4));
    index.lookup(ns_of(1), run(100, 4), entry_kind::resident);  // E1 used after E3
    EXPECT_EQ(backend.n_free_blocks(), 1);
    make_room_result m = cache.make_room(3, hook);
    EXPECT_TRUE(m.enough);
    EXPECT_EQ(m.n_free_blocks, 3);
    // Both 4-token entries are cheaper than E2; of those, E3 is least recently used.
    EXPECT_EQ(evicted, (std::vector<entry_id>{e3, e1}));
    EXPECT_TRUE(cache.holds(e2));
    check();
}

TEST_F(resident_tier_fixture, MakeRoomNeverEvictsAnEntryInUse) {
    entry_id e1 = cached(run(100, 4));
    entry_id e2 = cached(run(200, 8));
    ASSERT_TRUE(index.acquire(e1).is_ok());
    make_room_result m = cache.make_room(5, hook);
    EXPECT_FALSE(m.enough);
    EXPECT_EQ(m.n_free_blocks, 4);
    EXPECT_EQ(evicted, (std::vector<entry_id>{e2}));
    EXPECT_TRUE(cache.holds(e1));
    EXPECT_EQ(cache.evict(e1, hook).code(), error_code::unavailable);
    ASSERT_TRUE(index.release(e1).is_ok());
    check();
}

TEST_F(resident_tier_fixture, MakeRoomEvictsNothingWhenThereIsRoom) {
    cached(run(100, 4));
    make_room_result m = cache.make_room(2, hook);
    EXPECT_TRUE(m.enough);
    EXPECT_EQ(m.n_evicted, 0);
}

TEST_F(resident_tier_fixture, EntryCapEvictsTheFirstVictim) {
    resident_cache capped(index, backend, resident_config{2});
    auto rec = [&](const toks & t) {
        EXPECT_TRUE(backend.compute(0, 0, t).is_ok());
        auto r = capped.record(ns_of(1), t, 0, hook);
        EXPECT_TRUE(backend.truncate_session(0, 0).is_ok());
        return *r;
    };
    auto a = rec(run(100, 4));
    auto b = rec(run(200, 4));
    auto c = rec(run(300, 4));
    EXPECT_EQ(c.outcome, resident_record_outcome::recorded);
    EXPECT_EQ(c.n_evicted, 1);
    EXPECT_FALSE(capped.holds(a.id));
    EXPECT_TRUE(capped.holds(b.id));
    // All others in use: the new entry does not fit.
    ASSERT_TRUE(index.acquire(b.id).is_ok());
    ASSERT_TRUE(index.acquire(c.id).is_ok());
    auto d = rec(run(400, 4));
    EXPECT_EQ(d.outcome, resident_record_outcome::full);
    EXPECT_EQ(capped.stats().n_entries, 2);
    ASSERT_TRUE(index.release(b.id).is_ok());
    ASSERT_TRUE(index.release(c.id).is_ok());
    status st = capped.check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
}

TEST_F(resident_tier_fixture, ZeroMaxEntriesTurnsTheTierOff) {
    resident_cache off(index, backend, resident_config{0});
    ASSERT_TRUE(backend.compute(0, 0, run(1, 4)).is_ok());
    auto r = off.record(ns_of(1), run(1, 4), 0, hook);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->outcome, resident_record_outcome::off);
    EXPECT_EQ(backend.total_refs(), 1);
}

TEST(resident_cache, DestructorReleasesEveryBlock) {
    fake_kv_backend backend{5, 4, 1};
    radix_index index;
    {
        resident_cache cache(index, backend, resident_config{8});
        ASSERT_TRUE(backend.compute(0, 0, run(1, 6)).is_ok());
        ASSERT_TRUE(cache.record(ns_of(1), run(1, 6), 0, nullptr).is_ok());
        ASSERT_TRUE(backend.truncate_session(0, 0).is_ok());
        EXPECT_EQ(backend.n_free_blocks(), 3);
    }
    EXPECT_EQ(backend.n_free_blocks(), 5);
    EXPECT_EQ(index.stats().n_entries[0], 0);
    EXPECT_EQ(backend.violations(), 0);
}

}  // namespace
}  // namespace skippy::cache
