#include "jinja/py_text.h"

#include <algorithm>

namespace skippy::jinja::text {

namespace {

constexpr char32_t k_replacement = 0xFFFD;

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// Latin Extended-A (U+0100..U+017F): case pairs are (even upper, odd lower) except in
// U+0139..U+0148 and U+0179..U+017E, where the upper letter is odd.
bool latin_ext_a_upper_is_odd(char32_t c) { return in(c, 0x139, 0x148) || in(c, 0x179, 0x17E); }
bool latin_ext_a_paired(char32_t c) {
    return in(c, 0x100, 0x137) || in(c, 0x139, 0x148) || in(c, 0x14A, 0x177) || in(c, 0x179, 0x17E);
}

char32_t to_upper_cp(char32_t c) {
    if (in(c, 'a', 'z')) return c - 0x20;
    if (c < 0x80) return c;
    if (c == 0xB5) return 0x39C;
    if (in(c, 0xE0, 0xFE) && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (latin_ext_a_paired(c)) {
        bool odd = (c & 1) != 0;
        bool is_lower_letter = latin_ext_a_upper_is_odd(c) ? !odd : odd;
        return is_lower_letter ? c - 1 : c;
    }
    if (in(c, 0x3B1, 0x3C1) || in(c, 0x3C3, 0x3CB)) return c - 0x20;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (in(c, 0x3AD, 0x3AF)) return c - 0x25;
    if (c == 0x3CC) return 0x38C;
    if (in(c, 0x3CD, 0x3CE)) return c - 0x3F;
    if (in(c, 0x430, 0x44F)) return c - 0x20;
    if (in(c, 0x450, 0x45F)) return c - 0x50;
    return c;
}

char32_t to_lower_cp(char32_t c) {
    if (in(c, 'A', 'Z')) return c + 0x20;
    if (c < 0x80) return c;
    if (in(c, 0xC0, 0xDE) && c != 0xD7) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if (latin_ext_a_paired(c)) {
        bool odd = (c & 1) != 0;
        bool is_upper_letter = latin_ext_a_upper_is_odd(c) ? odd : !odd;
        return is_upper_letter ? c + 1 : c;
    }
    if (in(c, 0x391, 0x3A1) || in(c, 0x3A3, 0x3AB)) return c + 0x20;
    if (c == 0x386) return 0x3AC;
    if (in(c, 0x388, 0x38A)) return c + 0x25;
    if (c == 0x38C) return 0x3CC;
    if (in(c, 0x38E, 0x38F)) return c + 0x3F;
    if (in(c, 0x410, 0x42F)) return c + 0x20;
    if (in(c, 0x400, 0x40F)) return c + 0x50;
    return c;
}

// Python's upper() of one code point, with the expansions chat text meets.
void append_upper(std::string & out, char32_t c) {
    if (c == 0xDF) { out += "SS"; return; }
    append_utf8(out, to_upper_cp(c));
}

void append_lower(std::string & out, char32_t c) {
    if (c == 0x130) { out += 'i'; append_utf8(out, 0x307); return; }
    append_utf8(out, to_lower_cp(c));
}

bool in_set(char32_t c, const std::vector<char32_t> & set) {
    return std::find(set.begin(), set.end(), c) != set.end();
}

}  // namespace

char32_t decode(std::string_view s, size_t & i) {
    auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) { ++i; return b0; }
    int n = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((b0 & 0xE0) == 0xC0) { n = 1; cp = b0 & 0x1F; min = 0x80; }
    else if ((b0 & 0xF0) == 0xE0) { n = 2; cp = b0 & 0x0F; min = 0x800; }
    else if ((b0 & 0xF8) == 0xF0) { n = 3; cp = b0 & 0x07; min = 0x10000; }
    else { ++i; return k_replacement; }
    if (i + static_cast<size_t>(n) >= s.size()) {
        ++i;
        return k_replacement;
    }
    for (int k = 1; k <= n; ++k) {
        auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        if ((b & 0xC0) != 0x80) { ++i; return k_replacement; }
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || in(cp, 0xD800, 0xDFFF)) { ++i; return k_replacement; }
    i += static_cast<size_t>(n) + 1;
    return cp;
}

void append_utf8(std::string & out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::vector<char32_t> code_points(std::string_view s) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) out.push_back(decode(s, i));
    return out;
}

std::vector<size_t> char_offsets(std::string_view s) {
    std::vector<size_t> out;
    out.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size();) {
        out.push_back(i);
        decode(s, i);
    }
    out.push_back(s.size());
    return out;
}

