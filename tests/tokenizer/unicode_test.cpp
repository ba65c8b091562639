// sanitize_utf8 and the GPT-2 byte alphabet.
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

const std::string k_fffd = "\xEF\xBF\xBD";

std::string repeat_fffd(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += k_fffd;
    return s;
}

TEST(sanitize_utf8, KeepsWellFormedText) {
    for (const std::string s : {"", "plain ASCII", "F\xC3\xBChrer", "\xE2\x82\xAC 5", "\xF0\x9F\x98\x81",
                                "\xED\x9F\xBF" /* U+D7FF */, "\xEE\x80\x80" /* U+E000 */,
                                "\xF4\x8F\xBF\xBF" /* U+10FFFF */, "\xEF\xBF\xBD"}) {
        EXPECT_EQ(sanitize_utf8(s), s);
    }
}

TEST(sanitize_utf8, ReplacesEachByteOfATruncatedSequence) {
    EXPECT_EQ(sanitize_utf8("a\xE2\x82"), "a" + repeat_fffd(2));
    EXPECT_EQ(sanitize_utf8("\xE2\x82z"), repeat_fffd(2) + "z");
    EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), repeat_fffd(3));
    EXPECT_EQ(sanitize_utf8("\xC3"), repeat_fffd(1));
    // A new lead byte ends the broken sequence and starts a good one.
    EXPECT_EQ(sanitize_utf8("\xE2\xC3\xA9"), k_fffd + "\xC3\xA9");
}

TEST(sanitize_utf8, ReplacesLoneContinuationBytes) {
    EXPECT_EQ(sanitize_utf8("\x80"), k_fffd);
    EXPECT_EQ(sanitize_utf8("a\xBF" "b"), "a" + k_fffd + "b");
    EXPECT_EQ(sanitize_utf8("\xC3\xA9\xA9"), "\xC3\xA9" + k_fffd);
}

TEST(sanitize_utf8, RejectsOverlongForms) {
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), repeat_fffd(2));
    EXPECT_EQ(sanitize_utf8("\xC1\xBF"), repeat_fffd(2));
    EXPECT_EQ(sanitize_utf8("\xE0\x80\xAF"), repeat_fffd(3));
    EXPECT_EQ(sanitize_utf8("\xE0\x9F\xBF"), repeat_fffd(3));
    EXPECT_EQ(sanitize_utf8("\xF0\x80\x80\xAF"), repeat_fffd(4));
    EXPECT_EQ(sanitize_utf8("\xF0\x8F\xBF\xBF"), repeat_fffd(4));
}

TEST(sanitize_utf8, RejectsSurrogates) {
    EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), repeat_fffd(3));  // U+D800
    EXPECT_EQ(sanitize_utf8("\xED\xBF\xBF"), repeat_fffd(3));  // U+DFFF
    // A CESU-8 style surrogate pair is two bad sequences.
    EXPECT_EQ(sanitize_utf8("\xED\xA0\xBD\xED\xB8\x81"), repeat_fffd(6));
}

TEST(sanitize_utf8, RejectsCodePointsAboveTheUnicodeRange) {
    EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), repeat_fffd(4));  // U+110000
    EXPECT_EQ(sanitize_utf8("\xF5\x80\x80\x80"), repeat_fffd(4));
    EXPECT_EQ(sanitize_utf8("\xF8\x88\x80\x80\x80"), repeat_fffd(5));
    EXPECT_EQ(sanitize_utf8("\xFE\xFF"), repeat_fffd(2));
}

TEST(gpt2_alphabet, MapsBytesToPrintableCodePoints) {
    using tokenizer_detail::gpt2_byte_to_utf8;
    EXPECT_EQ(gpt2_byte_to_utf8('A'), "A");
    EXPECT_EQ(gpt2_byte_to_utf8(' '), "\xC4\xA0");   // U+0120 'Ġ'
    EXPECT_EQ(gpt2_byte_to_utf8('\n'), "\xC4\x8A");  // U+010A 'Ċ'
    EXPECT_EQ(gpt2_byte_to_utf8(0x00), "\xC4\x80");  // U+0100
    EXPECT_EQ(gpt2_byte_to_utf8(0xAD), "\xC5\x83");  // U+0143, the last shifted byte
    EXPECT_EQ(gpt2_byte_to_utf8(0xE9), "\xC3\xA9");  // printable Latin-1 stays itself
}

TEST(gpt2_alphabet, DecodeInvertsEveryByte) {
    std::string all_bytes;
    std::string spelled;
    for (int b = 0; b < 256; ++b) {
        all_bytes.push_back(static_cast<char>(b));
        spelled += tokenizer_detail::gpt2_byte_to_utf8(static_cast<uint8_t>(b));
    }
    EXPECT_EQ(tokenizer_detail::gpt2_decode(spelled), all_bytes);
    // Characters outside the alphabet pass through unchanged.
    EXPECT_EQ(tokenizer_detail::gpt2_decode("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
}

TEST(utf8_lead_length, CountsLikeLlamaCpp) {
    using tokenizer_detail::utf8_lead_length;
    EXPECT_EQ(utf8_lead_length('a'), 1u);
    EXPECT_EQ(utf8_lead_length(0x80), 1u);  // continuation: a character of its own
    EXPECT_EQ(utf8_lead_length(0xC3), 2u);
    EXPECT_EQ(utf8_lead_length(0xE2), 3u);
    EXPECT_EQ(utf8_lead_length(0xF0), 4u);
    EXPECT_EQ(utf8_lead_length(0xF8), 4u);  // high nibble F
}

}  // namespace
}  // namespace skippy
