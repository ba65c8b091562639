// Radix index: edge splits, longest prefix, sibling reuse, namespace isolation,
// references block eviction, normalization, and 10,000 randomized operations checked
// against a flat reference (matches and eviction order) with the invariants after
// every step.
#include "cache/radix_index.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

namespace skippy::cache {
namespace {

using toks = std::vector<token_id>;
constexpr entry_kind R = entry_kind::resident;
constexpr entry_kind E = entry_kind::exact_state;

using testing::ns_of;

TEST(radix_index, InsertSplitsAnEdgeWhereSequencesDiverge) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    // (root) ─[1 2 3 4 5]─ (a)
    auto a = ix.insert(ns, toks{1, 2, 3, 4, 5}, R);
    EXPECT_TRUE(a.inserted);
    EXPECT_EQ(ix.stats().n_edges, 1);
    EXPECT_INVARIANTS(ix);
    // (root) ─[1 2 3]─ (mid) ─┬─[4 5]─ (a)
    //                         └─[9]─── (b)
    auto b = ix.insert(ns, toks{1, 2, 3, 9}, R);
    radix_stats s = ix.stats();
    EXPECT_EQ(s.n_splits, 1);
    EXPECT_EQ(s.n_edges, 3);
    EXPECT_EQ(s.n_edge_tokens, 3 + 2 + 1);
    EXPECT_EQ(s.n_entries[0], 2);
    EXPECT_INVARIANTS(ix);
    EXPECT_EQ(ix.tokens_of(a.id), (toks{1, 2, 3, 4, 5}));
    EXPECT_EQ(ix.tokens_of(b.id), (toks{1, 2, 3, 9}));
}

TEST(radix_index, InsertingTheSamePathTwiceReturnsTheExistingEntry) {
    radix_index ix;
    auto a = ix.insert(ns_of(1), toks{1, 2}, R);
    auto again = ix.insert(ns_of(1), toks{1, 2}, R);
    EXPECT_FALSE(again.inserted);
    EXPECT_EQ(again.id, a.id);
    auto exact = ix.insert(ns_of(1), toks{1, 2}, E);  // the other kind at the same node
    EXPECT_TRUE(exact.inserted);
    EXPECT_NE(exact.id, a.id);
    EXPECT_EQ(ix.stats().n_nodes, 2);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, ResidentServesTheLongestCommonPrefix) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    toks long_seq(2000);
    for (size_t i = 0; i < long_seq.size(); ++i) long_seq[i] = static_cast<token_id>(i % 97);
    auto a = ix.insert(ns, long_seq, R);
    // A shorter query inside the cached sequence: served whole.
    toks q(long_seq.begin(), long_seq.begin() + 1500);
    match_result m = ix.peek(ns, q, R);
    EXPECT_EQ(m.id, a.id);
    EXPECT_EQ(m.matched_tokens, 1500);
    EXPECT_EQ(m.entry_tokens, 2000);
    // A query that diverges at 700: served its common prefix.
    toks d(long_seq.begin(), long_seq.begin() + 900);
    d[700] = 5000;
    EXPECT_EQ(ix.peek(ns, d, R).matched_tokens, 700);
    // A longer query: served the whole entry.
    toks longer = long_seq;
    longer.push_back(1);
    EXPECT_EQ(ix.peek(ns, longer, R).matched_tokens, 2000);
    EXPECT_EQ(ix.peek(ns, toks{4000}, R).id, no_entry);
}

TEST(radix_index, SiblingServesTheSharedPrefixOfADivergingQuery) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    ix.insert(ns, toks{1, 2, 3, 4}, R);
    ix.insert(ns, toks{1, 2, 3, 5}, R);
    // Neither entry is a prefix of the query, but both share [1 2 3] with it.
    match_result m = ix.peek(ns, toks{1, 2, 3, 7, 7}, R);
    EXPECT_EQ(m.matched_tokens, 3);
    EXPECT_NE(m.id, no_entry);
}

TEST(radix_index, ExactStateServesOnlyWholeCheckpointsOnThePath) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    auto short_cp = ix.insert(ns, toks{1, 2}, E);
    ix.insert(ns, toks{1, 2, 3, 4}, E);
    match_result m = ix.peek(ns, toks{1, 2, 3, 9}, E);  // [1 2 3 4] diverges: not on the path
    EXPECT_EQ(m.id, short_cp.id);
    EXPECT_EQ(m.matched_tokens, 2);
    EXPECT_EQ(ix.peek(ns, toks{1, 2, 3, 4, 5}, E).matched_tokens, 4);
    EXPECT_EQ(ix.peek(ns, toks{1}, E).id, no_entry);  // shorter than any checkpoint
    EXPECT_EQ(ix.peek(ns, toks{1, 2, 3, 9}, R).id, no_entry);  // kinds do not mix
}

