// Strict UTF-8 helpers (internal to src/grammar).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace skippy::grammar::detail {

// Decodes the code point at text[pos]. Returns its length in bytes (1..4), or 0 when
// the bytes there are not well-formed UTF-8 (truncated, overlong, surrogate, > U+10FFFF,
// stray continuation byte).
inline size_t decode_utf8(std::string_view text, size_t pos, uint32_t & cp) {
    const auto byte = [&](size_t i) { return uint8_t(text[i]); };
    if (pos >= text.size()) return 0;
    uint8_t b0 = byte(pos);
    if (b0 < 0x80) { cp = b0; return 1; }
    size_t   n = 0;
    uint32_t min = 0;
    if ((b0 & 0xE0) == 0xC0)      { n = 2; cp = b0 & 0x1Fu; min = 0x80; }
    else if ((b0 & 0xF0) == 0xE0) { n = 3; cp = b0 & 0x0Fu; min = 0x800; }
    else if ((b0 & 0xF8) == 0xF0) { n = 4; cp = b0 & 0x07u; min = 0x10000; }
    else return 0;
    if (pos + n > text.size()) return 0;
    for (size_t i = 1; i < n; ++i) {
        uint8_t b = byte(pos + i);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

// REQUIRES cp <= U+10FFFF and not a surrogate.
inline void append_utf8(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

// Well-formed UTF-8 as a small automaton over the decoder's states: at a character
// boundary, or inside a character with the ranges its next byte may take (Unicode's
// table of well-formed byte sequences: no overlong forms, surrogates or > U+10FFFF).
namespace utf8 {

enum state : uint8_t {
    at_boundary, need1, need2, need2_e0, need2_ed, need3, need3_f0, need3_f4, n_utf8_states,
    utf8_error = n_utf8_states
};

inline uint8_t utf8_next(uint8_t st, uint8_t b) {
    const bool cont = b >= 0x80 && b <= 0xBF;
    switch (st) {
        case at_boundary:
            if (b < 0x80) return at_boundary;
            if (b >= 0xC2 && b <= 0xDF) return need1;
            if (b == 0xE0) return need2_e0;
            if (b == 0xED) return need2_ed;
            if (b >= 0xE1 && b <= 0xEF) return need2;
            if (b == 0xF0) return need3_f0;
            if (b >= 0xF1 && b <= 0xF3) return need3;
            if (b == 0xF4) return need3_f4;
            return utf8_error;
        case need1: return cont ? at_boundary : utf8_error;
        case need2: return cont ? need1 : utf8_error;
        case need2_e0: return b >= 0xA0 && b <= 0xBF ? need1 : utf8_error;
        case need2_ed: return b >= 0x80 && b <= 0x9F ? need1 : utf8_error;
        case need3: return cont ? need2 : utf8_error;
        case need3_f0: return b >= 0x90 && b <= 0xBF ? need2 : utf8_error;
        case need3_f4: return b >= 0x80 && b <= 0x8F ? need2 : utf8_error;
        default: return utf8_error;
    }
}

// Continuation bytes a decoder state still needs.
inline uint8_t utf8_needed(uint8_t st) {
    switch (st) {
        case need1: return 1;
        case need2: case need2_e0: case need2_ed: return 2;
        case need3: case need3_f0: case need3_f4: return 3;
        default: return 0;
    }
}

}  // namespace utf8

}  // namespace skippy::grammar::detail
