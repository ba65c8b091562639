// Malformed or unsupported tokenizer metadata gives a clear status, never a crash.
#include "tiny_vocab.h"

#include <gtest/gtest.h>

#include <cmath>

namespace skippy {
namespace {

using testing::tiny_vocab;

tiny_vocab small_spm() {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    v.add("a", -1);
    return v;
}

tiny_vocab small_bpe(const std::string & pre = "gpt-2") {
    tiny_vocab v("gpt2");
    v.with_gpt2_alphabet();
    v.merge("a b");
    v.add("ab");
    v.set("tokenizer.ggml.pre", gguf::value::make_string(pre));
    return v;
}

// Builds `v` and expects an error of `code` whose message mentions `needle`.
void expect_error(const tiny_vocab & v, error_code code, const std::string & needle) {
    auto t = v.build();
    ASSERT_FALSE(t.is_ok()) << "expected an error mentioning " << needle;
    EXPECT_EQ(t.error().code(), code) << t.error().to_string();
    EXPECT_NE(t.error().message().find(needle), std::string::npos) << t.error().to_string();
}

TEST(tokenizer_metadata, ValidVocabulariesBuild) {
    EXPECT_TRUE(small_spm().build().is_ok());
    EXPECT_TRUE(small_bpe().build().is_ok());
}

TEST(tokenizer_metadata, MissingModelIsInvalid) {
    expect_error(small_spm().omit("tokenizer.ggml.model"), error_code::invalid_data, "tokenizer.ggml.model");
}

TEST(tokenizer_metadata, ModelOfTheWrongTypeIsInvalid) {
    expect_error(small_spm().set("tokenizer.ggml.model", gguf::value::make_u32(1)), error_code::invalid_data,
                 "tokenizer.ggml.model");
}

TEST(tokenizer_metadata, UnknownModelIsUnsupported) {
    expect_error(small_spm().set("tokenizer.ggml.model", gguf::value::make_string("t5")), error_code::unsupported,
                 "'t5'");
}

TEST(tokenizer_metadata, MissingTokensAreInvalid) {
    expect_error(small_spm().omit("tokenizer.ggml.tokens"), error_code::invalid_data, "tokenizer.ggml.tokens");
}

TEST(tokenizer_metadata, TokensOfTheWrongTypeAreInvalid) {
    expect_error(small_spm().set("tokenizer.ggml.tokens", gguf::value::make_i32_array({1, 2, 3})),
                 error_code::invalid_data, "tokenizer.ggml.tokens");
    expect_error(small_spm().set("tokenizer.ggml.tokens", gguf::value::make_string("abc")),
                 error_code::invalid_data, "tokenizer.ggml.tokens");
}

TEST(tokenizer_metadata, EmptyVocabularyIsInvalid) {
    tiny_vocab v;
    v.set("tokenizer.ggml.tokens", gguf::value::make_string_array({}));
    v.omit("tokenizer.ggml.scores").omit("tokenizer.ggml.token_type");
    expect_error(v, error_code::invalid_data, "empty");
}

TEST(tokenizer_metadata, MismatchedScoresAreInvalid) {
    expect_error(small_spm().set("tokenizer.ggml.scores", gguf::value::make_f32_array({0.0f, 1.0f})),
                 error_code::invalid_data, "tokenizer.ggml.scores");
}

TEST(tokenizer_metadata, MismatchedTokenTypesAreInvalid) {
    expect_error(small_spm().set("tokenizer.ggml.token_type", gguf::value::make_i32_array({1})),
                 error_code::invalid_data, "tokenizer.ggml.token_type");
}

TEST(tokenizer_metadata, ScoresAndTypesAreOptional) {
    auto t = small_spm().omit("tokenizer.ggml.scores").omit("tokenizer.ggml.token_type").build();
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    EXPECT_EQ((*t)->kind(0), token_kind::normal);
}

TEST(tokenizer_metadata, OutOfRangeSpecialIdsAreInvalid) {
    for (const char * key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
                             "tokenizer.ggml.eom_token_id"}) {
        expect_error(small_spm().set(key, gguf::value::make_u32(100000)), error_code::invalid_data, key);
        expect_error(small_spm().set(key, gguf::value::make_i32(-7)), error_code::invalid_data, key);
        expect_error(small_spm().set(key, gguf::value::make_string("1")), error_code::invalid_data, key);
    }
}

TEST(tokenizer_metadata, AddBosWithoutBosIsInvalid) {
    tiny_vocab v = small_bpe();
    v.set("tokenizer.ggml.add_bos_token", gguf::value::make_bool(true));
    expect_error(v, error_code::invalid_data, "add_bos_token");
}

TEST(tokenizer_metadata, DuplicateTokensAreInvalid) {
    tiny_vocab v = small_spm();
    v.add("a", -2);
    expect_error(v, error_code::invalid_data, "duplicate");
}

TEST(tokenizer_metadata, EmptyTokenTextGetsAPlaceholder) {
    tiny_vocab v = small_spm();
    const token_id empty = v.add("", -1);
    auto t = v.build();
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    EXPECT_EQ((*t)->token_text(empty), "[EMPTY_" + std::to_string(empty) + "]");
}

TEST(tokenizer_metadata, BpeWithoutMergesIsInvalid) {
    expect_error(small_bpe().omit("tokenizer.ggml.merges"), error_code::invalid_data, "tokenizer.ggml.merges");
}

TEST(tokenizer_metadata, UnknownPreTokenizerIsUnsupported) {
    expect_error(small_bpe("tekken"), error_code::unsupported, "'tekken'");
}

TEST(tokenizer_metadata, MissingPreTokenizerUsesTheDefault) {
    auto t = small_bpe().omit("tokenizer.ggml.pre").build();
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    EXPECT_EQ((*t)->tokenize("ab", false, false), (std::vector<token_id>{256}));
}

TEST(tokenizer_metadata, MergesWithoutASeparatorAreInvalid) {
    tiny_vocab v = small_bpe();
    v.merge("nospace");
    expect_error(v, error_code::invalid_data, "tokenizer.ggml.merges: merge 1 'nospace'");
}

TEST(tokenizer_metadata, MergesThatNameUnknownTokensAreInvalid) {
    expect_error(small_bpe().merge("\xE2\x82\xAC b"), error_code::invalid_data, "left piece");   // "€" is no token
    expect_error(small_bpe().merge("a zz"), error_code::invalid_data, "right piece");
    expect_error(small_bpe().merge("b c"), error_code::invalid_data, "makes a piece");        // "bc" is no token
    // A space may be the left side: the split is at the first space after the first byte.
    tiny_vocab v = small_bpe();
    v.add(" ");
    v.add(" a");
    v.merge("  a");
    EXPECT_TRUE(v.build().is_ok());
}

TEST(tokenizer_metadata, TokenTypesOutsideTheEnumAreInvalid) {
    for (int32_t type : {7, -1, 1000}) {
        tiny_vocab v = small_spm();
        v.add("b", -1, static_cast<token_kind>(type));
        expect_error(v, error_code::invalid_data, "tokenizer.ggml.token_type: token 260 has type " + std::to_string(type));
    }
    std::vector<gguf::value> huge(259, gguf::value::make_u64(1));
    huge.push_back(gguf::value::make_u64(~uint64_t(0)));
    expect_error(small_spm().set("tokenizer.ggml.token_type", gguf::value::make_array(gguf::value_type::u64, huge)),
                 error_code::invalid_data, "tokenizer.ggml.token_type: token 259 has type 18446744073709551615");
    // Undefined (0) is in the enum.
    tiny_vocab v = small_spm();
    v.add("b", -1, token_kind::undefined);
    EXPECT_TRUE(v.build().is_ok());
}

TEST(tokenizer_metadata, NanScoresAreInvalid) {
    std::vector<float> scores(260, 0.0f);
    scores[100] = std::nanf("");
    expect_error(small_spm().set("tokenizer.ggml.scores", gguf::value::make_f32_array(scores)), error_code::invalid_data,
                 "tokenizer.ggml.scores: token 100");
}

TEST(tokenizer_metadata, AVocabSizeThatDisagreesIsInvalid) {
    tiny_vocab v = small_spm();
    v.set("general.architecture", gguf::value::make_string("llama"));
    v.set("llama.vocab_size", gguf::value::make_u32(260));
    EXPECT_TRUE(v.build().is_ok());
    v.set("llama.vocab_size", gguf::value::make_u32(32000));
    expect_error(v, error_code::invalid_data, "llama.vocab_size: 32000 disagrees with the 260 entries");
    v.set("llama.vocab_size", gguf::value::make_string("many"));
    expect_error(v, error_code::invalid_data, "llama.vocab_size");
}

// Every special-id key is checked, including the ones skippy only validates.
TEST(tokenizer_metadata, EverySpecialIdKeyIsRangeChecked) {
    for (const char * key : {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                             "tokenizer.ggml.fim_sep_token_id", "tokenizer.ggml.padding_token_id",
                             "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.mask_token_id",
                             "tokenizer.ggml.cls_token_id", "tokenizer.ggml.fim_pre_token_id",
                             "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id",
                             "tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                             "tokenizer.ggml.middle_token_id"}) {
        expect_error(small_spm().set(key, gguf::value::make_u32(260)), error_code::invalid_data, key);
        expect_error(small_spm().set(key, gguf::value::make_f32(1.0f)), error_code::invalid_data, key);
        EXPECT_TRUE(small_spm().set(key, gguf::value::make_u32(259)).build().is_ok()) << key;
        EXPECT_TRUE(small_spm().set(key, gguf::value::make_i32(-1)).build().is_ok()) << key;
    }
}

// File contents quoted in a message are escaped (base/escape.h).
TEST(tokenizer_metadata, QuotedFileContentsAreEscaped) {
    expect_error(small_spm().set("tokenizer.ggml.model", gguf::value::make_string(std::string("t5\0\xFF\x1B", 5))),
                 error_code::unsupported, "'t5\\x00\\xFF\\x1B'");
    expect_error(small_bpe(std::string("x\ny\xC3")), error_code::unsupported, "'x\\ny\\xC3'");
    tiny_vocab v = small_spm();
    v.add("\x01" "dup");
    v.add("\x01" "dup");
    expect_error(v, error_code::invalid_data, "'\\x01dup'");
}

TEST(tokenizer_metadata, TruncatedFilesNeverReachTheTokenizer) {
    // Every prefix of a valid image is rejected by the GGUF reader or builds a tokenizer;
    // neither may crash.
    const auto bytes = small_bpe().to_bytes();
    for (size_t n = 0; n < bytes.size(); n += 97) {
        auto file = gguf::file::from_bytes(std::span<const uint8_t>(bytes.data(), n));
        if (file.is_ok()) (void) tokenizer::from_gguf(**file);
    }
}

}  // namespace
}  // namespace skippy
