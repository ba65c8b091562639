#include "base/escape.h"

#include <algorithm>

namespace skippy {

size_t decode_utf8(std::string_view text, size_t pos, uint32_t & cpt) {
    const size_t remaining = text.size() - pos;
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
    const auto is_cont = [&](size_t i) { return (byte(i) & 0xC0u) == 0x80u; };
    const uint8_t b0 = byte(0);
    if (b0 < 0x80) {
        cpt = b0;
        return 1;
    }
    // The second byte's allowed range depends on the lead (Unicode Table 3-7): this is
    // what rules out overlongs (E0 80.., F0 80..), surrogates (ED A0..) and > U+10FFFF.
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (remaining < 2 || !is_cont(1)) return 0;
        cpt = (uint32_t(b0 & 0x1F) << 6) | (byte(1) & 0x3F);
        return 2;
    }
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (remaining < 3 || !is_cont(1) || !is_cont(2)) return 0;
        const uint8_t b1 = byte(1);
        if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
        if (b0 == 0xED && b1 > 0x9F) return 0;  // surrogate
        cpt = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(b1 & 0x3F) << 6) | (byte(2) & 0x3F);
        return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (remaining < 4 || !is_cont(1) || !is_cont(2) || !is_cont(3)) return 0;
        const uint8_t b1 = byte(1);
        if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
        if (b0 == 0xF4 && b1 > 0x8F) return 0;  // above U+10FFFF
        cpt = (uint32_t(b0 & 0x07) << 18) | (uint32_t(b1 & 0x3F) << 12) | (uint32_t(byte(2) & 0x3F) << 6) |
              (byte(3) & 0x3F);
        return 4;
    }
    return 0;  // continuation byte, C0/C1 (always overlong) or F5..FF
}

namespace {

constexpr char k_hex[] = "0123456789ABCDEF";

// Characters that print nothing or reorder what follows: quoting them as they are would
// let a file hide or disguise text in a message.
bool is_invisible(uint32_t cpt) {
    return (cpt >= 0x80 && cpt <= 0x9F) || cpt == 0xAD || (cpt >= 0x200B && cpt <= 0x200F) ||
           (cpt >= 0x2028 && cpt <= 0x202E) || (cpt >= 0x2060 && cpt <= 0x206F) || cpt == 0xFEFF;
}

void append_hex_byte(std::string & out, uint8_t b) {
    out += "\\x";
    out.push_back(k_hex[b >> 4]);
    out.push_back(k_hex[b & 0xF]);
}

}  // namespace

std::string escape_bytes(std::string_view bytes, size_t max_bytes) {
    std::string out;
    out.reserve(std::min(bytes.size(), max_bytes) + 16);
    size_t pos = 0;
    while (pos < bytes.size()) {
        uint32_t cpt = 0;
        const size_t n = decode_utf8(bytes, pos, cpt);
        if (pos + (n == 0 ? 1 : n) > max_bytes) break;
        if (n == 0) {
            append_hex_byte(out, static_cast<uint8_t>(bytes[pos]));
            pos += 1;
            continue;
        }
        if (n == 1) {
            const char c = bytes[pos];
            switch (c) {
                case '\\': out += "\\\\"; break;
                case '\'': out += "\\'"; break;
                case '\t': out += "\\t"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                default:
                    if (cpt < 0x20 || cpt == 0x7F) {
                        append_hex_byte(out, static_cast<uint8_t>(c));
                    } else {
                        out.push_back(c);
                    }
            }
        } else if (is_invisible(cpt)) {
            out += "\\u{";
            for (int shift = cpt > 0xFFFF ? 20 : 12; shift >= 0; shift -= 4) out.push_back(k_hex[(cpt >> shift) & 0xF]);
            out += "}";
        } else {
            out.append(bytes.substr(pos, n));
        }
        pos += n;
    }
    if (pos < bytes.size()) out += "... (" + std::to_string(bytes.size()) + " bytes)";
    return out;
}

}  // namespace skippy
