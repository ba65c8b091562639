// SentencePiece-style tokenization on tiny vocabularies.
#include "tiny_vocab.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

using testing::build_or_fail;
using testing::tiny_vocab;
using ids = std::vector<token_id>;

const std::string k_sp = "\xE2\x96\x81";  // U+2581, SPM's space

// A vocabulary without the space prefix, so merges are easy to follow.
tiny_vocab abc_vocab(float score_ab, float score_bc) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();          // 0..258
    v.add("a", -10);                          // 259
    v.add("b", -10);                          // 260
    v.add("c", -10);                          // 261
    v.add("ab", score_ab);                    // 262
    v.add("bc", score_bc);                    // 263
    v.set("tokenizer.ggml.add_space_prefix", gguf::value::make_bool(false));
    return v;
}

TEST(spm, MergesTheHighestScoringPairFirst) {
    auto t1 = build_or_fail(abc_vocab(-1.0f, -2.0f));
    ASSERT_TRUE(t1);
    EXPECT_EQ(t1->tokenize("abc", false, false), (ids{262, 261}));  // "ab" + "c"
    auto t2 = build_or_fail(abc_vocab(-2.0f, -1.0f));
    ASSERT_TRUE(t2);
    EXPECT_EQ(t2->tokenize("abc", false, false), (ids{259, 263}));  // "a" + "bc"
}

TEST(spm, EqualScoresMergeTheLeftmostPairFirst) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id a = v.add("a", -5);
    const token_id aa = v.add("aa", -1);
    v.set("tokenizer.ggml.add_space_prefix", gguf::value::make_bool(false));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("aaa", false, false), (ids{aa, a}));
    EXPECT_EQ(t->tokenize("aaaa", false, false), (ids{aa, aa}));
}

TEST(spm, MergesRepeatUntilNoPairIsAToken) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    v.add("a", -10);
    v.add("b", -10);
    v.add("ab", -3);
    const token_id abab = v.add("abab", -1);
    v.set("tokenizer.ggml.add_space_prefix", gguf::value::make_bool(false));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("abab", false, false), (ids{abab}));
}

TEST(spm, UnknownCharactersFallBackToByteTokens) {
    auto t = build_or_fail(abc_vocab(-1, -2));
    ASSERT_TRUE(t);
    // U+00E9 is not in the vocabulary: its two bytes become <0xC3> <0xA9> (ids 3 + byte).
    EXPECT_EQ(t->tokenize("a\xC3\xA9", false, false), (ids{259, 3 + 0xC3, 3 + 0xA9}));
    // Invalid UTF-8 is kept byte for byte, as llama.cpp does: characters are cut by the
    // lead byte's high nibble unchecked, so 0xFF swallows the 'a' after it and both go
    // out as byte tokens.
    EXPECT_EQ(t->tokenize("\xFF" "a", false, false), (ids{3 + 0xFF, 3 + 'a'}));
    EXPECT_EQ(t->tokenize("\x80" "a", false, false), (ids{3 + 0x80, 259}));
    EXPECT_EQ(t->detokenize(t->tokenize("a\xC3\xA9\xFF", false, false), false, true), "a\xC3\xA9\xFF");
}

TEST(spm, WithoutByteTokensUnknownCharactersBecomeUnk) {
    tiny_vocab v;
    v.add("<unk>", 0, token_kind::unknown);
    v.add("<s>", 0, token_kind::control);
    v.add("</s>", 0, token_kind::control);
    const token_id a = v.add("a", -1);
    v.set("tokenizer.ggml.add_space_prefix", gguf::value::make_bool(false));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("a\xC3\xA9", false, false), (ids{a, 0, 0}));  // one <unk> per byte
}

TEST(spm, AddsASpacePrefixAndEscapesSpaces) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id sp_a = v.add(k_sp + "a", -1);
    const token_id sp_b = v.add(k_sp + "b", -1);
    v.add(k_sp, -5);
    v.add("a", -5);
    v.add("b", -5);
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("a b", false, false), (ids{sp_a, sp_b}));
    EXPECT_EQ(t->token_to_piece(sp_a), " a");
    EXPECT_EQ(t->detokenize({sp_a, sp_b}), " a b");  // plain concatenation (a continuation)
    EXPECT_EQ(t->detokenize({sp_a, sp_b}, false, true), "a b");  // the added space is dropped again
}

TEST(spm, AddsTheSpacePrefixAgainAfterASpecialToken) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id sp_a = v.add(k_sp + "a", -1);
    v.add(k_sp, -5);
    v.add("a", -5);
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("a</s>a", false, true), (ids{sp_a, 2, sp_a}));
}

TEST(spm, StripSpacePrefixLooksAtTheFirstTokenOnlyLikeLlamaCpp) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id sp_a = v.add(k_sp + "a", -1);
    v.add(k_sp, -5);
    v.add("a", -5);
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->detokenize({sp_a, sp_a}, false, true), "a a");
    // llama_detokenize spends its strip on the leading BOS (which renders as "").
    EXPECT_EQ(t->detokenize({1, sp_a}, false, true), " a");
    EXPECT_EQ(t->detokenize({1, sp_a}, /*render_special=*/true, true), "<s> a");
}

TEST(spm, TokenToPieceRendersByKind) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id user = v.add("<tool>", 0, token_kind::user_defined);
    const token_id unused = v.add("<unused0>", 0, token_kind::unused);
    v.add(k_sp + "x" + k_sp, -1);
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->token_to_piece(0), "");  // <unk>
    EXPECT_EQ(t->token_to_piece(0, true), "<unk>");
    EXPECT_EQ(t->token_to_piece(1), "");  // <s>
    EXPECT_EQ(t->token_to_piece(1, true), "<s>");
    EXPECT_EQ(t->token_to_piece(3 + 'A'), "A");
    EXPECT_EQ(t->token_to_piece(3 + 0xFF), "\xFF");
    EXPECT_EQ(t->token_to_piece(user), "<tool>");
    EXPECT_EQ(t->token_to_piece(unused, true), "");
    EXPECT_EQ(t->token_to_piece(unused + 1), " x ");
    EXPECT_EQ(t->token_to_piece(-1), "");
    EXPECT_EQ(t->token_to_piece(t->n_vocab()), "");
}

TEST(spm, EmptyTextGivesOnlyTheBos) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("", false, false), ids{});
    EXPECT_EQ(t->tokenize("", true, false), ids{1});
}

}  // namespace
}  // namespace skippy
