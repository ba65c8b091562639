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
            std::string out = "[";
            append_gbnf_char(out, cp, "]\\^-[");
            out += ']';
            return out;
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
    const size_t n_alts = (raw.empty() ? 0 : 1) + escaped.size();
    if (n_alts == 0) return "";
    std::string out;
    if (n_alts > 1) out += '(';
    if (!raw.empty()) out += gbnf_class(raw);
    for (uint32_t c : escaped) {
        if (out.size() > 1) out += " | ";
        // The escape as JSON writes it, as a GBNF literal: "\\" then the letter (or u00XX).
        out += "\"\\\\";
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += 'b'; break;
            case '\f': out += 'f'; break;
            case '\n': out += 'n'; break;
            case '\r': out += 'r'; break;
            case '\t': out += 't'; break;
            default: {
                char buf[8];
                std::snprintf(buf, sizeof buf, "u%04x", c);
                out += buf;
            }
        }
        out += '"';
    }
    if (n_alts > 1) out += ')';
    return out;
}

}  // namespace skippy::grammar::detail