// peek_common: the longest common prefix with any entry of the kind, exact state
// included (what a record can share), and no recency change.
TEST(radix_index, PeekCommonServesTheLongestCommonPrefixOfAnyKind) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    ix.insert(ns, toks{1, 2}, E);
    auto long_cp = ix.insert(ns, toks{1, 2, 3, 4}, E);
    match_result m = ix.peek_common(ns, toks{1, 2, 3, 9}, E);
    EXPECT_EQ(m.id, long_cp.id);  // [1 2 3 4] diverges after 3 tokens, which it shares
    EXPECT_EQ(m.matched_tokens, 3);
    EXPECT_EQ(m.entry_tokens, 4);
    EXPECT_EQ(ix.peek_common(ns, toks{7}, E).id, no_entry);
    EXPECT_EQ(ix.peek_common(ns, toks{1, 2, 3}, R).id, no_entry);  // kinds do not mix
    EXPECT_EQ(ix.peek_common(ns_of(2), toks{1, 2, 3}, E).id, no_entry);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, NamespacesAreIsolated) {
    radix_index ix;
    ix.insert(ns_of(1), toks{1, 2, 3}, R);
    ix.insert(ns_of(1), toks{1, 2, 3}, E);
    EXPECT_EQ(ix.peek(ns_of(2), toks{1, 2, 3}, R).id, no_entry);
    EXPECT_EQ(ix.peek(ns_of(2), toks{1, 2, 3}, E).id, no_entry);
    ix.insert(ns_of(2), toks{1, 2}, R);
    EXPECT_EQ(ix.peek(ns_of(2), toks{1, 2, 3}, R).matched_tokens, 2);
    EXPECT_EQ(ix.stats().n_namespaces, 2);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, PeekKeepsRecencyLookupRefreshesIt) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    auto a = ix.insert(ns, toks{1, 2}, E);
    auto b = ix.insert(ns, toks{3, 4}, E);
    EXPECT_EQ(ix.next_victim(E), a.id);  // oldest
    ix.peek(ns, toks{1, 2}, E);
    EXPECT_EQ(ix.next_victim(E), a.id);
    ix.lookup(ns, toks{1, 2}, E);
    EXPECT_EQ(ix.next_victim(E), b.id);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, ResidentVictimsGoCheapestFirstThenLeastRecentlyUsed) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    auto long_old = ix.insert(ns, toks{1, 2, 3, 4, 5, 6}, R);
    auto short_a = ix.insert(ns, toks{7, 8}, R);
    auto short_b = ix.insert(ns, toks{9, 9}, R);
    ix.lookup(ns, toks{7, 8}, R);  // short_a now more recent than short_b
    EXPECT_EQ(ix.next_victim(R), short_b.id);
    ASSERT_TRUE(ix.remove(short_b.id, removal_reason::evicted).is_ok());
    EXPECT_EQ(ix.next_victim(R), short_a.id);
    ASSERT_TRUE(ix.remove(short_a.id, removal_reason::evicted).is_ok());
    EXPECT_EQ(ix.next_victim(R), long_old.id);
    EXPECT_EQ(ix.stats().n_evictions, 2);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, ReferencesBlockEviction) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    auto a = ix.insert(ns, toks{1, 2}, R);
    ASSERT_TRUE(ix.acquire(a.id).is_ok());
    EXPECT_EQ(ix.next_victim(R), no_entry);  // in use: never offered
    EXPECT_EQ(ix.remove(a.id, removal_reason::evicted).code(), error_code::unavailable);
    EXPECT_EQ(ix.stats().n_refs, 1);
    EXPECT_INVARIANTS(ix);
    ASSERT_TRUE(ix.release(a.id).is_ok());
    EXPECT_EQ(ix.next_victim(R), a.id);
    EXPECT_TRUE(ix.remove(a.id, removal_reason::evicted).is_ok());
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, ReleaseUnderflowIsReportedNotApplied) {
    radix_index ix;
    auto a = ix.insert(ns_of(1), toks{1}, R);
    EXPECT_EQ(ix.release(a.id).code(), error_code::internal);
    EXPECT_EQ(ix.release(12345).code(), error_code::internal);
    EXPECT_EQ(ix.acquire(12345).code(), error_code::not_found);
    EXPECT_EQ(ix.find(a.id)->refs, 0);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, RemovalNormalizesThePath) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    // (root) ─[1 2]─ (m) ─┬─[3 4]─ (a)
    //                     └─[5]─── (b)
    auto a = ix.insert(ns, toks{1, 2, 3, 4}, R);
    auto b = ix.insert(ns, toks{1, 2, 5}, R);
    EXPECT_EQ(ix.stats().n_edges, 3);
    // Removing b leaves m with one child and no entry: m folds into a.
    // (root) ─[1 2 3 4]─ (a)
    ASSERT_TRUE(ix.remove(b.id, removal_reason::dropped).is_ok());
    radix_stats s = ix.stats();
    EXPECT_EQ(s.n_edges, 1);
    EXPECT_EQ(s.n_edge_tokens, 4);
    EXPECT_EQ(s.n_merges, 1);
    EXPECT_INVARIANTS(ix);
    EXPECT_EQ(ix.tokens_of(a.id), (toks{1, 2, 3, 4}));
    // Removing the last entry drops the namespace.
    ASSERT_TRUE(ix.remove(a.id, removal_reason::dropped).is_ok());
    EXPECT_EQ(ix.stats().n_namespaces, 0);
    EXPECT_EQ(ix.stats().n_nodes, 0);
    EXPECT_INVARIANTS(ix);
}

