// Small helpers shared by the grammar tests.
#pragma once

#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace skippy::grammar::testing {

// Compiles or fails the test.
inline grammar_ptr must_compile(std::string_view gbnf) {
    auto g = compile(gbnf);
    EXPECT_TRUE(g.is_ok()) << g.error().to_string() << "\n" << gbnf;
    return g.is_ok() ? *g : nullptr;
}

// True when the grammar matches `text` exactly (consumed whole, then may end). Feeds
// the bytes one at a time, so characters are always split across calls.
inline bool matches(const grammar_ptr & g, std::string_view text) {
    if (!g) return false;
    matcher m(g);
    for (char c : text) {
        if (!m.advance(std::string_view(&c, 1)).is_ok()) return false;
    }
    return m.can_end();
}

// True when `text` is a prefix of something the grammar matches.
inline bool is_prefix(const grammar_ptr & g, std::string_view text) {
    if (!g) return false;
    matcher m(g);
    return m.accepts(text);
}

// The error of compiling `gbnf` (ok when it compiles).
inline status compile_error(std::string_view gbnf, const grammar_limits & limits = {}) {
    auto g = compile(gbnf, limits);
    return g.is_ok() ? status::ok() : g.error();
}

}  // namespace skippy::grammar::testing
