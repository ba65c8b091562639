// Exact-state store: pages over the blob store, limits, LRU, last entry, quarantine.
#include "cache/exact_state_store.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace skippy::cache {
namespace {

using toks = std::vector<token_id>;

using testing::ns_of;

// Pages of 2 tokens; page bytes are 8 bytes per token derived from the prefix so that
// shared prefixes give identical pages.
std::vector<page_bytes> pages_for(const toks & t) {
    std::vector<page_bytes> out;
    uint64_t acc = 0;
    std::vector<uint64_t> kv;
    for (token_id x : t) kv.push_back(acc = acc * 1000003 + static_cast<uint64_t>(x) + 1);
    for (size_t s = 0; s < t.size(); s += 2) {
        page_bytes p;
        p.token_start = static_cast<int64_t>(s);
        p.token_count = static_cast<int64_t>(std::min<size_t>(2, t.size() - s));
        p.page_id = "p" + std::to_string(s);
        p.bytes.resize(static_cast<size_t>(p.token_count) * 8);
        std::memcpy(p.bytes.data(), &kv[s], p.bytes.size());
        out.push_back(std::move(p));
    }
    return out;
}

exact_state_config limits(int64_t soft, int64_t hard) { return exact_state_config{soft, hard, 8}; }

TEST(exact_state_store, StoresPagesAndReadsThemBack) {
    radix_index ix;
    exact_state_store store(ix, limits(1000, 1000));
    toks t{1, 2, 3, 4, 5};
    auto r = store.insert(ns_of(1), t, pages_for(t));
    ASSERT_TRUE(r.is_ok()) << r.error().to_string();
    EXPECT_TRUE(r->inserted);
    auto pages = store.read_pages(r->id, 5);
    ASSERT_TRUE(pages.is_ok());
    ASSERT_EQ(pages->size(), 3u);
    EXPECT_EQ((*pages)[2].token_start, 4);
    EXPECT_EQ((*pages)[2].bytes, pages_for(t)[2].bytes);
    // Only the pages that start before max_tokens.
    EXPECT_EQ(store.read_pages(r->id, 3)->size(), 2u);
    EXPECT_INVARIANTS(store);
    EXPECT_INVARIANTS(ix);
}

TEST(exact_state_store, RefusesPagesThatDoNotCoverTheTokens) {
    radix_index ix;
    exact_state_store store(ix, limits(1000, 1000));
    toks t{1, 2, 3};
    auto pages = pages_for(t);
    pages.pop_back();
    EXPECT_EQ(store.insert(ns_of(1), t, pages).error().code(), error_code::invalid_argument);
    EXPECT_EQ(ix.stats().n_entries[1], 0);
}

TEST(exact_state_store, SharedPrefixPagesAreStoredOnce) {
    radix_index ix;
    exact_state_store store(ix, limits(10000, 10000));
    toks a{1, 2, 3, 4, 5, 6};
    toks b{1, 2, 3, 4, 9};
    ASSERT_TRUE(store.insert(ns_of(1), a, pages_for(a)).is_ok());
    ASSERT_TRUE(store.insert(ns_of(1), b, pages_for(b)).is_ok());
    exact_state_stats s = store.stats();
    EXPECT_EQ(s.blobs.logical_bytes, (6 + 5) * 8);
    EXPECT_EQ(s.blobs.physical_bytes, (6 + 1) * 8);  // b's pages [0,2) [2,4) are a's
    EXPECT_INVARIANTS(store);
}

std::vector<std::string> ids_of(const std::vector<page_bytes> & pages) {
    std::vector<std::string> ids;
    for (const page_bytes & p : pages) ids.push_back(p.page_id);
    return ids;
}

// How many leading pages of t (named ids) the store would share; they are held, counted
// and given back.
size_t shareable_pages(exact_state_store & store, uint8_t ns, const toks & t, const std::vector<std::string> & ids) {
    const std::vector<held_page> held = store.hold_leading_pages(ns_of(ns), t, ids);
    store.release_held(held);
    return held.size();
}

// A record of b after a: b's pages inside the prefix it shares with a are taken from a's
// entry by reference (no bytes handed in), and b reads back exactly its own pages.
TEST(exact_state_store, HeldLeadingPagesEnterAnEntryWithoutTheirBytes) {
    radix_index ix;
    exact_state_store store(ix, limits(10000, 10000));
    toks a{1, 2, 3, 4, 5, 6};
    toks b{1, 2, 3, 4, 9};
    ASSERT_TRUE(store.insert(ns_of(1), a, pages_for(a)).is_ok());
    const int64_t refs_before = store.stats().blobs.n_refs;
    const auto b_pages = pages_for(b);
    std::vector<held_page> held = store.hold_leading_pages(ns_of(1), b, ids_of(b_pages));
    ASSERT_EQ(held.size(), 2u);  // [0,2) [2,4); a's [4,6) is past the common prefix
    EXPECT_EQ(held[1].token_start, 2);
    EXPECT_EQ(store.stats().blobs.n_refs, refs_before + 4);  // two 8-byte blocks per page
    auto r = store.insert(ns_of(1), b, std::move(held), std::span<const page_bytes>(b_pages).subspan(2));
    ASSERT_TRUE(r.is_ok()) << r.error().to_string();
    EXPECT_TRUE(r->inserted);
    EXPECT_INVARIANTS(store);
    // The same bytes and the same physical and logical totals as an insert of all pages.
    auto back = store.read_pages(r->id, 5);
    ASSERT_TRUE(back.is_ok());
    ASSERT_EQ(back->size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*back)[i].bytes, b_pages[i].bytes) << i;
    EXPECT_EQ(store.stats().blobs.logical_bytes, (6 + 5) * 8);
    EXPECT_EQ(store.stats().blobs.physical_bytes, (6 + 1) * 8);
    // b keeps its shared pages when a goes.
    const match_result ma = ix.peek(ns_of(1), a, entry_kind::exact_state);
    ASSERT_TRUE(store.evict(ma.id).is_ok());
    back = store.read_pages(r->id, 5);
    ASSERT_TRUE(back.is_ok());
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*back)[i].bytes, b_pages[i].bytes) << i;
    EXPECT_EQ(store.stats().blobs.physical_bytes, 5 * 8);
    EXPECT_INVARIANTS(store);
    EXPECT_INVARIANTS(ix);
}

