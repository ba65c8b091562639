// The compiled form of a grammar (internal to src/grammar).
//
// Every alternative of every rule is laid end to end in `symbols`, each closed by an
// `end` symbol; a grammar position is an index into that array. A parse stack is a
// chain of positions: the top one is a terminal (the next character to match), the
// ones below are where to continue once the rule above finishes.
//
//   root ::= "a" x | "b"        symbols: [a][x][end] [b][end] [c][end]
//   x    ::= "c"                 positions 0..7; rule root's alternatives start at 0, 3
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace skippy::grammar::detail {

constexpr uint32_t max_code_point = 0x10FFFF;

enum class symbol_kind : uint8_t { end, chars, rule };

struct symbol {
    symbol_kind kind = symbol_kind::end;
    uint32_t    index = 0;  // chars: index into classes; rule: rule id; end: unused
};

// A set of code points: sorted, disjoint, non-adjacent inclusive ranges, never holding
// a surrogate (U+D800..U+DFFF: UTF-8 cannot carry them). ascii[] mirrors the first 128.
struct char_class {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    uint64_t ascii[2] = {0, 0};

    bool contains(uint32_t cp) const;
    // Some code point in [lo, hi] is in the set.
    bool intersects(uint32_t lo, uint32_t hi) const;
    // Every code point in [lo, hi] is. REQUIRES [lo, hi] holds no surrogate.
    bool covers(uint32_t lo, uint32_t hi) const;
};

struct grammar_data {
    std::vector<symbol>     symbols;
    std::vector<uint32_t>   alt_starts;      // first position of every alternative, by rule
    std::vector<uint32_t>   rule_alt_begin;  // rule r: alt_starts[rule_alt_begin[r], rule_alt_begin[r + 1])
    std::vector<char_class> classes;
    std::vector<std::string> rule_names;
    uint32_t                root = 0;
};

// Normalises ranges (any order, overlapping, possibly holding surrogates) into a class.
char_class make_char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);

}  // namespace skippy::grammar::detail
