// escape_bytes: untrusted bytes quoted in messages stay printable, valid UTF-8 and
// unambiguous; decode_utf8 accepts exactly the well-formed sequences.
#include "base/escape.h"

#include <gtest/gtest.h>

#include <string>

namespace skippy {
namespace {

using namespace std::string_literals;

TEST(escape_bytes, PrintableTextIsKept) {
    EXPECT_EQ(escape_bytes("tokenizer.ggml.pre"), "tokenizer.ggml.pre");
    EXPECT_EQ(escape_bytes(""), "");
    EXPECT_EQ(escape_bytes("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x9A\x80"), "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x9A\x80");
}

TEST(escape_bytes, ControlBytesBecomeEscapes) {
    EXPECT_EQ(escape_bytes("a\0b"s), "a\\x00b");
    EXPECT_EQ(escape_bytes("\x1B[31mred"), "\\x1B[31mred");
    EXPECT_EQ(escape_bytes("\x7F"), "\\x7F");
    EXPECT_EQ(escape_bytes("a\tb\nc\rd"), "a\\tb\\nc\\rd");
}

TEST(escape_bytes, QuotesAndBackslashesAreEscaped) {
    EXPECT_EQ(escape_bytes("it's"), "it\\'s");
    EXPECT_EQ(escape_bytes("C:\\x00"), "C:\\\\x00");  // a literal backslash never looks like an escape
}

TEST(escape_bytes, InvalidUtf8BecomesOneEscapePerByte) {
    EXPECT_EQ(escape_bytes("\xFF\xFE"), "\\xFF\\xFE");
    EXPECT_EQ(escape_bytes("\xC3"), "\\xC3");                  // truncated
    EXPECT_EQ(escape_bytes("\x80" "a"), "\\x80a");             // lone continuation byte
    EXPECT_EQ(escape_bytes("\xC0\xAF"), "\\xC0\\xAF");         // overlong '/'
    EXPECT_EQ(escape_bytes("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // surrogate
    EXPECT_EQ(escape_bytes("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(escape_bytes, InvisibleCharactersAreNamed) {
    EXPECT_EQ(escape_bytes("a\xC2\x85" "b"), "a\\u{0085}b");  // C1 NEL
    EXPECT_EQ(escape_bytes("\xE2\x80\xAE" "evil"), "\\u{202E}evil");  // right-to-left override
    EXPECT_EQ(escape_bytes("\xEF\xBB\xBF" "x"), "\\u{FEFF}x");
    EXPECT_EQ(escape_bytes("\xE2\x80\x8B"), "\\u{200B}");
}

TEST(escape_bytes, LongInputsAreCutWithTheirSize) {
    const std::string long_text(1000, 'k');
    EXPECT_EQ(escape_bytes(long_text, 4), "kkkk... (1000 bytes)");
    EXPECT_EQ(escape_bytes(long_text).size(), k_escape_max_bytes + std::string("... (1000 bytes)").size());
    // A character is never cut in half.
    EXPECT_EQ(escape_bytes("ab\xC3\xA9", 3), "ab... (4 bytes)");
    EXPECT_EQ(escape_bytes("abc", 3), "abc");
}

TEST(escape_bytes, EveryByteValueGivesPrintableValidText) {
    for (int b = 0; b < 256; ++b) {
        const std::string out = escape_bytes(std::string(1, static_cast<char>(b)) + "z");
        for (size_t pos = 0; pos < out.size();) {
            uint32_t cpt = 0;
            const size_t n = decode_utf8(out, pos, cpt);
            ASSERT_GT(n, 0u) << "byte " << b;
            EXPECT_TRUE(cpt >= 0x20 && cpt != 0x7F && !(cpt >= 0x80 && cpt <= 0x9F)) << "byte " << b;
            pos += n;
        }
    }
}

TEST(decode_utf8, AcceptsExactlyTheWellFormedSequences) {
    uint32_t cpt = 0;
    EXPECT_EQ(decode_utf8("A", 0, cpt), 1u);
    EXPECT_EQ(cpt, 0x41u);
    EXPECT_EQ(decode_utf8("\xC3\xA9", 0, cpt), 2u);
    EXPECT_EQ(cpt, 0xE9u);
    EXPECT_EQ(decode_utf8("\xE2\x82\xAC", 0, cpt), 3u);
    EXPECT_EQ(cpt, 0x20ACu);
    EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x80", 0, cpt), 4u);
    EXPECT_EQ(cpt, 0x1F600u);
    EXPECT_EQ(decode_utf8("\xF4\x8F\xBF\xBF", 0, cpt), 4u);
    EXPECT_EQ(cpt, 0x10FFFFu);
    for (const char * bad : {"\x80", "\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80",
                             "\xF5\x80\x80\x80", "\xE2\x82", "\xC3" "A"}) {
        EXPECT_EQ(decode_utf8(bad, 0, cpt), 0u) << escape_bytes(bad);
    }
}

}  // namespace
}  // namespace skippy
