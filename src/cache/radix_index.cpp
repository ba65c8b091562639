#include "cache/radix_index.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace skippy::cache {

struct radix_index::node {
    node *                                    parent = nullptr;
    std::vector<token_id>                     edge;   // tokens from parent to here; empty at a root
    int64_t                                   depth = 0;
    std::map<token_id, std::unique_ptr<node>> children;  // keyed by the child's edge[0]
    std::array<entry_id, n_entry_kinds>       entries{};  // no_entry when absent
    std::array<int64_t, n_entry_kinds>        n_subtree{};  // entries of each kind here and below

    bool has_entries() const {
        for (entry_id e : entries) {
            if (e != no_entry) return true;
        }
        return false;
    }
};

// Where a query stops: `deepest` is the last node whose whole edge matched; when the
// next edge matched partially, `partial` is that child and `partial_tokens` how many of
// its edge tokens matched (0 < partial_tokens < edge length).
struct radix_index::walk_result {
    const node * deepest = nullptr;
    const node * partial = nullptr;
    int64_t      partial_tokens = 0;
};

namespace {

size_t common_prefix(std::span<const token_id> a, std::span<const token_id> b) {
    size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

size_t kind_index(entry_kind k) { return static_cast<size_t>(k); }

}  // namespace

radix_index::radix_index() = default;
radix_index::~radix_index() = default;

radix_index::walk_result radix_index::walk(const node * root, std::span<const token_id> tokens) const {
    walk_result w;
    w.deepest = root;
    size_t i = 0;
    while (i < tokens.size()) {
        auto it = w.deepest->children.find(tokens[i]);
        if (it == w.deepest->children.end()) break;
        const node * child = it->second.get();
        size_t k = common_prefix(child->edge, tokens.subspan(i));
        if (k == child->edge.size()) {
            w.deepest = child;
            i += k;
            continue;
        }
        w.partial = child;
        w.partial_tokens = static_cast<int64_t>(k);
        break;
    }
    return w;
}

match_result radix_index::match(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const {
    auto root_it = roots_.find(ns);
    if (root_it == roots_.end() || tokens.empty()) return match_result{};
    const size_t ki = kind_index(kind);
    walk_result w = walk(root_it->second.get(), tokens);
    return kind == entry_kind::exact_state ? checkpoint_on(w, ki) : common_on(w, ki);
}

match_result radix_index::common_on(const walk_result & w, size_t ki) {
    match_result m;
    // The deepest point on the query's path whose subtree holds an entry.
    // Subtree counts only grow towards the root, so walk up from where the query stopped.
    const node * serving = nullptr;
    if (w.partial && w.partial->n_subtree[ki] > 0) {
        serving = w.partial;
        m.matched_tokens = w.deepest->depth + w.partial_tokens;
    } else {
        for (const node * n = w.deepest; n; n = n->parent) {
            if (n->n_subtree[ki] > 0) {
                serving = n;
                m.matched_tokens = n->depth;
                break;
            }
        }
    }
    if (!serving || m.matched_tokens == 0) return match_result{};
    // Any entry below serves: it starts with the matched tokens. Take the nearest one
    // (first child in token order at each step).
    while (serving->entries[ki] == no_entry) {
        const node * next = nullptr;
        for (const auto & [tok, child] : serving->children) {
            if (child->n_subtree[ki] > 0) {
                next = child.get();
                break;
            }
        }
        assert(next && "subtree count says an entry is below");
        serving = next;
    }
    m.id = serving->entries[ki];
    m.entry_tokens = serving->depth;
    return m;
}

match_result radix_index::checkpoint_on(const walk_result & w, size_t ki) {
    // Deepest whole checkpoint on the path.
    for (const node * n = w.deepest; n && n->depth > 0; n = n->parent) {
        if (n->entries[ki] != no_entry) return match_result{n->entries[ki], n->depth, n->depth};
    }
    return match_result{};
}

match_result radix_index::peek_checkpoint(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const {
    auto root_it = roots_.find(ns);
    if (root_it == roots_.end() || tokens.empty()) return match_result{};
    return checkpoint_on(walk(root_it->second.get(), tokens), kind_index(kind));
}

match_result radix_index::peek_common(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const {
    auto root_it = roots_.find(ns);
    if (root_it == roots_.end() || tokens.empty()) return match_result{};
    return common_on(walk(root_it->second.get(), tokens), kind_index(kind));
}

match_result radix_index::peek(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) const {
    return match(ns, tokens, kind);
}

match_result radix_index::lookup(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) {
    match_result m = match(ns, tokens, kind);
    if (m.id != no_entry) touch(entries_.at(m.id));
    return m;
}

void radix_index::touch(entry_rec & e) {
    const size_t ki = kind_index(e.info.kind);
    if (e.info.refs == 0) {
        evictable_[ki].erase(make_eviction_key(e.info.kind, e.info.n_tokens, e.info.last_used_tick, e.info.id));
    }
    e.info.last_used_tick = ++tick_;
    if (e.info.refs == 0) {
        evictable_[ki].insert(make_eviction_key(e.info.kind, e.info.n_tokens, e.info.last_used_tick, e.info.id));
    }
}

void radix_index::add_count(node * n, entry_kind kind, int64_t delta) {
    for (; n; n = n->parent) n->n_subtree[kind_index(kind)] += delta;
}

insert_result radix_index::insert(const digest256 & ns, std::span<const token_id> tokens, entry_kind kind) {
    assert(!tokens.empty());
    std::unique_ptr<node> & root = roots_[ns];
    if (!root) root = std::make_unique<node>();
    node * n = root.get();
    size_t i = 0;
    while (i < tokens.size()) {
        auto it = n->children.find(tokens[i]);
        if (it == n->children.end()) {
            auto leaf = std::make_unique<node>();
            leaf->parent = n;
            leaf->edge.assign(tokens.begin() + static_cast<ptrdiff_t>(i), tokens.end());
            leaf->depth = static_cast<int64_t>(tokens.size());
            ++n_nodes_;
            n_edge_tokens_ += static_cast<int64_t>(leaf->edge.size());
            node * raw = leaf.get();
            n->children.emplace(tokens[i], std::move(leaf));
            n = raw;
            i = tokens.size();
            break;
        }
        node * child = it->second.get();
        size_t k = common_prefix(child->edge, tokens.subspan(i));
        if (k < child->edge.size()) {
            // Split child's edge after k tokens:  n ─[e0..ek)─ mid ─[ek..)─ child
            auto mid = std::make_unique<node>();
            mid->parent = n;
            mid->edge.assign(child->edge.begin(), child->edge.begin() + static_cast<ptrdiff_t>(k));
            mid->depth = n->depth + static_cast<int64_t>(k);
            mid->n_subtree = child->n_subtree;
            std::unique_ptr<node> owned = std::move(it->second);
            owned->edge.erase(owned->edge.begin(), owned->edge.begin() + static_cast<ptrdiff_t>(k));
            owned->parent = mid.get();
            mid->children.emplace(owned->edge.front(), std::move(owned));
            node * raw = mid.get();
            it->second = std::move(mid);
            ++n_nodes_;
            ++n_splits_;
            child = raw;
        }
        n = child;
        i += k;
    }

    const size_t ki = kind_index(kind);
    if (n->entries[ki] != no_entry) return insert_result{n->entries[ki], false};
    entry_rec e;
    e.info.id = next_id_++;
    e.info.kind = kind;
    e.info.ns = ns;
    e.info.n_tokens = n->depth;
    e.info.last_used_tick = ++tick_;
    e.at = n;
    n->entries[ki] = e.info.id;
    add_count(n, kind, +1);
    ++n_entries_[ki];
    evictable_[ki].insert(make_eviction_key(kind, e.info.n_tokens, e.info.last_used_tick, e.info.id));
    entry_id id = e.info.id;
    entries_.emplace(id, std::move(e));
    return insert_result{id, true};
}

status radix_index::acquire(entry_id id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return make_error(error_code::not_found, "cache entry " + std::to_string(id) + " not found");
    entry_info & info = it->second.info;
    if (info.refs == 0) {
        evictable_[kind_index(info.kind)].erase(make_eviction_key(info.kind, info.n_tokens, info.last_used_tick, info.id));
    }
    ++info.refs;
    ++n_refs_;
    return status::ok();
}

status radix_index::release(entry_id id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return make_error(error_code::internal, "release of unknown cache entry " + std::to_string(id));
    entry_info & info = it->second.info;
    if (info.refs <= 0) return make_error(error_code::internal, "release of unreferenced cache entry " + std::to_string(id));
    --info.refs;
    --n_refs_;
    if (info.refs == 0) {
        evictable_[kind_index(info.kind)].insert(make_eviction_key(info.kind, info.n_tokens, info.last_used_tick, info.id));
    }
    return status::ok();
}

status radix_index::remove(entry_id id, removal_reason reason) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return make_error(error_code::not_found, "cache entry " + std::to_string(id) + " not found");
    const entry_info & info = it->second.info;
    if (info.refs > 0) return make_error(error_code::unavailable, "cache entry " + std::to_string(id) + " is in use");
    const size_t ki = kind_index(info.kind);
    evictable_[ki].erase(make_eviction_key(info.kind, info.n_tokens, info.last_used_tick, info.id));
    node * n = it->second.at;
    n->entries[ki] = no_entry;
    add_count(n, info.kind, -1);
    --n_entries_[ki];
    ++n_removals_;
    if (reason == removal_reason::evicted) ++n_evictions_;
    const digest256 ns = info.ns;
    entries_.erase(it);
    normalize(ns, n);
    return status::ok();
}

void radix_index::normalize(const digest256 & ns, node * n) {
    while (n->parent) {
        if (n->has_entries()) return;
        node * parent = n->parent;
        if (n->children.empty()) {
            // An empty leaf: drop it, then look at the parent (it may now have one child).
            n_edge_tokens_ -= static_cast<int64_t>(n->edge.size());
            --n_nodes_;
            parent->children.erase(n->edge.front());
            n = parent;
            continue;
        }
        if (n->children.size() == 1) {
            // A pass-through node: fold its edge into its only child. The parent's
            // child count does not change, so nothing above needs a look.
            std::unique_ptr<node> only = std::move(n->children.begin()->second);
            only->edge.insert(only->edge.begin(), n->edge.begin(), n->edge.end());
            only->parent = parent;
            const token_id key = n->edge.front();
            --n_nodes_;
            ++n_merges_;
            parent->children[key] = std::move(only);  // destroys n
        }
        return;
    }
    // n is the root.
    if (n->children.empty() && !n->has_entries()) roots_.erase(ns);
}

entry_id radix_index::next_victim(entry_kind kind) const {
    const auto & set = evictable_[kind_index(kind)];
    return set.empty() ? no_entry : set.begin()->id;
}

const entry_info * radix_index::find(entry_id id) const {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second.info;
}

std::vector<token_id> radix_index::tokens_of(entry_id id) const {
    const node * n = entries_.at(id).at;
    std::vector<token_id> out(static_cast<size_t>(n->depth));
    for (; n->parent; n = n->parent) {
        std::copy(n->edge.begin(), n->edge.end(), out.begin() + (n->depth - static_cast<int64_t>(n->edge.size())));
    }
    return out;
}

std::vector<entry_id> radix_index::ancestors_with(entry_id id, entry_kind kind) const {
    std::vector<entry_id> out;
    for (const node * n = entries_.at(id).at->parent; n; n = n->parent) {
        if (n->entries[kind_index(kind)] != no_entry) out.push_back(n->entries[kind_index(kind)]);
    }
    std::reverse(out.begin(), out.end());
    return out;
}

radix_stats radix_index::stats() const {
    radix_stats s;
    s.n_namespaces = static_cast<int64_t>(roots_.size());
    s.n_nodes = n_nodes_ + s.n_namespaces;
    s.n_edges = n_nodes_;
    s.n_edge_tokens = n_edge_tokens_;
    s.n_entries = n_entries_;
    s.n_refs = n_refs_;
    s.n_splits = n_splits_;
    s.n_merges = n_merges_;
    s.n_evictions = n_evictions_;
    s.n_removals = n_removals_;
    return s;
}

status radix_index::check_node(const node * n, const node * parent, int64_t & n_nodes, int64_t & n_edge_tokens,
                               std::array<int64_t, n_entry_kinds> & n_entries) const {
    auto broken = [&](const std::string & what) {
        return make_error(error_code::internal, "radix invariant: " + what + " at depth " + std::to_string(n->depth));
    };
    if (n->parent != parent) return broken("parent pointer");
    if (parent) {
        if (n->edge.empty()) return broken("empty edge");
        if (n->depth != parent->depth + static_cast<int64_t>(n->edge.size())) return broken("depth");
        auto it = parent->children.find(n->edge.front());
        if (it == parent->children.end() || it->second.get() != n) return broken("child key");
        if (!n->has_entries() && n->children.size() < 2) return broken("not normalized");
        ++n_nodes;
        n_edge_tokens += static_cast<int64_t>(n->edge.size());
    } else if (n->depth != 0 || !n->edge.empty()) {
        return broken("root shape");
    }
    std::array<int64_t, n_entry_kinds> below{};
    for (const auto & [tok, child] : n->children) {
        if (child->edge.empty() || child->edge.front() != tok) return broken("child keyed by a wrong token");
        SKIPPY_TRY(check_node(child.get(), n, n_nodes, n_edge_tokens, n_entries));
        for (size_t k = 0; k < n_entry_kinds; ++k) below[k] += child->n_subtree[k];
    }
    for (size_t k = 0; k < n_entry_kinds; ++k) {
        entry_id id = n->entries[k];
        if (id != no_entry) {
            if (!parent) return broken("entry at a root");
            auto it = entries_.find(id);
            if (it == entries_.end() || it->second.at != n) return broken("entry not registered here");
            const entry_info & info = it->second.info;
            if (kind_index(info.kind) != k || info.n_tokens != n->depth) return broken("entry kind or length");
            if (info.refs < 0) return broken("negative refs");
            const bool listed = evictable_[k].count(make_eviction_key(info.kind, info.n_tokens, info.last_used_tick, id)) > 0;
            if (listed != (info.refs == 0)) return broken("eviction set membership");
            ++below[k];
            ++n_entries[k];
        }
        if (below[k] != n->n_subtree[k]) return broken("subtree count");
    }
    return status::ok();
}

status radix_index::check_invariants() const {
    int64_t n_nodes = 0, n_edge_tokens = 0;
    std::array<int64_t, n_entry_kinds> n_entries{};
    for (const auto & [ns, root] : roots_) {
        if (root->children.empty() && !root->has_entries()) {
            return make_error(error_code::internal, "radix invariant: empty namespace kept");
        }
        SKIPPY_TRY(check_node(root.get(), nullptr, n_nodes, n_edge_tokens, n_entries));
    }
    if (n_nodes != n_nodes_ || n_edge_tokens != n_edge_tokens_) {
        return make_error(error_code::internal, "radix invariant: node or edge token count");
    }
    int64_t n_refs = 0;
    std::array<int64_t, n_entry_kinds> n_unreferenced{};
    for (const auto & [id, e] : entries_) {
        n_refs += e.info.refs;
        if (e.info.refs == 0) ++n_unreferenced[kind_index(e.info.kind)];
    }
    for (size_t k = 0; k < n_entry_kinds; ++k) {
        if (n_entries[k] != n_entries_[k]) return make_error(error_code::internal, "radix invariant: entry count");
        if (static_cast<int64_t>(evictable_[k].size()) != n_unreferenced[k]) {
            return make_error(error_code::internal, "radix invariant: eviction set size");
        }
    }
    if (n_refs != n_refs_) return make_error(error_code::internal, "radix invariant: reference count");
    int64_t n_all = 0;
    for (int64_t n : n_entries_) n_all += n;
    if (static_cast<int64_t>(entries_.size()) != n_all) {
        return make_error(error_code::internal, "radix invariant: entries outside the tree");
    }
    return status::ok();
}

}  // namespace skippy::cache
