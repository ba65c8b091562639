#include "grammar/gbnf_text.h"
#include "grammar/grammar_data.h"
#include "grammar/utf8.h"

#include <algorithm>
#include <cstdio>

namespace skippy::grammar::detail {

namespace {

// One code point inside a GBNF literal or class; `specials` are escaped with '\'.
void append_gbnf_char(std::string & out, uint32_t cp, std::string_view specials) {
    char buf[16];
    if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || cp == 0x7F) { std::snprintf(buf, sizeof buf, "\\x%02X", cp); out += buf; }
    else if (cp < 0x80 && specials.find(char(cp)) != std::string_view::npos) { out += '\\'; out += char(cp); }
    else if (cp >= 0xD800 && cp <= 0xDFFF) { std::snprintf(buf, sizeof buf, "\\u%04X", cp); out += buf; }
    else append_utf8(out, cp);
}

// JSON's short escape for c ('"' '\\' and five controls), or 0.
char short_escape_letter(uint32_t c) {
    switch (c) {
        case '"': return '"';
        case '\\': return '\\';
        case '\b': return 'b';
        case '\f': return 'f';
        case '\n': return 'n';
        case '\r': return 'r';
        case '\t': return 't';
        default: return 0;
    }
}

// A character JSON must escape (a control, '"' or '\\'), as the GBNF literal of its
// canonical escape: the short one, else \u00xx (lowercase, as nlohmann's dump writes).
std::string json_escape_literal(uint32_t c) {
    char letter = short_escape_letter(c);
    char text[8];
    if (letter != 0) std::snprintf(text, sizeof text, "\\%c", letter);
    else std::snprintf(text, sizeof text, "\\u%04x", c);
    return gbnf_literal(text);
}

}  // namespace

std::string gbnf_literal(std::string_view utf8) {
    std::string out = "\"";
    for (size_t i = 0; i < utf8.size();) {
        uint32_t cp = 0;
        size_t   n = decode_utf8(utf8, i, cp);
        if (n == 0) { cp = 0xFFFD; n = 1; }  // callers pass valid UTF-8; never emit a broken grammar
        append_gbnf_char(out, cp, "\"\\");
        i += n;
    }
    out += '"';
    return out;
}

std::string gbnf_class(const cp_ranges & ranges) {
    std::string out = "[";
    for (auto [lo, hi] : ranges) {
        append_gbnf_char(out, lo, "]\\^-[");
        if (hi != lo) {
            if (hi > lo + 1) out += '-';
            append_gbnf_char(out, hi, "]\\^-[");
        }
    }
    out += ']';
    return out;
}

cp_ranges normalize(cp_ranges set) {
    std::sort(set.begin(), set.end());
    cp_ranges merged;
    for (auto [lo, hi] : set) {
        hi = std::min(hi, max_code_point);
        if (lo > hi) continue;
        if (!merged.empty() && lo <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, hi);
        else merged.emplace_back(lo, hi);
    }
    cp_ranges out;
    for (auto [lo, hi] : merged) {
        if (hi < 0xD800 || lo > 0xDFFF) {
            out.emplace_back(lo, hi);
        } else {
            if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
            if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
        }
    }
    return out;
}

cp_ranges complement(const cp_ranges & set) {
    cp_ranges n = normalize(set);
    cp_ranges out;
    uint32_t  next = 0;
    for (auto [lo, hi] : n) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= max_code_point) out.emplace_back(next, max_code_point);
    return normalize(std::move(out));
}

std::string json_encoded_char(const cp_ranges & set_in) {
    // The common call (a character of a property name or of a regex literal) is one
    // character that needs no escape: its class, without the general path's vectors.
    if (set_in.size() == 1 && set_in[0].first == set_in[0].second) {
        uint32_t cp = set_in[0].first;
        if (cp >= 0x20 && cp <= max_code_point && cp != '"' && cp != '\\' && (cp < 0xD800 || cp > 0xDFFF)) {
            return gbnf_class(set_in);
        }
    }
    cp_ranges set = normalize(set_in);
    // Raw: everything but controls, '"' and '\\'.
    cp_ranges raw;
    std::vector<uint32_t> escaped;
    for (auto [lo, hi] : set) {
        for (uint32_t c = lo; c <= hi && c < 0x20; ++c) escaped.push_back(c);
        uint32_t a = std::max<uint32_t>(lo, 0x20);
        // Split around '"' (0x22) and '\\' (0x5C).
        for (uint32_t special : {0x22u, 0x5Cu}) {
            if (a > hi) break;
            if (special >= a && special <= hi) {
                if (special > a) raw.emplace_back(a, special - 1);
                escaped.push_back(special);
                a = special + 1;
            }
        }
        if (a <= hi) raw.emplace_back(a, hi);
    }
    // A set with many escaped characters (a complement: a negated class, '.', the
    // characters after a known key's prefix) is written grouped, the escape letters in
    // one class and the \u00xx digits in two, not as one literal per character: the
    // grammar of a schema with many such sets stayed many times larger, and each
    // alternative was one more parse stack for the matcher.
    const bool grouped = escaped.size() > 4;
    std::vector<std::string> alts;
    if (!raw.empty()) alts.push_back(gbnf_class(raw));
    if (!grouped) {
        for (uint32_t c : escaped) alts.push_back(json_escape_literal(c));
    } else {
        cp_ranges letters, low_digits, high_digits;  // \<letter>; \u000<digit>; \u001<digit>
        for (uint32_t c : escaped) {
            char letter = short_escape_letter(c);
            if (letter != 0) {
                letters.emplace_back(uint8_t(letter), uint8_t(letter));
            } else {
                const char * hex = "0123456789abcdef";
                uint8_t digit = uint8_t(hex[c & 0xF]);
                (c < 0x10 ? low_digits : high_digits).emplace_back(digit, digit);
            }
        }
        if (!letters.empty()) alts.push_back("\"\\\\\" " + gbnf_class(normalize(letters)));
        if (!low_digits.empty() && !high_digits.empty()) {
            alts.push_back("\"\\\\u00\" ( \"0\" " + gbnf_class(normalize(low_digits)) + " | \"1\" " +
                           gbnf_class(normalize(high_digits)) + " )");
        } else if (!low_digits.empty()) {
            alts.push_back("\"\\\\u000\" " + gbnf_class(normalize(low_digits)));
        } else if (!high_digits.empty()) {
            alts.push_back("\"\\\\u001\" " + gbnf_class(normalize(high_digits)));
        }
    }
    if (alts.empty()) return "";
    // One item is returned bare (a caller may follow it with a postfix operator); a
    // grouped escape is two or three.
    if (alts.size() == 1 && !grouped) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) {
        if (i) out += " | ";
        out += alts[i];
    }
    return out + ")";
}

}  // namespace skippy::grammar::detail
