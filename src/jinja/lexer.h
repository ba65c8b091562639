// The template lexer (internal to the jinja part): jinja2's token rules, including its
// whitespace control (-, +, trim_blocks, lstrip_blocks) and {% raw %} blocks.
#pragma once

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/jinja.h"

#include <cstdint>
#include <string>
#include <vector>

namespace skippy::jinja::detail {

enum class tok : uint8_t {
    data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof,
};

struct token {
    tok         kind = tok::eof;
    uint32_t    pos = 0;   // byte offset in the normalized source
    std::string text;      // data, name, operator, decoded string literal
    int64_t     ival = 0;
    double      fval = 0;
};

// jinja2's source normalization: "\r\n" and "\r" become "\n", and one trailing newline
// is dropped (keep_trailing_newline is off).
std::string normalize_source(std::string_view source);

// Tokens of prog.source, ending with an eof token.
// Errors (invalid_data, positioned): an unexpected character, an unterminated string,
// comment, raw block or tag, an unbalanced bracket, a bad escape in a string literal.
result<std::vector<token>> lex(const program & prog, const parse_options & opts);

}  // namespace skippy::jinja::detail
