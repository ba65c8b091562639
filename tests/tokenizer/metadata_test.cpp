// Malformed or unsupported tokenizer metadata gives a clear status, never a crash.
#include "tiny_vocab.h"

#include <gtest/gtest.h>

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

TEST(tokenizer_metadata, MergesWithoutASeparatorAreIgnored) {
    tiny_vocab v = small_bpe();
    v.merge("nospace");
    auto t = v.build();
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
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