TEST(radix_index, AncestorsWithListsShorterEntriesOnThePath) {
    radix_index ix;
    const digest256 ns = ns_of(1);
    auto a = ix.insert(ns, toks{1, 2}, R);
    auto b = ix.insert(ns, toks{1, 2, 3}, R);
    ix.insert(ns, toks{1, 5}, R);  // a sibling branch: not an ancestor
    auto c = ix.insert(ns, toks{1, 2, 3, 4}, R);
    EXPECT_EQ(ix.ancestors_with(c.id, R), (std::vector<entry_id>{a.id, b.id}));
    EXPECT_TRUE(ix.ancestors_with(c.id, E).empty());
}

// ---------------------------------------------------------------------------------
// Randomized: 10,000 operations against a flat list of (namespace, tokens, kind).

struct flat_entry {
    uint8_t    ns;
    toks       tokens;
    entry_kind kind;
    entry_id   id;
    int32_t    refs = 0;
    uint64_t   last_used = 0;  // the reference's own logical clock
};

size_t lcp(const toks & a, const toks & b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
}

struct flat_reference {
    std::vector<flat_entry> entries;
    uint64_t                clock = 0;  // advances on every insert and every lookup that serves

    // The first victim by the documented order (docs/kv-cache.md §5): resident entries
    // fewest tokens first, then least recently used, then by id; exact-state entries
    // plain LRU, then by id. Referenced entries are never offered.
    entry_id victim(entry_kind kind) const {
        const flat_entry * best = nullptr;
        auto key = [](const flat_entry & e) {
            const int64_t cost = e.kind == R ? static_cast<int64_t>(e.tokens.size()) : 0;
            return std::tuple(cost, e.last_used, e.id);
        };
        for (const auto & e : entries) {
            if (e.kind != kind || e.refs > 0) continue;
            if (!best || key(e) < key(*best)) best = &e;
        }
        return best ? best->id : no_entry;
    }

    int64_t best(uint8_t ns, const toks & q, entry_kind kind) const {
        int64_t best = 0;
        for (const auto & e : entries) {
            if (e.ns != ns || e.kind != kind) continue;
            if (kind == R) {
                best = std::max(best, static_cast<int64_t>(lcp(e.tokens, q)));
            } else if (e.tokens.size() <= q.size() && lcp(e.tokens, q) == e.tokens.size()) {
                best = std::max(best, static_cast<int64_t>(e.tokens.size()));
            }
        }
        return best;
    }
    flat_entry * by_id(entry_id id) {
        for (auto & e : entries) {
            if (e.id == id) return &e;
        }
        return nullptr;
    }
};

