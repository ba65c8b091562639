// A GBNF grammar as parsed, before the checks and the flattening into grammar_data
// (internal to src/grammar).
#pragma once

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_data.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::grammar::detail {

struct parsed_rule {
    std::string                      name;
    std::vector<std::vector<symbol>> alts;
    bool                             defined = false;
    bool                             synthesized = false;  // made for a group or a repetition
    size_t                           offset = 0;           // definition (or first reference) in the source
};

struct parsed_grammar {
    std::vector<parsed_rule> rules;
    std::vector<char_class>  classes;
};

// "line:column" (1-based, column in bytes) of a byte offset into `source`.
std::string source_position(std::string_view source, size_t offset);

result<parsed_grammar> parse_gbnf(std::string_view source, const grammar_limits & limits);

// Checks a parsed grammar (every rule defined, a root, no left recursion), drops the
// alternatives that can never match, and lays it out for the matcher.
result<std::unique_ptr<grammar_data>> finish_grammar(parsed_grammar parsed, std::string_view source);

}  // namespace skippy::grammar::detail
