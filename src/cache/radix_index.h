// Radix index of cached prefixes (DESIGN §6 "Index"; docs/kv-cache.md "Radix index").
//
// One compressed token tree per namespace: every edge holds a run of tokens, a node
// sits where sequences diverge or where an entry ends. A node may hold one resident
// entry and one exact-state entry. The index manages ids, references and recency; the
// tiers own what an entry stands for (KV blocks, pages).
//
//   insert [1 2 3 4 5] (R), [1 2 3 9] (R), [1 2] (E):
//
//        (root)
//          │ 1 2
//        (n1: E)
//          │ 3
//        (n2)
//       ┌──┴──┐
//   4 5 │     │ 9
//   (n3: R) (n4: R)
//
// Matching:
// - resident: longest common prefix with any stored sequence — KV is sliceable, so an
//   entry serves every prefix of itself. Query [1 2 3 4 7] is served 4 tokens by n3;
//   [1 2 3 8] is served 3 tokens by n3 or n4 (a diverging sibling).
// - exact state: only a whole stored checkpoint on the query's path: [1 2 3 8] is
//   served 2 tokens by n1; [1] is a miss.
// - disk: as resident (the disk tier aligns the match to its pages and also asks for
//   the deepest checkpoint, peek_checkpoint).
//
// Invariants (check_invariants, after every operation in the tests):
// - every non-root edge is non-empty, its first token keys it in the parent;
// - depth(node) = depth(parent) + edge length; an entry at a node holds depth tokens;
// - normalized: a non-root node without entries has at least two children, and an
//   empty namespace has no root;
// - per node and kind, the subtree entry count is exact;
// - an entry is in its kind's eviction set exactly when it has no references.
//
// Not thread-safe: the caller serializes (stage_cache holds one mutex).
#pragma once

#include "base/status.h"
#include "cache/digest.h"
#include "cache/entry.h"
#include "cache/eviction_policy.h"
#include "cache/identity.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

struct match_result {
    entry_id id = no_entry;       // the entry serving the match (no_entry: miss)
    int64_t  matched_tokens = 0;  // query tokens it serves
    int64_t  entry_tokens = 0;    // tokens the entry holds (>= matched_tokens)
};

struct insert_result {
    entry_id id = no_entry;
    bool     inserted = false;  // false: an entry of that kind already ends there (id is it)
};

enum class removal_reason : uint8_t {
    evicted,      // made room (admission, limits, entry cap)
    quarantined,  // failed validation on restore
    covered,      // a longer resident entry on the same path serves everything it did
    dropped,      // the owner let it go (shutdown, failed record)
};

struct entry_info {
    entry_id   id = no_entry;
    entry_kind kind = entry_kind::resident;
    digest256  ns;
    int64_t    n_tokens = 0;
    int32_t    refs = 0;
    uint64_t   last_used_tick = 0;
};

struct radix_stats {
    int64_t n_namespaces = 0;
    int64_t n_nodes = 0;        // including one root per namespace
    int64_t n_edges = 0;        // non-root nodes: one incoming edge each
    int64_t n_edge_tokens = 0;  // tokens stored on edges
    std::array<int64_t, n_entry_kinds> n_entries{};
    int64_t n_refs = 0;         // references held right now
    // Cumulative:
    int64_t n_splits = 0;       // edges split by an insert
    int64_t n_merges = 0;       // nodes merged away by normalization
    int64_t n_evictions = 0;    // removals with reason evicted
    int64_t n_removals = 0;     // every removal
};

class radix_index {
public:
    radix_index();
    ~radix_index();
    radix_index(const radix_index &) = delete;
    radix_index & operator=(const radix_index &) = delete;

    // Adds an entry of `kind` holding exactly `tokens` in namespace ns, or returns the
    // one already there. A new entry starts unreferenced and most recently used.
    // REQUIRES: !tokens.empty().
    insert_result insert(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind);

    // The best entry of `kind` for the query (see matching above). peek changes
    // nothing; lookup also marks the serving entry most recently used.
    match_result peek(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const;
    match_result lookup(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind);
    // The deepest entry of `kind` that the query contains whole (exact-state matching,
    // for any kind). Changes nothing.
    match_result peek_checkpoint(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const;
    // An entry of `kind` sharing the longest common prefix with the query (resident
    // matching, for any kind): matched_tokens is that prefix. Changes nothing.
    match_result peek_common(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const;

    // References: an entry with refs > 0 is never removed nor offered for eviction.
    // acquire: not_found for an unknown id. release: internal when refs is already 0
    // (an underflow is reported, never applied).
    status acquire(entry_id id);
    status release(entry_id id);

    // Removes an unreferenced entry and normalizes its path. not_found for an unknown
    // id; unavailable while referenced.
    status remove(entry_id id, removal_reason reason);

    // The unreferenced entry of `kind` to evict first, or no_entry.
    entry_id next_victim(entry_kind kind) const;

    // nullptr for an unknown id. Valid until the next mutation.
    const entry_info * find(entry_id id) const;
    // The tokens an entry holds. REQUIRES: find(id) != nullptr.
    std::vector<token_id> tokens_of(entry_id id) const;
    // Entries of `kind` at strict ancestors of id's node (shallowest first).
    // REQUIRES: find(id) != nullptr.
    std::vector<entry_id> ancestors_with(entry_id id, entry_kind kind) const;

    int64_t n_entries(entry_kind kind) const { return n_entries_[static_cast<size_t>(kind)]; }
    radix_stats stats() const;

    // ok, or internal naming the first broken invariant. O(size): for tests.
    status check_invariants() const;

private:
    struct node;
    struct entry_rec {
        entry_info info;
        node *     at = nullptr;
    };
    struct walk_result;

    walk_result walk(const node * root, std::span<const token_id> tokens) const;
    match_result match(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const;
    static match_result checkpoint_on(const walk_result & w, size_t kind_index);
    static match_result common_on(const walk_result & w, size_t kind_index);
    void touch(entry_rec & e);
    void add_count(node * n, entry_kind kind, int64_t delta);
    void normalize(const digest256 & ns, node * n);
    status check_node(const node * n, const node * parent, int64_t & n_nodes, int64_t & n_edge_tokens,
                      std::array<int64_t, n_entry_kinds> & n_entries) const;

    std::map<digest256, std::unique_ptr<node>>       roots_;
    std::unordered_map<entry_id, entry_rec>          entries_;
    std::array<std::set<eviction_key>, n_entry_kinds> evictable_;
    std::array<int64_t, n_entry_kinds>               n_entries_{};
    entry_id                                         next_id_ = 1;
    uint64_t                                         tick_ = 0;
    int64_t                                          n_nodes_ = 0;  // non-root
    int64_t                                          n_edge_tokens_ = 0;
    int64_t                                          n_refs_ = 0;
    int64_t                                          n_splits_ = 0;
    int64_t                                          n_merges_ = 0;
    int64_t                                          n_evictions_ = 0;
    int64_t                                          n_removals_ = 0;
};

}  // namespace skippy::cache