// Holding stops at the first page that is not the stored one: another id, past the
// common prefix, another namespace; nothing is held from an empty store.
TEST(exact_state_store, HoldStopsAtThePagesTheRecordDoesNotShare) {
    radix_index ix;
    exact_state_store store(ix, limits(10000, 10000));
    toks a{1, 2, 3, 4, 5, 6};
    EXPECT_EQ(shareable_pages(store, 1, a, ids_of(pages_for(a))), 0u);
    ASSERT_TRUE(store.insert(ns_of(1), a, pages_for(a)).is_ok());
    const int64_t refs = store.stats().blobs.n_refs;
    auto ids = ids_of(pages_for(a));
    ids[1] = "other";
    EXPECT_EQ(shareable_pages(store, 1, a, ids), 1u);
    EXPECT_EQ(shareable_pages(store, 2, a, ids_of(pages_for(a))), 0u);
    toks c{1, 2, 3, 7, 7, 7};  // shares 3 tokens: only [0,2) lies inside
    EXPECT_EQ(shareable_pages(store, 1, c, ids_of(pages_for(c))), 1u);
    EXPECT_EQ(store.stats().blobs.n_refs, refs);
    EXPECT_INVARIANTS(store);
}

// A block that failed a verification is not shared: the record exports that page
// afresh instead of taking a bad block into a new entry.
TEST(exact_state_store, HoldStopsAtABlockThatFailedVerification) {
    radix_index ix;
    exact_state_store store(ix, limits(10000, 10000));
    toks a{1, 2, 3, 4, 5, 6};
    auto ins = store.insert(ns_of(1), a, pages_for(a));
    ASSERT_TRUE(ins.is_ok());
    const auto blobs = store.blobs_for_testing(ins->id);
    ASSERT_EQ(blobs.size(), 6u);  // two blocks per page
    ASSERT_TRUE(store.corrupt_for_testing(blobs[2], 0));  // page [2,4)
    const int64_t refs = store.stats().blobs.n_refs;
    EXPECT_EQ(shareable_pages(store, 1, a, ids_of(pages_for(a))), 3u);  // not known bad yet
    EXPECT_EQ(store.verify(ins->id).code(), error_code::integrity);
    EXPECT_EQ(shareable_pages(store, 1, a, ids_of(pages_for(a))), 1u);
    EXPECT_EQ(store.stats().blobs.n_refs, refs);
    EXPECT_INVARIANTS(store);
}