TEST(radix_index, TenThousandRandomOperationsMatchAFlatReference) {
    std::mt19937 rng(20240611);
    radix_index ix;
    flat_reference ref;
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    // Small alphabet and short sequences so that paths share prefixes, split and merge.
    auto random_tokens = [&]() {
        toks t(static_cast<size_t>(1 + pick(8)));
        for (auto & x : t) x = pick(3);
        return t;
    };
    // Half of the queries extend or cut a stored sequence.
    auto random_query = [&]() {
        if (ref.entries.empty() || pick(2) == 0) return random_tokens();
        toks q = ref.entries[static_cast<size_t>(pick(static_cast<int>(ref.entries.size())))].tokens;
        q.resize(static_cast<size_t>(pick(static_cast<int>(q.size()) + 3)));
        for (auto & x : q) {
            if (pick(10) == 0) x = pick(3);
        }
        return q;
    };

    int64_t evictions = 0;
    for (int step = 0; step < 10000; ++step) {
        const int op = pick(10);
        const uint8_t ns = static_cast<uint8_t>(pick(2));
        const entry_kind kind = pick(2) == 0 ? R : E;
        if (op <= 2) {  // insert
            toks t = random_tokens();
            insert_result r = ix.insert(ns_of(ns), t, kind);
            auto it = std::find_if(ref.entries.begin(), ref.entries.end(),
                                   [&](const flat_entry & e) { return e.ns == ns && e.kind == kind && e.tokens == t; });
            ASSERT_EQ(r.inserted, it == ref.entries.end()) << "step " << step;
            if (r.inserted) ref.entries.push_back({ns, t, kind, r.id, 0, ++ref.clock});
            else ASSERT_EQ(r.id, it->id);
        } else if (op <= 5) {  // peek or lookup
            toks q = random_query();
            const bool is_lookup = pick(2) == 0;
            match_result m = is_lookup ? ix.lookup(ns_of(ns), q, kind) : ix.peek(ns_of(ns), q, kind);
            ASSERT_EQ(m.matched_tokens, ref.best(ns, q, kind)) << "step " << step;
            if (m.matched_tokens > 0) {
                flat_entry * e = ref.by_id(m.id);
                ASSERT_NE(e, nullptr);
                if (is_lookup) e->last_used = ++ref.clock;  // only a lookup marks its entry used
                ASSERT_EQ(e->ns, ns);
                ASSERT_EQ(e->kind, kind);
                ASSERT_GE(lcp(e->tokens, q), static_cast<size_t>(m.matched_tokens));
                ASSERT_EQ(m.entry_tokens, static_cast<int64_t>(e->tokens.size()));
                if (kind == E) {
                    ASSERT_EQ(e->tokens.size(), static_cast<size_t>(m.matched_tokens));
                }
            } else {
                ASSERT_EQ(m.id, no_entry);
            }
        } else if (op == 6 && !ref.entries.empty()) {  // acquire
            flat_entry & e = ref.entries[static_cast<size_t>(pick(static_cast<int>(ref.entries.size())))];
            ASSERT_TRUE(ix.acquire(e.id).is_ok());
            ++e.refs;
        } else if (op == 7 && !ref.entries.empty()) {  // release (underflow must be refused)
            flat_entry & e = ref.entries[static_cast<size_t>(pick(static_cast<int>(ref.entries.size())))];
            status st = ix.release(e.id);
            if (e.refs == 0) ASSERT_EQ(st.code(), error_code::internal);
            else { ASSERT_TRUE(st.is_ok()); --e.refs; }
        } else if (op == 8 && !ref.entries.empty()) {  // remove
            size_t i = static_cast<size_t>(pick(static_cast<int>(ref.entries.size())));
            status st = ix.remove(ref.entries[i].id, removal_reason::dropped);
            if (ref.entries[i].refs > 0) {
                ASSERT_EQ(st.code(), error_code::unavailable);
            } else {
                ASSERT_TRUE(st.is_ok());
                ref.entries.erase(ref.entries.begin() + static_cast<ptrdiff_t>(i));
            }
        } else if (op == 9) {  // evict the victim of a kind: never a referenced one
            entry_id v = ix.next_victim(kind);
            ASSERT_EQ(v, ref.victim(kind)) << "step " << step << ": eviction order differs from the reference";
            if (v != no_entry) {
                flat_entry * e = ref.by_id(v);
                ASSERT_NE(e, nullptr);
                ASSERT_EQ(e->refs, 0);
                ASSERT_TRUE(ix.remove(v, removal_reason::evicted).is_ok());
                ++evictions;
                ref.entries.erase(ref.entries.begin() + (e - ref.entries.data()));
            }
        }
        // The whole tree is walked after every step at first, then every 16th step: each
        // walk grows with the entries, and ASan made the run take over a minute.
        const bool full_check = step < 500 || step % 16 == 0 || step == 9999;
        if (full_check) EXPECT_INVARIANTS(ix);
        radix_stats s = ix.stats();
        int64_t n_r = 0, n_e = 0, refs = 0;
        for (const auto & e : ref.entries) {
            (e.kind == R ? n_r : n_e)++;
            refs += e.refs;
        }
        ASSERT_EQ(s.n_entries[0], n_r);
        ASSERT_EQ(s.n_entries[1], n_e);
        ASSERT_EQ(s.n_refs, refs);
        ASSERT_EQ(s.n_evictions, evictions);
        if (full_check) {
            for (const auto & e : ref.entries) ASSERT_EQ(ix.tokens_of(e.id), e.tokens);
        }
    }
    // The walk exercised what it is meant to.
    radix_stats s = ix.stats();
    EXPECT_GT(s.n_splits, 100);
    EXPECT_GT(s.n_merges, 100);
    EXPECT_GT(evictions, 100);
}

}  // namespace
}  // namespace skippy::cache
