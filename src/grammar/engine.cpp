#include "grammar/engine.h"
#include "grammar/utf8.h"

#include <algorithm>

namespace skippy::grammar::detail {

engine::engine(const grammar_data & g, const matcher_limits & limits) : g_(g), limits_(limits) {
    clear_memo();
    make_start();
}

void engine::make_start() {
    // Every alternative of root, with nothing below.
    work_ = 0;
    worklist_.clear();
    for (uint32_t a = g_.rule_alt_begin[g_.root]; a < g_.rule_alt_begin[g_.root + 1]; ++a) {
        worklist_.emplace_back(g_.alt_starts[a], 0);
    }
    bool accepting = false;
    if (settle(accepting)) start_ = intern_state(scratch_stacks_, accepting, 0, 0, 0);
}

void engine::fail(std::string message) {
    if (error_.is_ok()) error_ = make_error(error_code::invalid_argument, "grammar: " + std::move(message));
}

void engine::clear_memo() {
    nodes_.assign(1, node{UINT32_MAX, 0});
    node_ids_.clear();
    states_.assign(1, state_rec{});
    stack_pool_.clear();
    state_ids_.clear();
    transitions_.clear();
    loop_sets_.clear();
    masks_.clear();
    mask_bytes_ = 0;
    rows_.clear();
    n_rows_ = 0;
}

size_t engine::memo_bytes() const {
    size_t n = nodes_.size() * sizeof(node) + node_ids_.bytes() + states_.size() * sizeof(state_rec) +
               stack_pool_.size() * sizeof(uint32_t) + state_ids_.bytes() + transitions_.bytes() +
               loop_sets_.size() * sizeof(loop_sets_[0]) + mask_bytes_ + rows_.size() * sizeof(uint32_t);
    return n;
}

uint32_t engine::intern_node(uint32_t pos, uint32_t parent) {
    uint64_t key = (uint64_t(pos) << 32) | parent;
    size_t   slot = node_ids_.find(key);
    if (slot != u64_map::npos) return node_ids_.value(slot);
    auto id = uint32_t(nodes_.size());
    nodes_.push_back({pos, parent});
    node_ids_.insert(key, id);
    return id;
}

uint32_t engine::intern_state(const std::vector<uint32_t> & stacks, bool accepting, uint32_t partial_cp,
                              uint8_t need, uint8_t partial_len) {
    uint64_t h = mix64((uint64_t(partial_cp) << 16) | (uint64_t(need) << 8) | (uint64_t(partial_len) << 1) |
                       uint64_t(accepting));
    for (uint32_t id : stacks) h = mix64(h ^ id) + 0x9e3779b97f4a7c15ULL;
    if (h == u64_map::empty_key) h = 0;
    for (size_t slot = state_ids_.find(h); slot != u64_map::npos; slot = state_ids_.find_next(h, slot)) {
        const state_rec & r = states_[state_ids_.value(slot)];
        if (r.accepting == accepting && r.partial_cp == partial_cp && r.need == need && r.partial_len == partial_len &&
            r.n_stacks == stacks.size() &&
            std::equal(stacks.begin(), stacks.end(), stack_pool_.begin() + long(r.stacks_begin))) {
            return state_ids_.value(slot);
        }
    }
    state_rec r;
    r.stacks_begin = uint32_t(stack_pool_.size());
    r.n_stacks = uint32_t(stacks.size());
    r.partial_cp = partial_cp;
    r.need = need;
    r.partial_len = partial_len;
    r.accepting = accepting;
    r.hash = h;
    if (need > 0) {
        std::fill(std::begin(r.first_bytes), std::end(r.first_bytes), ~uint64_t{0});
    } else {
        bool non_ascii = false;
        for (uint32_t id : stacks) {
            const char_class & c = g_.classes[g_.symbols[nodes_[id].pos].index];
            r.first_bytes[0] |= c.ascii[0];
            r.first_bytes[1] |= c.ascii[1];
            non_ascii = non_ascii || c.intersects(0x80, max_code_point);
        }
        if (non_ascii) r.first_bytes[2] = r.first_bytes[3] = ~uint64_t{0};
    }
    stack_pool_.insert(stack_pool_.end(), stacks.begin(), stacks.end());
    auto id = uint32_t(states_.size());
    states_.push_back(r);
    state_ids_.insert(h, id);
    return id;
}

bool engine::settle(bool & accepting) {
    scratch_stacks_.clear();
    visited_.clear();
    while (!worklist_.empty()) {
        auto [q, parent] = worklist_.back();
        worklist_.pop_back();
        if (!visited_.insert((uint64_t(q) << 32) | parent)) continue;
        if (++work_ > limits_.max_work_per_call) {
            fail("more than " + std::to_string(limits_.max_work_per_call) +
                 " expansion steps in one call (the grammar is too ambiguous)");
            worklist_.clear();
            return false;
        }
        const symbol & sym = g_.symbols[q];
        switch (sym.kind) {
            case symbol_kind::end:
                if (parent == 0) accepting = true;
                else worklist_.emplace_back(nodes_[parent].pos, nodes_[parent].parent);
                break;
            case symbol_kind::chars:
                scratch_stacks_.push_back(intern_node(q, parent));
                break;
            case symbol_kind::rule: {
                uint32_t ret = q + 1;
                // A reference last in its alternative returns straight to the parent.
                uint32_t below = g_.symbols[ret].kind == symbol_kind::end ? parent : intern_node(ret, parent);
                for (uint32_t a = g_.rule_alt_begin[sym.index]; a < g_.rule_alt_begin[sym.index + 1]; ++a) {
                    worklist_.emplace_back(g_.alt_starts[a], below);
                }
                break;
            }
        }
    }
    std::sort(scratch_stacks_.begin(), scratch_stacks_.end());
    scratch_stacks_.erase(std::unique(scratch_stacks_.begin(), scratch_stacks_.end()), scratch_stacks_.end());
    if (scratch_stacks_.size() > limits_.max_stacks) {
        fail("more than " + std::to_string(limits_.max_stacks) + " parse stacks at once (the grammar is too ambiguous)");
        return false;
    }
    return true;
}

uint32_t engine::apply_code_point(uint32_t state, uint32_t cp) {
    worklist_.clear();
    const state_rec & r = states_[state];
    for (uint32_t i = 0; i < r.n_stacks; ++i) {
        const node & n = nodes_[stack_pool_[r.stacks_begin + i]];
        const symbol & sym = g_.symbols[n.pos];
        if (g_.classes[sym.index].contains(cp)) worklist_.emplace_back(n.pos + 1, n.parent);
    }
    bool accepting = false;
    if (!settle(accepting)) return dead_state;
    if (scratch_stacks_.empty() && !accepting) return dead_state;
    return intern_state(scratch_stacks_, accepting, 0, 0, 0);
}

uint32_t engine::partial_state(uint32_t state, uint32_t cp, uint8_t need, uint8_t len) {
    // The code points this character may still become.
    const uint32_t shift = 6u * need;
    uint32_t lo = cp << shift;
    uint32_t hi = lo | ((1u << shift) - 1);
    const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    lo = std::max(lo, min);
    hi = std::min(hi, max_code_point);
    if (lo > hi) return dead_state;
    const state_rec & r = states_[state];
    bool viable = false;
    for (uint32_t i = 0; i < r.n_stacks && !viable; ++i) {
        const node & n = nodes_[stack_pool_[r.stacks_begin + i]];
        viable = g_.classes[g_.symbols[n.pos].index].intersects(lo, hi);
    }
    if (!viable) return dead_state;
    scratch_stacks_.assign(stack_pool_.begin() + long(r.stacks_begin),
                           stack_pool_.begin() + long(r.stacks_begin + r.n_stacks));
    return intern_state(scratch_stacks_, false, cp, need, len);
}

bool engine::takes_all_non_ascii(uint32_t state) {
    state_rec & r = states_[state];
    if (r.non_ascii == 0) {
        bool uniform = r.need == 0, some = false;
        for (uint32_t i = 0; i < r.n_stacks && uniform; ++i) {
            const char_class & c = g_.classes[g_.symbols[nodes_[stack_pool_[r.stacks_begin + i]].pos].index];
            bool all = c.covers(0x80, 0xD7FF) && c.covers(0xE000, max_code_point);
            some = some || all;
            uniform = all || !c.intersects(0x80, max_code_point);
        }
        r.non_ascii = uniform && some ? 1 : 2;
    }
    return r.non_ascii == 1;
}

uint32_t engine::compute_step(uint32_t state, uint8_t byte) {
    if (state == dead_state || failed()) return dead_state;
    ++stats_.n_steps_computed;
    const state_rec r = states_[state];
    uint32_t next = dead_state;
    if (r.need > 0 && (r.partial_cp & canonical_partial)) {
        // Only well-formedness matters; a completed character acts as U+0080 would.
        uint8_t d = utf8::utf8_next(uint8_t(r.partial_cp & 0xFF), byte);
        if (d == utf8::at_boundary) {
            next = apply_code_point(state, 0x80);
        } else if (d != utf8::utf8_error) {
            scratch_stacks_.assign(stack_pool_.begin() + long(r.stacks_begin),
                                   stack_pool_.begin() + long(r.stacks_begin + r.n_stacks));
            next = intern_state(scratch_stacks_, false, canonical_partial | d, utf8::utf8_needed(d), 0);
        }
    } else if (r.need == 0 && byte >= 0x80 && takes_all_non_ascii(state)) {
        uint8_t d = utf8::utf8_next(utf8::at_boundary, byte);
        if (d != utf8::utf8_error) {
            scratch_stacks_.assign(stack_pool_.begin() + long(r.stacks_begin),
                                   stack_pool_.begin() + long(r.stacks_begin + r.n_stacks));
            next = intern_state(scratch_stacks_, false, canonical_partial | d, utf8::utf8_needed(d), 0);
        }
    } else if (r.need == 0) {
        if (byte < 0x80) next = apply_code_point(state, byte);
        else if ((byte & 0xE0) == 0xC0) next = partial_state(state, byte & 0x1Fu, 1, 2);
        else if ((byte & 0xF0) == 0xE0) next = partial_state(state, byte & 0x0Fu, 2, 3);
        else if ((byte & 0xF8) == 0xF0) next = partial_state(state, byte & 0x07u, 3, 4);
    } else if ((byte & 0xC0) == 0x80) {
        uint32_t cp = (r.partial_cp << 6) | (byte & 0x3Fu);
        auto     need = uint8_t(r.need - 1);
        if (need > 0) {
            next = partial_state(state, cp, need, r.partial_len);
        } else {
            const uint32_t min = r.partial_len == 2 ? 0x80 : r.partial_len == 3 ? 0x800 : 0x10000;
            if (cp >= min && cp <= max_code_point && (cp < 0xD800 || cp > 0xDFFF)) next = apply_code_point(state, cp);
        }
    }
    if (failed()) return dead_state;
    transitions_.insert(transition_key(state, byte), next);
    return next;
}

const engine::loop_set & engine::loops(uint32_t s) {
    if (states_[s].loops < 0) {
        loop_set l;
        for (uint32_t b = 0; b < 128 && !failed(); ++b) {
            if (step(s, uint8_t(b)) == s) l.ascii[b >> 6] |= uint64_t{1} << (b & 63);
        }
        // Every non-ASCII character leads back here when the state takes them all
        // alike and one of them, U+0080, does.
        if (!failed() && takes_all_non_ascii(s)) {
            uint32_t t = step(s, 0xC2);
            l.non_ascii = t != dead_state && !failed() && step(t, 0x80) == s;
        }
        states_[s].loops = int32_t(loop_sets_.size());
        loop_sets_.push_back(l);
    }
    return loop_sets_[size_t(states_[s].loops)];
}

engine::exported_state engine::export_state(uint32_t s) const {
    const state_rec & r = states_[s];
    exported_state e{{}, r.partial_cp, r.need, r.partial_len, r.accepting};
    for (uint32_t i = 0; i < r.n_stacks; ++i) {
        std::vector<uint32_t> chain;
        for (uint32_t n = stack_pool_[r.stacks_begin + i]; n != 0; n = nodes_[n].parent) chain.push_back(nodes_[n].pos);
        e.stacks.push_back(std::move(chain));
    }
    return e;
}

uint32_t engine::import_state(const exported_state & e) {
    if (e.stacks.empty() && !e.accepting) return dead_state;
    std::vector<uint32_t> stacks;
    for (const auto & chain : e.stacks) {
        uint32_t parent = 0;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) parent = intern_node(*it, parent);
        stacks.push_back(parent);
    }
    std::sort(stacks.begin(), stacks.end());
    return intern_state(stacks, e.accepting, e.partial_cp, e.need, e.partial_len);
}

