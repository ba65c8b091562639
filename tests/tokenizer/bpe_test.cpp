// Byte-level BPE and the pre-tokenizers on tiny vocabularies.
#include "tiny_vocab.h"
#include "tokenizer/pretokenize.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

using testing::build_or_fail;
using testing::tiny_vocab;
using ids = std::vector<token_id>;
using words = std::vector<std::string_view>;

const std::string k_g = "\xC4\xA0";  // 'Ġ', the alphabet's space

// Alphabet (ids = byte values) plus "ab" 256, "bc" 257, "abc" 258.
tiny_vocab abc_bpe(const std::vector<std::string> & merges, const std::string & pre = "gpt-2") {
    tiny_vocab v("gpt2");
    v.with_gpt2_alphabet();
    v.add("ab");
    v.add("bc");
    v.add("abc");
    for (const auto & m : merges) v.merge(m);
    v.set("tokenizer.ggml.pre", gguf::value::make_string(pre));
    return v;
}

TEST(bpe, MergesTheLowestRankFirst) {
    auto t1 = build_or_fail(abc_bpe({"a b", "b c", "ab c"}));
    ASSERT_TRUE(t1);
    EXPECT_EQ(t1->tokenize("abc", false, false), (ids{258}));
    auto t2 = build_or_fail(abc_bpe({"b c", "a b", "ab c"}));
    ASSERT_TRUE(t2);
    EXPECT_EQ(t2->tokenize("abc", false, false), (ids{'a', 257}));  // "a bc" is no merge
}

TEST(bpe, ADuplicatedMergeKeepsItsFirstRank) {
    // "b c" appears again after "a b": its first rank (0) beats "a b" (1).
    auto t = build_or_fail(abc_bpe({"b c", "a b", "b c", "ab c"}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("abc", false, false), (ids{'a', 257}));
}

TEST(bpe, EqualRanksMergeTheLeftmostPairFirst) {
    tiny_vocab v("gpt2");
    v.with_gpt2_alphabet();
    const token_id aa = v.add("aa");
    v.merge("a a");
    v.set("tokenizer.ggml.pre", gguf::value::make_string("gpt-2"));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("aaa", false, false), (ids{aa, 'a'}));
    EXPECT_EQ(t->tokenize("aaaaa", false, false), (ids{aa, aa, 'a'}));
}

TEST(bpe, MergesNeverCrossPreTokenizerWords) {
    tiny_vocab v("gpt2");
    v.with_gpt2_alphabet();
    const token_id g_b = v.add(k_g + "b");
    v.add("ab");
    v.merge("a b");
    v.merge(k_g + " b");
    v.set("tokenizer.ggml.pre", gguf::value::make_string("gpt-2"));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    // Words "a" and " b": the space goes with the letter, never merging across.
    EXPECT_EQ(t->tokenize("a b", false, false), (ids{'a', g_b}));
    EXPECT_EQ(t->token_to_piece(g_b), " b");
    EXPECT_EQ(t->detokenize(t->tokenize("a b", false, false)), "a b");
}

TEST(bpe, InvalidUtf8BecomesReplacementCharacterBytes) {
    auto t = build_or_fail(abc_bpe({}));
    ASSERT_TRUE(t);
    // 0xFF -> U+FFFD, spelled EF BF BD in the alphabet (ids = byte values).
    EXPECT_EQ(t->tokenize("\xFF", false, false), (ids{0xEF, 0xBF, 0xBD}));
    EXPECT_EQ(t->detokenize(t->tokenize("a\xE2\x82", false, false)), "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(bpe, Llama3TakesAWordThatIsATokenWhole) {
    tiny_vocab v("gpt2");
    v.with_gpt2_alphabet();
    const token_id hello = v.add("hello");  // no merges lead here
    v.set("tokenizer.ggml.pre", gguf::value::make_string("llama-bpe"));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("hello", false, false), (ids{hello}));
    v.set("tokenizer.ggml.pre", gguf::value::make_string("gpt-2"));
    auto plain = build_or_fail(v);
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->tokenize("hello", false, false), (ids{'h', 'e', 'l', 'l', 'o'}));
}

TEST(bpe, EveryByteRoundTrips) {
    auto t = build_or_fail(abc_bpe({"a b"}));
    ASSERT_TRUE(t);
    std::string text;
    for (int b = 1; b < 128; ++b) text.push_back(static_cast<char>(b));
    text += "\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x81";
    EXPECT_EQ(t->detokenize(t->tokenize(text, false, false)), text);
}

// Pre-tokenizer cuts, one style at a time.
words split(std::string_view pre, std::string_view text) {
    const auto * style = tokenizer_detail::find_pre_style(pre);
    EXPECT_NE(style, nullptr) << pre;
    if (style == nullptr) return {};
    auto p = tokenizer_detail::pretokenizer::create(*style);
    EXPECT_TRUE(p.is_ok()) << p.error().to_string();
    if (!p.is_ok()) return {};
    words out;
    (*p)->split(text, out);
    return out;
}

