// Writing GBNF text (internal to src/grammar): literals, character classes and the
// JSON-encoded form of sets of characters, for the JSON schema and regex converters.
#pragma once

#include "base/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::grammar::detail {

using cp_ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive

// A GBNF string literal matching exactly `utf8` (which must be valid UTF-8).
std::string gbnf_literal(std::string_view utf8);

// A GBNF character class ("[a-z_]") of the given ranges. REQUIRES !ranges.empty().
std::string gbnf_class(const cp_ranges & ranges);

// A GBNF expression matching one character of `set` as it is written inside a JSON
// string in canonical form (raw, except '"', '\\' and controls: \" \\ \b \f \n \r \t,
// else \u00xx). Surrogates in the set are ignored. Empty when the set holds nothing.
std::string json_encoded_char(const cp_ranges & set);

// The complement of `set` within all code points, and its normal form (sorted,
// merged, surrogates removed).
cp_ranges complement(const cp_ranges & set);
cp_ranges normalize(cp_ranges set);

// The GBNF expression (over JSON-encoded characters, canonical as above) for the
// string values an ECMA-262 regular expression `pattern` matches somewhere (JSON
// schema's `pattern` is unanchored unless ^ / $ say otherwise). `any_char` names the
// rule for one JSON string character of any kind (used for unanchored ends).
// Outside the subset (docs/grammar.md): unsupported, naming the construct.
result<std::string> regex_to_gbnf(std::string_view pattern, const std::string & any_char);

}  // namespace skippy::grammar::detail
