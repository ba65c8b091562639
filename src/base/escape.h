// Untrusted bytes (a GGUF key or string, a peer's or a client's text) made safe to quote
// in an error message or a log line, and the UTF-8 decoding that needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace skippy {

// Decodes the well-formed UTF-8 sequence starting at text[pos] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF). Returns its length (1 to 4) and sets
// `cpt`, or returns 0 when the bytes at `pos` do not start a well-formed sequence.
// REQUIRES: pos < text.size()
size_t decode_utf8(std::string_view text, size_t pos, uint32_t & cpt);

// How much of an input escape_bytes quotes by default, in input bytes.
inline constexpr size_t k_escape_max_bytes = 96;

// `bytes` as text that is printable, valid UTF-8 and unambiguous inside '...':
//   - printable ASCII stays, except '\' -> "\\" and '\'' -> "\'";
//   - TAB, LF, CR -> "\t", "\n", "\r"; other ASCII control bytes and DEL -> "\xNN";
//   - each byte that is not part of a well-formed UTF-8 sequence -> "\xNN";
//   - well-formed non-ASCII characters stay, except those that are invisible or move
//     text on a terminal (C1 controls U+0080..U+009F, U+00AD, U+200B..U+200F,
//     U+2028..U+202E, U+2060..U+206F, U+FEFF) -> "\u{XXXX}".
// At most `max_bytes` input bytes are quoted (never cutting a character); a longer input
// ends with "... (N bytes)", N its full size. Never fails, allocates O(max_bytes).
std::string escape_bytes(std::string_view bytes, size_t max_bytes = k_escape_max_bytes);

}  // namespace skippy