// Whatever insert does with them, the held references do not leak: an entry already
// there, pages that do not line up after the held ones.
TEST(exact_state_store, InsertGivesHeldReferencesBackWhenItStoresNothing) {
    radix_index ix;
    exact_state_store store(ix, limits(10000, 10000));
    toks a{1, 2, 3, 4, 5, 6};
    toks b{1, 2, 3, 4, 9};
    ASSERT_TRUE(store.insert(ns_of(1), a, pages_for(a)).is_ok());
    ASSERT_TRUE(store.insert(ns_of(1), b, pages_for(b)).is_ok());
    const int64_t refs = store.stats().blobs.n_refs;
    const auto b_pages = pages_for(b);
    auto held = store.hold_leading_pages(ns_of(1), b, ids_of(b_pages));
    ASSERT_EQ(held.size(), 3u);  // all of b's own entry
    EXPECT_GT(store.stats().blobs.n_refs, refs);
    auto present = store.insert(ns_of(1), b, std::move(held), {});
    ASSERT_TRUE(present.is_ok());
    EXPECT_FALSE(present->inserted);
    EXPECT_EQ(store.stats().blobs.n_refs, refs);
    toks d{1, 2, 3, 4, 8, 8};
    const auto d_pages = pages_for(d);
    auto gap = store.insert(ns_of(1), d, store.hold_leading_pages(ns_of(1), d, ids_of(d_pages)),
                            std::span<const page_bytes>(d_pages).subspan(1));  // [2,4) twice
    EXPECT_EQ(gap.error().code(), error_code::invalid_argument);
    EXPECT_EQ(store.stats().blobs.n_refs, refs);
    EXPECT_INVARIANTS(store);
}

TEST(exact_state_store, SecondInsertOfTheSamePathReturnsTheEntry) {
    radix_index ix;
    exact_state_store store(ix, limits(1000, 1000));
    toks t{1, 2};
    auto a = store.insert(ns_of(1), t, pages_for(t));
    auto b = store.insert(ns_of(1), t, pages_for(t));
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_FALSE(b->inserted);
    EXPECT_EQ(a->id, b->id);
    EXPECT_EQ(store.stats().blobs.logical_bytes, 16);
}

TEST(exact_state_store, SoftLimitEvictsLeastRecentlyUsed) {
    radix_index ix;
    exact_state_store store(ix, limits(32, 64));  // 32 bytes = 4 tokens
    toks a{1, 1}, b{2, 2}, c{3, 3};
    auto ea = store.insert(ns_of(1), a, pages_for(a));
    auto eb = store.insert(ns_of(1), b, pages_for(b));
    ix.lookup(ns_of(1), a, entry_kind::exact_state);  // a is now more recent than b
    auto ec = store.insert(ns_of(1), c, pages_for(c));
    ASSERT_TRUE(ec.is_ok());
    EXPECT_EQ(ec->n_evicted, 1);
    EXPECT_TRUE(store.holds(ea->id));
    EXPECT_FALSE(store.holds(eb->id));
    EXPECT_EQ(store.stats().blobs.physical_bytes, 32);
    EXPECT_EQ(store.stats().n_evictions, 1);
    EXPECT_INVARIANTS(store);
}

