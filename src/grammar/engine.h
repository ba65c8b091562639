// The matcher's machinery (internal to src/grammar): parse stacks, grammar states, and
// the memo that turns the grammar into a lazily built byte automaton.
//
// A parse stack is a chain of interned nodes (position, parent): the top node's position
// is a terminal, the nodes below are where to continue when a rule finishes. Interning
// makes equal stacks the same node id, so a state — a set of stacks, whether the match
// may end, and a partial UTF-8 character — is a sorted list of ids, itself interned.
// The transition of a state on a byte is memoised, so after the first visit a byte
// costs one table probe; the trie walk for a mask is a walk of that automaton.
//
// Stack chains stay flat under right recursion (x* is `r ::= x r | ε`): a rule
// referenced last in an alternative does not push a return node (a tail call).
//
// Memory: everything memoised is a cache. When it passes the budget the engine keeps
// only the states still in use (compact) and rebuilds the rest on demand.
#pragma once

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_data.h"
#include "grammar/hash_table.h"
#include "grammar/trie_data.h"

#include <array>
#include <cstdint>
#include <deque>
#include <vector>

namespace skippy::grammar::detail {

constexpr uint32_t dead_state = 0;

class engine {
public:
    engine(const grammar_data & g, const matcher_limits & limits);

    // The start state of the grammar (or dead_state when failed()). After a failure
    // that made no start state, clear_error() tries again.
    uint32_t start() const { return start_; }

    // The state after `byte` (dead_state when the byte cannot come next).
    // REQUIRES !failed(). On a limit exceeded, returns dead_state and sets failed().
    uint32_t step(uint32_t state, uint8_t byte) {
        state_rec & r = states_[state];
        // Most bytes no stack can take: dead at once, with nothing memoised.
        if (((r.first_bytes[byte >> 6] >> (byte & 63)) & 1) == 0) return dead_state;
        if (r.row >= 0) {
            const size_t cell = size_t(r.row) * 256 + byte;
            if (rows_[cell] == unknown_state) {
                const uint32_t next = lookup_step(state, byte);
                // A limit, not the grammar, stopped that step: remembering its
                // dead_state would refuse the byte after matcher::reset() too.
                if (failed()) return dead_state;
                rows_[cell] = next;
            }
            return rows_[cell];
        }
        if (++r.n_steps == row_after_steps && n_rows_ < max_rows) {
            r.row = int32_t(n_rows_++);
            rows_.resize(n_rows_ * 256, unknown_state);
        }
        return lookup_step(state, byte);
    }

    bool   failed() const { return !error_.is_ok(); }
    status error() const { return error_; }
    void   clear_error() {
        error_ = status::ok();
        if (start_ == dead_state) make_start();
    }

    // Starts a public call: resets the work counter, compacts when over budget keeping
    // `*keep` (updated in place).
    void begin_call(uint32_t * keep, size_t n_keep);

    bool may_end(uint32_t s) const { return states_[s].accepting && states_[s].need == 0; }
    bool has_stacks(uint32_t s) const { return states_[s].n_stacks != 0; }

    // Fills `mask` with the tokens allowed after state `s`. REQUIRES !failed(). The walk
    // may compact the memo: `s` is rewritten to the same state's new id.
    status allowed_tokens(uint32_t & s, const trie_data & vocab, token_mask & mask);

    size_t memo_bytes() const;
    matcher_stats stats() const {
        matcher_stats s = stats_;
        s.n_states = states_.size();
        s.n_transitions = transitions_.size();
        return s;
    }

private:
    struct node {
        uint32_t pos;
        uint32_t parent;
    };
    struct state_rec {
        uint32_t stacks_begin = 0;  // into stack_pool_
        uint32_t n_stacks = 0;
        uint32_t partial_cp = 0;    // the bits of the pending character so far
        uint8_t  need = 0;          // continuation bytes it still needs
        uint8_t  partial_len = 0;   // its encoded length
        bool     accepting = false; // a stack is empty: the match may end here
        int32_t  loops = -1;        // into loop_sets_: characters that lead back here
        int32_t  row = -1;          // into rows_, once the state is hot
        uint32_t n_steps = 0;       // steps asked of it (until it gets a row)
        uint8_t  non_ascii = 0;     // 0 unknown, 1 uniform (see canonical_partial), 2 not
        uint64_t hash = 0;
        // The bytes that may lead to a live state (a superset); clear for the dead state.
        // With no partial character: the ASCII bytes some stack's class holds, and every
        // byte from 0x80 when some class holds a non-ASCII character.
        uint64_t first_bytes[4] = {0, 0, 0, 0};
    };
    struct exported_state {
        std::vector<std::vector<uint32_t>> stacks;  // positions, top first
        uint32_t partial_cp;
        uint8_t  need, partial_len;
        bool     accepting;
    };