TEST(pretokenize, Gpt2Words) {
    EXPECT_EQ(split("gpt-2", "Hello world"), (words{"Hello", " world"}));
    EXPECT_EQ(split("gpt-2", "a  b"), (words{"a", " ", " b"}));  // a space run leaves one for the word
    EXPECT_EQ(split("gpt-2", "x   "), (words{"x", "   "}));       // trailing run stays whole
    EXPECT_EQ(split("gpt-2", "I'm it's"), (words{"I", "'m", " it", "'s"}));
    EXPECT_EQ(split("gpt-2", "3.14!!"), (words{"3", ".", "14", "!!"}));
    EXPECT_EQ(split("gpt-2", "\n\nx"), (words{"\n", "\n", "x"}));
    EXPECT_EQ(split("gpt-2", "F\xC3\xBChrer"), (words{"F\xC3\xBChrer"}));  // \p{L} is Unicode
    EXPECT_EQ(split("gpt-2", ""), words{});
}

TEST(pretokenize, Llama3Words) {
    EXPECT_EQ(split("llama-bpe", "12345"), (words{"123", "45"}));
    EXPECT_EQ(split("llama-bpe", "I'M"), (words{"I", "'M"}));
    EXPECT_EQ(split("llama-bpe", "a\n\n b"), (words{"a", "\n\n", " b"}));
    EXPECT_EQ(split("llama-bpe", "!!\n\nx"), (words{"!!\n\n", "x"}));
    EXPECT_EQ(split("llama-bpe", "(hello"), (words{"(hello"}));
}

TEST(pretokenize, Qwen2SplitsEveryDigit) {
    EXPECT_EQ(split("qwen2", "x 123"), (words{"x", " ", "1", "2", "3"}));
}

TEST(pretokenize, Gpt4oSplitsWordsByCase) {
    EXPECT_EQ(split("gpt-4o", "camelCaseWord"), (words{"camel", "Case", "Word"}));
    EXPECT_EQ(split("gpt-4o", "HTTPServer ALLCAPS"), (words{"HTTPServer", " ALLCAPS"}));
    EXPECT_EQ(split("gpt-4o", "YOU'RE won't"), (words{"YOU'RE", " won't"}));  // contractions stay on
    EXPECT_EQ(split("gpt-4o", "12345"), (words{"123", "45"}));
    EXPECT_EQ(split("gpt-4o", "a//\nb"), (words{"a", "//\n", "b"}));       // symbols keep / and newlines
    EXPECT_EQ(split("gpt-4o", "\xC3\x89" "cole"), (words{"\xC3\x89" "cole"}));  // non-ASCII letters are both cases
    // A combining mark (U+0941) is no letter: it leads the next word.
    EXPECT_EQ(split("gpt-4o", "\xE0\xA4\xA6\xE0\xA5\x81\xE0\xA4\xA8"),
              (words{"\xE0\xA4\xA6", "\xE0\xA5\x81\xE0\xA4\xA8"}));
    EXPECT_EQ(split("llama4", "camelCase"), (words{"camel", "Case"}));
}

TEST(pretokenize, StarcoderSplitsEveryDigitFirst) {
    EXPECT_EQ(split("starcoder", "x 123"), (words{"x", " ", "1", "2", "3"}));
}

TEST(pretokenize, FalconCutsPunctuationRunsAndDigitTriples) {
    EXPECT_EQ(split("falcon", "a...b"), (words{"a", "...", "b"}));
    EXPECT_EQ(split("falcon", "1234567"), (words{"123", "456", "7"}));
    EXPECT_EQ(split("falcon", "a`b"), (words{"a", "`", "b"}));
}

TEST(pretokenize, DeepseekCoderCascade) {
    EXPECT_EQ(split("deepseek-coder", "   Hello"), (words{"  ", " Hello"}));
    EXPECT_EQ(split("deepseek-coder", "a\r\nb"), (words{"a", "\r", "\n", "b"}));
    EXPECT_EQ(split("deepseek-coder", "x12"), (words{"x", "1", "2"}));
    EXPECT_EQ(split("deepseek-coder", "a, b"), (words{"a", ",", " b"}));
}

TEST(pretokenize, UnknownNamesHaveNoStyle) {
    EXPECT_EQ(tokenizer_detail::find_pre_style("no-such-pre"), nullptr);
    EXPECT_EQ(tokenizer_detail::find_pre_style(""), nullptr);
}

TEST(pretokenize, LongWhitespaceRunsStayCheapAndExact) {
    // 100k spaces before a word: \s+(?!\S) backtracks one step; must neither fail nor
    // lose bytes.
    std::string text(100000, ' ');
    text += "x";
    const auto w = split("gpt-2", text);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].size(), 99999u);
    EXPECT_EQ(w[1], " x");
}

}  // namespace
}  // namespace skippy
