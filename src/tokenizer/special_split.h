// Cutting input text around special-token text before the tokenizer proper runs.
#pragma once

#include "tokenizer/vocab.h"

#include <cstddef>
#include <string_view>
#include <vector>

namespace skippy::tokenizer_detail {

// A stretch of input: a special token (token >= 0) or raw text [offset, offset + length).
struct text_fragment {
    token_id token = -1;
    size_t   offset = 0;
    size_t   length = 0;
};

// Cuts `text` into raw fragments and special tokens, in input order, as llama.cpp's
// tokenizer_st_partition does: special tokens are taken longest text first, and each
// one splits every raw fragment left at all its non-overlapping occurrences (left to
// right). Control and unknown tokens take part only when parse_special; user-defined
// tokens always do. A token marked lstrip/rstrip also swallows the ASCII whitespace
// before/after it. Raw fragments are never empty; empty text gives no fragment.
std::vector<text_fragment> split_special_tokens(std::string_view text, const vocab & v, bool parse_special);

}  // namespace skippy::tokenizer_detail