    const grammar_data & g_;
    matcher_limits       limits_;
    status               error_;
    uint64_t             work_ = 0;
    uint32_t             start_ = dead_state;
    matcher_stats        stats_;

    std::vector<node>      nodes_;        // nodes_[0]: the bottom of every stack
    u64_map                node_ids_;
    std::vector<state_rec> states_;       // states_[0]: dead
    std::vector<uint32_t>  stack_pool_;
    u64_map                state_ids_;    // hash → id (several ids may share a hash)
    u64_map                transitions_;  // (state, byte) → state
    // Hot states (the inside of a string, visited at most trie nodes) get a dense row of
    // their 256 transitions: one load instead of a hash probe.
    static constexpr uint32_t unknown_state = ~uint32_t{0};
    static constexpr uint32_t row_after_steps = 64;
    static constexpr size_t   max_rows = 1024;
    std::vector<uint32_t>  rows_;
    size_t                 n_rows_ = 0;

    uint32_t lookup_step(uint32_t state, uint8_t byte) {
        size_t slot = transitions_.find(transition_key(state, byte));
        if (slot != u64_map::npos) return transitions_.value(slot);
        return compute_step(state, byte);
    }
    struct loop_set {
        uint64_t ascii[2] = {0, 0};  // ASCII bytes that lead back to the state
        bool     non_ascii = false;  // every non-ASCII character does too
    };
    std::vector<loop_set> loop_sets_;

    // Whole masks for recent states of one vocabulary, oldest first.
    struct cached_mask {
        uint32_t              state;
        std::vector<uint64_t> words;
    };
    uint64_t                mask_vocab_serial_ = 0;
    std::deque<cached_mask> masks_;
    size_t                  mask_bytes_ = 0;  // the words held in masks_

    // Scratch of one step.
    std::vector<uint32_t>                   scratch_stacks_;
    std::vector<std::pair<uint32_t, uint32_t>> worklist_;
    u64_set                                 visited_;

    struct walk_frame {
        uint32_t next_child, end, state;
    };
    std::vector<walk_frame> walk_;

    static uint64_t transition_key(uint32_t state, uint8_t byte) { return (uint64_t(state) << 8) | byte; }

    void     make_start();
    uint32_t compute_step(uint32_t state, uint8_t byte);
    uint32_t apply_code_point(uint32_t state, uint32_t cp);
    uint32_t partial_state(uint32_t state, uint32_t cp, uint8_t need, uint8_t len);
    // A state whose stacks each take every non-ASCII character or none (and some take
    // them): which character a partial one becomes does not matter, so its partial
    // states keep only the UTF-8 decoder's state (partial_cp = canonical_partial | it),
    // a handful instead of one per prefix. The inside of a JSON string is such a state.
    static constexpr uint32_t canonical_partial = 0x80000000u;
    bool     takes_all_non_ascii(uint32_t state);
    // Expands worklist_ into terminal-topped stacks (scratch_stacks_) and `accepting`.
    bool     settle(bool & accepting);
    uint32_t intern_node(uint32_t pos, uint32_t parent);
    uint32_t intern_state(const std::vector<uint32_t> & sorted_stacks, bool accepting, uint32_t partial_cp,
                          uint8_t need, uint8_t partial_len);
    const loop_set & loops(uint32_t s);
    void     fail(std::string message);

    void           clear_memo();
    exported_state export_state(uint32_t s) const;
    uint32_t       import_state(const exported_state & e);
    // Drops every memoised thing but the states in keep[0, n_keep) (ids rewritten).
    void           compact(uint32_t * keep, size_t n_keep);
    bool           over_budget() const { return memo_bytes() > limits_.memo_budget_bytes; }
    // compact() in the middle of a walk: keeps `s`, the start and every frame's state.
    void           compact_walk(uint32_t & s);
};

}  // namespace skippy::grammar::detail
