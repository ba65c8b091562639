// Text helpers with Python 3 str semantics over UTF-8 bytes (internal to the jinja part).
//
// Python strings are sequences of code points; ours are UTF-8 std::strings. These
// helpers index, classify and case-map by code point the way CPython does for the
// characters chat templates meet. Invalid UTF-8 never fails: each bad byte is read as
// one code point U+FFFD, so every operation stays total.
//
// Known approximations (documented in docs/chat-templates.md): case mapping covers
// ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic (other letters are left as
// they are); "printable" (repr) and "word character" (\w) use range tables for the common
// blocks, not the full Unicode database.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::jinja::text {

// Decodes the code point at s[i] and advances i past it. REQUIRES: i < s.size().
char32_t decode(std::string_view s, size_t & i);
void append_utf8(std::string & out, char32_t cp);

// Code points of s, and the byte offset where each starts (plus s.size() at the end).
std::vector<char32_t> code_points(std::string_view s);
std::vector<size_t> char_offsets(std::string_view s);
size_t length(std::string_view s);  // in code points

// Python's str.isspace() for one code point (also what re's \s matches).
bool is_space(char32_t c);
// Python's str.splitlines() line boundaries.
bool is_line_break(char32_t c);
bool is_word(char32_t c);  // re's \w (approximation beyond Latin-1)
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_printable(char32_t c);  // str.isprintable(), used by repr
bool is_upper(char32_t c);
bool is_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // first upper, rest lower
std::string swapcase(std::string_view s);

// strip family: chars == nullptr strips whitespace, else any code point of *chars.
std::string strip(std::string_view s, const std::string * chars, bool left, bool right);

// str.split / str.rsplit: sep == nullptr splits on whitespace runs. maxsplit < 0: all.
// REQUIRES: sep is null or not empty (the caller reports "empty separator").
std::vector<std::string> split(std::string_view s, const std::string * sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::string * sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);

// str.replace; count < 0: all. An empty `from` inserts `to` around every code point.
// Stops (returns false) when the result would exceed max_bytes.
bool replace(std::string_view s, std::string_view from, std::string_view to, int64_t count,
             size_t max_bytes, std::string & out);

// Number of non-overlapping occurrences (str.count); an empty needle counts len + 1.
size_t count(std::string_view s, std::string_view needle);

// Python repr() of a string: quotes chosen as CPython does, escapes for \\, the quote,
// \n \r \t and non-printable code points.
std::string repr(std::string_view s);

}  // namespace skippy::jinja::text