size_t length(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++n) decode(s, i);
    return n;
}

bool is_space(char32_t c) {
    return in(c, 0x09, 0x0D) || in(c, 0x1C, 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           in(c, 0x2000, 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_line_break(char32_t c) {
    return in(c, 0x0A, 0x0D) || in(c, 0x1C, 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool is_digit(char32_t c) {
    return in(c, '0', '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || in(c, 0x660, 0x669) ||
           in(c, 0x6F0, 0x6F9) || in(c, 0x966, 0x96F) || in(c, 0xFF10, 0xFF19);
}

bool is_alpha(char32_t c) {
    if (c < 0x80) return in(c, 'a', 'z') || in(c, 'A', 'Z');
    if (c < 0x100) return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7);
    if (is_space(c) || is_digit(c)) return false;
    // Combining marks, punctuation, symbols, emoji and private use are not letters.
    if (in(c, 0x2B9, 0x2FF) || in(c, 0x300, 0x36F) || in(c, 0x2000, 0x2BFF) || in(c, 0x3000, 0x303F) ||
        in(c, 0xFE00, 0xFE6F) || in(c, 0xFF00, 0xFF20) || in(c, 0xFF3B, 0xFF40) || in(c, 0xFF5B, 0xFF65) ||
        in(c, 0x1F000, 0x1FAFF) || in(c, 0xE000, 0xF8FF) || c >= 0xF0000 || c == 0xFEFF || c == k_replacement)
        return false;
    return true;
}

bool is_word(char32_t c) { return c == '_' || is_alpha(c) || is_digit(c) || c == 0xBC || c == 0xBD || c == 0xBE; }

bool is_printable(char32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || in(c, 0x7F, 0xA0) || c == 0xAD) return false;
    if (in(c, 0x600, 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x1680 || c == 0x180E) return false;
    if (in(c, 0x2000, 0x200F) || in(c, 0x2028, 0x202F) || in(c, 0x205F, 0x2064) || in(c, 0x2066, 0x206F)) return false;
    if (c == 0x3000 || in(c, 0xD800, 0xF8FF) || c == 0xFEFF || in(c, 0xFFF9, 0xFFFB) || in(c, 0xFFFE, 0xFFFF)) return false;
    if (c == 0xE0001 || in(c, 0xE0020, 0xE007F) || c >= 0xF0000) return false;
    return true;
}

bool is_upper(char32_t c) { return to_lower_cp(c) != c; }
bool is_lower(char32_t c) { return to_upper_cp(c) != c || c == 0xDF; }

std::string upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) append_upper(out, decode(s, i));
    return out;
}

std::string lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) append_lower(out, decode(s, i));
    return out;
}

std::string capitalize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool first = true;
    for (size_t i = 0; i < s.size();) {
        char32_t c = decode(s, i);
        if (first) append_upper(out, c); else append_lower(out, c);
        first = false;
    }
    return out;
}

std::string swapcase(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        char32_t c = decode(s, i);
        if (is_upper(c)) append_lower(out, c);
        else if (is_lower(c)) append_upper(out, c);
        else append_utf8(out, c);
    }
    return out;
}

std::string strip(std::string_view s, const std::string * chars, bool left, bool right) {
    std::vector<char32_t> set;
    if (chars) set = code_points(*chars);
    auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
    std::vector<size_t> offs = char_offsets(s);
    size_t n = offs.size() - 1;
    size_t b = 0, e = n;
    if (left) {
        while (b < e) {
            size_t p = offs[b];
            if (!strippable(decode(s, p))) break;
            ++b;
        }
    }
    if (right) {
        while (e > b) {
            size_t p = offs[e - 1];
            if (!strippable(decode(s, p))) break;
            --e;
        }
    }
    return std::string(s.substr(offs[b], offs[e] - offs[b]));
}