TEST(exact_state_store, NeverEvictsItsLastEntry) {
    radix_index ix;
    exact_state_store store(ix, limits(8, 64));  // soft below one entry
    toks a{1, 1, 1, 1};
    auto ea = store.insert(ns_of(1), a, pages_for(a));
    ASSERT_TRUE(ea.is_ok());
    EXPECT_TRUE(store.holds(ea->id));  // 32 bytes > soft, but it is the only one
    EXPECT_EQ(store.evict_to(0), 0);
    EXPECT_TRUE(store.holds(ea->id));
    toks b{2, 2, 2, 2};
    auto eb = store.insert(ns_of(1), b, pages_for(b));
    ASSERT_TRUE(eb.is_ok());
    EXPECT_FALSE(store.holds(ea->id));  // the older one went, the new one stays alone
    EXPECT_TRUE(store.holds(eb->id));
    EXPECT_INVARIANTS(store);
}

TEST(exact_state_store, HardLimitRefusesAnEntryTooLargeAlone) {
    radix_index ix;
    exact_state_store store(ix, limits(16, 16));
    toks small{1, 1};
    auto es = store.insert(ns_of(1), small, pages_for(small));
    toks big{2, 2, 2};
    auto eb = store.insert(ns_of(1), big, pages_for(big));
    ASSERT_FALSE(eb.is_ok());
    EXPECT_EQ(eb.error().code(), error_code::unavailable);
    EXPECT_TRUE(store.holds(es->id));  // nothing was evicted for a hopeless insert
    EXPECT_EQ(store.stats().n_refused, 1);
    EXPECT_EQ(ix.peek(ns_of(1), big, entry_kind::exact_state).id, no_entry);
    EXPECT_INVARIANTS(store);
    EXPECT_INVARIANTS(ix);
}

TEST(exact_state_store, ReferencedEntriesAreNotEvictedAndTheNewOneIsRefused) {
    radix_index ix;
    exact_state_store store(ix, limits(16, 16));
    toks a{1, 1};
    auto ea = store.insert(ns_of(1), a, pages_for(a));
    ASSERT_TRUE(ix.acquire(ea->id).is_ok());  // in use (a restore is reading it)
    toks b{2, 2};
    auto eb = store.insert(ns_of(1), b, pages_for(b));
    ASSERT_FALSE(eb.is_ok());
    EXPECT_TRUE(store.holds(ea->id));
    EXPECT_LE(store.stats().blobs.physical_bytes, 16);
    ASSERT_TRUE(ix.release(ea->id).is_ok());
    EXPECT_TRUE(store.insert(ns_of(1), b, pages_for(b)).is_ok());
    EXPECT_FALSE(store.holds(ea->id));
    EXPECT_INVARIANTS(store);
}

TEST(exact_state_store, CorruptedPageIsAnIntegrityErrorAndQuarantineRemovesIt) {
    radix_index ix;
    exact_state_store store(ix, limits(1000, 1000));
    toks t{1, 2, 3, 4};
    auto e = store.insert(ns_of(1), t, pages_for(t));
    auto blobs = store.blobs_for_testing(e->id);
    ASSERT_FALSE(blobs.empty());
    ASSERT_TRUE(store.corrupt_for_testing(blobs.back(), 3));
    auto pages = store.read_pages(e->id, 4);
    ASSERT_FALSE(pages.is_ok());
    EXPECT_EQ(pages.error().code(), error_code::integrity);
    EXPECT_EQ(store.read_pages(e->id, 2)->size(), 1u);  // the good first page still reads
    EXPECT_TRUE(store.quarantine(e->id).is_ok());
    EXPECT_EQ(store.stats().n_quarantines, 1);
    EXPECT_EQ(store.stats().blobs.n_blocks, 0);
    EXPECT_EQ(ix.peek(ns_of(1), t, entry_kind::exact_state).id, no_entry);
    EXPECT_INVARIANTS(store);
}

TEST(exact_state_store, DestructorReleasesEverything) {
    radix_index ix;
    {
        exact_state_store store(ix, limits(1000, 1000));
        toks t{1, 2, 3};
        ASSERT_TRUE(store.insert(ns_of(1), t, pages_for(t)).is_ok());
    }
    EXPECT_EQ(ix.stats().n_entries[1], 0);
    EXPECT_INVARIANTS(ix);
}

}  // namespace
}  // namespace skippy::cache