void engine::compact(uint32_t * keep, size_t n_keep) {
    std::vector<exported_state> saved;
    saved.reserve(n_keep + 1);
    saved.push_back(export_state(start_));
    for (size_t i = 0; i < n_keep; ++i) saved.push_back(export_state(keep[i]));
    clear_memo();
    ++stats_.n_compactions;
    start_ = import_state(saved[0]);
    for (size_t i = 0; i < n_keep; ++i) keep[i] = import_state(saved[i + 1]);
    if (over_budget()) fail("a grammar state is larger than the memo budget of " +
                            std::to_string(limits_.memo_budget_bytes) + " bytes");
}

void engine::begin_call(uint32_t * keep, size_t n_keep) {
    work_ = 0;
    if (!failed() && over_budget()) compact(keep, n_keep);
}

void engine::compact_walk(uint32_t & s) {
    std::vector<uint32_t> keep;
    keep.reserve(walk_.size() + 1);
    keep.push_back(s);
    for (const auto & f : walk_) keep.push_back(f.state);
    compact(keep.data(), keep.size());
    s = keep[0];
    for (size_t i = 0; i < walk_.size(); ++i) walk_[i].state = keep[i + 1];
}

status engine::allowed_tokens(uint32_t & s, const trie_data & vocab, token_mask & mask) {
    mask.reset(int32_t(vocab.pieces.size()));
    if (vocab.serial != mask_vocab_serial_) {
        masks_.clear();
        mask_bytes_ = 0;
        mask_vocab_serial_ = vocab.serial;
    }
    for (const auto & m : masks_) {
        if (m.state == s) {
            ++stats_.n_mask_cache_hits;
            mask.words() = m.words;
            return status::ok();
        }
    }
    if (may_end(s)) {
        for (token_id id : vocab.end_of_generation) mask.set(id);
    }
    auto mark = [&](uint32_t begin, uint32_t end) {
        for (uint32_t i = begin; i < end; ++i) mask.set(vocab.order[i]);
    };
    walk_.clear();
    walk_.push_back({1, vocab.nodes[0].sub_end, s});
    uint32_t n_iterations = 0;
    while (!walk_.empty()) {
        // The memo grows by a bounded amount per step, so checking now and then is enough.
        if ((++n_iterations & 255) == 0 && over_budget()) {
            compact_walk(s);
            if (failed()) return error_;
        }
        walk_frame & f = walk_.back();
        if (f.next_child >= f.end) {
            walk_.pop_back();
            continue;
        }
        const uint32_t    v = f.next_child;
        const trie_node & nd = vocab.nodes[v];
        f.next_child = nd.sub_end;
        ++stats_.n_nodes_walked;
        const uint32_t t = step(f.state, nd.byte);
        if (failed()) return error_;
        if (t == dead_state) continue;
        mark(nd.tok_begin, nd.tok_here_end);
        if (nd.sub_end == v + 1) continue;
        // Every character below leads back to this same live state (a string's
        // characters, digits...): the whole subtree is allowed without walking it.
        if (nd.bulk >= 0 && states_[t].need == 0) {
            const loop_set & l = loops(t);
            if (failed()) return error_;
            const bulk_set & below = vocab.bulk_sets[size_t(nd.bulk)];
            if ((below.ascii[0] & ~l.ascii[0]) == 0 && (below.ascii[1] & ~l.ascii[1]) == 0 &&
                (!below.non_ascii || l.non_ascii)) {
                mark(nd.tok_here_end, nd.tok_end);
                ++stats_.n_bulk_subtrees;
                continue;
            }
        }
        walk_.push_back({v + 1, nd.sub_end, t});
    }
    if (limits_.max_cached_masks > 0) {
        if (masks_.size() >= limits_.max_cached_masks) {
            mask_bytes_ -= masks_.front().words.size() * sizeof(uint64_t);
            masks_.pop_front();
        }
        masks_.push_back({s, mask.words()});
        mask_bytes_ += mask.words().size() * sizeof(uint64_t);
    }
    return status::ok();
}

}  // namespace skippy::grammar::detail