std::vector<std::string> split(std::string_view s, const std::string * sep, int64_t maxsplit) {
    std::vector<std::string> out;
    uint64_t left = maxsplit < 0 ? UINT64_MAX : static_cast<uint64_t>(maxsplit);
    if (sep) {
        size_t i = 0;
        while (left > 0) {
            size_t j = s.find(*sep, i);
            if (j == std::string_view::npos) break;
            out.emplace_back(s.substr(i, j - i));
            i = j + sep->size();
            --left;
        }
        out.emplace_back(s.substr(i));
        return out;
    }
    size_t i = 0;
    auto space_at = [&](size_t p, size_t & next) {
        next = p;
        return is_space(decode(s, next));
    };
    size_t nx = 0;
    while (left-- > 0) {
        while (i < s.size() && space_at(i, nx)) i = nx;
        if (i == s.size()) break;
        size_t j = i;
        while (i < s.size() && !space_at(i, nx)) i = nx;
        out.emplace_back(s.substr(j, i - j));
    }
    if (i < s.size()) {
        while (i < s.size() && space_at(i, nx)) i = nx;
        if (i != s.size()) out.emplace_back(s.substr(i));
    }
    return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string * sep, int64_t maxsplit) {
    std::vector<std::string> out;
    uint64_t left = maxsplit < 0 ? UINT64_MAX : static_cast<uint64_t>(maxsplit);
    if (sep) {
        size_t end = s.size();
        while (left > 0 && end >= sep->size()) {
            size_t j = s.rfind(*sep, end - sep->size());
            if (j == std::string_view::npos) break;
            out.emplace_back(s.substr(j + sep->size(), end - j - sep->size()));
            end = j;
            --left;
        }
        out.emplace_back(s.substr(0, end));
        std::reverse(out.begin(), out.end());
        return out;
    }
    std::vector<size_t> offs = char_offsets(s);
    std::vector<char32_t> cps = code_points(s);
    size_t i = cps.size();  // exclusive end, in code points
    while (left-- > 0) {
        while (i > 0 && is_space(cps[i - 1])) --i;
        if (i == 0) break;
        size_t j = i;
        while (i > 0 && !is_space(cps[i - 1])) --i;
        out.emplace_back(s.substr(offs[i], offs[j] - offs[i]));
    }
    if (i > 0) {
        while (i > 0 && is_space(cps[i - 1])) --i;
        if (i != 0) out.emplace_back(s.substr(0, offs[i]));
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
        size_t at = i;
        char32_t c = decode(s, i);
        if (!is_line_break(c)) continue;
        size_t eol_end = i;
        if (c == '\r' && i < s.size() && s[i] == '\n') eol_end = ++i;
        out.emplace_back(s.substr(start, (keepends ? eol_end : at) - start));
        start = eol_end;
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return out;
}

bool replace(std::string_view s, std::string_view from, std::string_view to, int64_t count_limit,
             size_t max_bytes, std::string & out) {
    out.clear();
    uint64_t left = count_limit < 0 ? UINT64_MAX : static_cast<uint64_t>(count_limit);
    if (from.empty()) {
        size_t i = 0;
        while (i <= s.size()) {
            if (left > 0) { out += to; --left; }
            if (i == s.size()) break;
            size_t j = i;
            decode(s, j);
            out.append(s.substr(i, j - i));
            i = j;
            if (left == 0) { out.append(s.substr(i)); break; }
            if (out.size() > max_bytes) return false;
        }
        return out.size() <= max_bytes;
    }
    size_t i = 0;
    while (left > 0) {
        size_t j = s.find(from, i);
        if (j == std::string_view::npos) break;
        out.append(s.substr(i, j - i));
        out.append(to);
        i = j + from.size();
        --left;
        if (out.size() > max_bytes) return false;
    }
    out.append(s.substr(i));
    return out.size() <= max_bytes;
}

size_t count(std::string_view s, std::string_view needle) {
    if (needle.empty()) return length(s) + 1;
    size_t n = 0;
    for (size_t i = s.find(needle); i != std::string_view::npos; i = s.find(needle, i + needle.size())) ++n;
    return n;
}

std::string repr(std::string_view s) {
    bool has_single = s.find('\'') != std::string_view::npos;
    bool has_double = s.find('"') != std::string_view::npos;
    char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out;
    out.reserve(s.size() + 2);
    out += quote;
    static const char * hex = "0123456789abcdef";
    for (size_t i = 0; i < s.size();) {
        char32_t c = decode(s, i);
        if (c == static_cast<char32_t>(quote) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (!is_printable(c)) {
            int digits = c < 0x100 ? 2 : c < 0x10000 ? 4 : 8;
            out += '\\';
            out += digits == 2 ? 'x' : digits == 4 ? 'u' : 'U';
            for (int k = digits - 1; k >= 0; --k) out += hex[(c >> (4 * k)) & 0xF];
        } else append_utf8(out, c);
    }
    out += quote;
    return out;
}

}  // namespace skippy::jinja::text
