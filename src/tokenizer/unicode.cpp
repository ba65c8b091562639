#include "tokenizer/unicode.h"

#include "tokenizer/tokenizer.h"

#include <array>

namespace skippy::tokenizer_detail {

size_t utf8_lead_length(uint8_t lead) {
    static constexpr uint8_t k_length_by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k_length_by_high_nibble[lead >> 4];
}

void append_utf8(std::string & out, uint32_t cpt) {
    if (cpt < 0x80) {
        out.push_back(static_cast<char>(cpt));
    } else if (cpt < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    }
}

bool is_valid_utf8(std::string_view text) {
    uint32_t cpt = 0;
    for (size_t pos = 0; pos < text.size();) {
        const size_t n = decode_utf8(text, pos, cpt);
        if (n == 0) return false;
        pos += n;
    }
    return true;
}

namespace {

struct gpt2_alphabet {
    std::array<std::string, 256> utf8_by_byte;
    std::array<int16_t, 324>     byte_by_cpt;  // every alphabet code point is < 256 + 68

    gpt2_alphabet() {
        byte_by_cpt.fill(-1);
        uint32_t n_shifted = 0;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cpt = printable ? b : 256 + n_shifted++;
            append_utf8(utf8_by_byte[b], cpt);
            byte_by_cpt[cpt] = static_cast<int16_t>(b);
        }
    }
};

const gpt2_alphabet & alphabet() {
    static const gpt2_alphabet table;
    return table;
}

}  // namespace

std::string_view gpt2_byte_to_utf8(uint8_t byte) { return alphabet().utf8_by_byte[byte]; }

int gpt2_cpt_to_byte(uint32_t cpt) {
    const auto & table = alphabet().byte_by_cpt;
    return cpt < table.size() ? table[cpt] : -1;
}

std::string gpt2_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        uint32_t cpt = 0;
        const size_t n = decode_utf8(text, pos, cpt);
        if (n == 0) {
            out.push_back(text[pos]);
            pos += 1;
            continue;
        }
        const int byte = gpt2_cpt_to_byte(cpt);
        if (byte >= 0) {
            out.push_back(static_cast<char>(byte));
        } else {
            out.append(text.substr(pos, n));
        }
        pos += n;
    }
    return out;
}

}  // namespace skippy::tokenizer_detail

namespace skippy {

std::string sanitize_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        uint32_t cpt = 0;
        const size_t n = decode_utf8(text, pos, cpt);
        if (n == 0) {
            out.append("\xEF\xBF\xBD");  // U+FFFD for this one byte; resynchronise on the next
            pos += 1;
        } else {
            out.append(text.substr(pos, n));
            pos += n;
        }
    }
    return out;
}

}  // namespace skippy
