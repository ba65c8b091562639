// Special-token matching, BOS rules and the end-of-generation set.
#include "tiny_vocab.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

using testing::build_or_fail;
using testing::tiny_vocab;
using ids = std::vector<token_id>;

// A BPE vocabulary: alphabet (ids = bytes), then the given special tokens.
struct special_case {
    tiny_vocab v{"gpt2"};
    special_case() {
        v.with_gpt2_alphabet();
        v.set("tokenizer.ggml.pre", gguf::value::make_string("gpt-2"));
    }
};

TEST(special_tokens, ControlTokensAreMatchedOnlyWithParseSpecial) {
    special_case c;
    const token_id im_end = c.v.add("<|im_end|>", 0, token_kind::control);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("a<|im_end|>b", false, true), (ids{'a', im_end, 'b'}));
    const auto plain = t->tokenize("a<|im_end|>b", false, false);
    EXPECT_EQ(plain.size(), 12u);  // every character its own token, no merges
    EXPECT_EQ(t->detokenize(plain), "a<|im_end|>b");
    // Control tokens render only on request.
    EXPECT_EQ(t->detokenize({'a', im_end}), "a");
    EXPECT_EQ(t->detokenize({'a', im_end}, true), "a<|im_end|>");
}

TEST(special_tokens, UserDefinedTokensAreAlwaysMatched) {
    special_case c;
    const token_id tool = c.v.add("<tool>", 0, token_kind::user_defined);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("x<tool>y", false, false), (ids{'x', tool, 'y'}));
    EXPECT_EQ(t->tokenize("x<tool>y", false, true), (ids{'x', tool, 'y'}));
    EXPECT_EQ(t->token_to_piece(tool), "<tool>");
}

TEST(special_tokens, LongerSpecialTokensWinOverTheirPrefixes) {
    special_case c;
    const token_id short_tok = c.v.add("<a>", 0, token_kind::control);
    const token_id long_tok = c.v.add("<a>b", 0, token_kind::control);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("<a>b<a>", false, true), (ids{long_tok, short_tok}));
    EXPECT_EQ(t->tokenize("<a><a>b", false, true), (ids{short_tok, long_tok}));
}

TEST(special_tokens, AdjacentAndRepeatedMatches) {
    special_case c;
    const token_id s = c.v.add("<s>", 0, token_kind::control);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("<s><s>", false, true), (ids{s, s}));
    EXPECT_EQ(t->tokenize("<s", false, true), (ids{'<', 's'}));
    EXPECT_EQ(t->tokenize("", false, true), ids{});
}

TEST(special_tokens, Phi3SpecialTokensEatTheWhitespaceAfterThem) {
    // llama.cpp marks Phi-3's special tokens rstrip by model name.
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const std::string sp = "\xE2\x96\x81";
    const token_id sp_hi = v.add(sp + "hi", -1);
    v.add(sp, -5);
    v.add("h", -5);
    v.add("i", -5);
    v.add("hi", -3);
    const token_id user = v.add("<|user|>", 0, token_kind::control);
    v.set("general.name", gguf::value::make_string("Phi3"));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->tokenize("<|user|>\n hi", false, true), (ids{user, sp_hi}));
    v.set("general.name", gguf::value::make_string("other"));
    auto plain = build_or_fail(v);
    ASSERT_TRUE(plain);
    EXPECT_NE(plain->tokenize("<|user|>\n hi", false, true), (ids{user, sp_hi}));
}

TEST(bos_rules, SpmAddsBosByDefault) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_TRUE(t->add_bos_default());
    EXPECT_EQ(t->bos(), 1);  // llama.cpp's SPM defaults when the ids are absent
    EXPECT_EQ(t->eos(), 2);
    EXPECT_EQ(t->unk(), 0);
}

TEST(bos_rules, BpeDoesNotAddBosByDefault) {
    special_case c;
    c.v.add("<|endoftext|>", 0, token_kind::control);
    c.v.set("tokenizer.ggml.bos_token_id", gguf::value::make_u32(256));
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->add_bos_default());
    EXPECT_EQ(t->bos(), 256);
    EXPECT_EQ(t->tokenize("a", true, false), (ids{256, 'a'}));  // an explicit request still works
}

// The CLI's rule: without add_bos_token, no BPE vocabulary adds BOS, whatever its
// pre-tokenizer (llama.cpp would default its llama-3 names to BOS).
TEST(bos_rules, BpeDoesNotAddBosByDefaultWhateverThePreTokenizer) {
    for (const char * pre : {"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "dbrx", "qwen2", "starcoder",
                             "falcon", "deepseek-coder", "default"}) {
        special_case c;
        c.v.add("<|begin_of_text|>", 0, token_kind::control);
        c.v.set("tokenizer.ggml.bos_token_id", gguf::value::make_u32(256));
        c.v.set("tokenizer.ggml.pre", gguf::value::make_string(pre));
        auto t = build_or_fail(c.v);
        ASSERT_TRUE(t) << pre;
        EXPECT_EQ(t->bos(), 256) << pre;
        EXPECT_FALSE(t->add_bos_default()) << pre;
        // A llama-3 file that asks for BOS gets it.
        c.v.set("tokenizer.ggml.add_bos_token", gguf::value::make_bool(true));
        auto with_key = build_or_fail(c.v);
        ASSERT_TRUE(with_key) << pre;
        EXPECT_TRUE(with_key->add_bos_default()) << pre;
    }
}

TEST(bos_rules, MetadataOverridesTheDefault) {
    tiny_vocab spm;
    spm.with_spm_specials_and_bytes();
    spm.set("tokenizer.ggml.add_bos_token", gguf::value::make_bool(false));
    auto t1 = build_or_fail(spm);
    ASSERT_TRUE(t1);
    EXPECT_FALSE(t1->add_bos_default());

    special_case c;
    c.v.add("<s>", 0, token_kind::control);
    c.v.set("tokenizer.ggml.bos_token_id", gguf::value::make_u32(256));
    c.v.set("tokenizer.ggml.add_bos_token", gguf::value::make_bool(true));
    auto t2 = build_or_fail(c.v);
    ASSERT_TRUE(t2);
    EXPECT_TRUE(t2->add_bos_default());
}

TEST(bos_rules, NoBosMeansNothingIsPrepended) {
    special_case c;
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->bos(), -1);
    EXPECT_FALSE(t->add_bos_default());
    EXPECT_EQ(t->tokenize("a", true, false), (ids{'a'}));
}

TEST(bos_rules, MinusOneMeansNone) {
    tiny_vocab v;
    v.with_spm_specials_and_bytes();
    v.set("tokenizer.ggml.bos_token_id", gguf::value::make_u32(0xFFFFFFFFu));
    auto t = build_or_fail(v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->bos(), -1);
    EXPECT_FALSE(t->add_bos_default());
}

TEST(end_of_generation, CollectsEosEotEomAndKnownTexts) {
    special_case c;
    const token_id eos = c.v.add("<|endoftext|>", 0, token_kind::control);
    const token_id eot = c.v.add("<my_eot>", 0, token_kind::control);
    const token_id eom = c.v.add("<my_eom>", 0, token_kind::control);
    const token_id im_end = c.v.add("<|im_end|>", 0, token_kind::user_defined);
    const token_id other = c.v.add("<|im_start|>", 0, token_kind::control);
    c.v.set("tokenizer.ggml.eos_token_id", gguf::value::make_u32(static_cast<uint32_t>(eos)));
    c.v.set("tokenizer.ggml.eot_token_id", gguf::value::make_u32(static_cast<uint32_t>(eot)));
    c.v.set("tokenizer.ggml.eom_token_id", gguf::value::make_u32(static_cast<uint32_t>(eom)));
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->end_of_generation_ids(), (ids{eos, eot, eom, im_end}));
    EXPECT_TRUE(t->is_end_of_generation(eos));
    EXPECT_TRUE(t->is_end_of_generation(im_end));
    EXPECT_FALSE(t->is_end_of_generation(other));
    EXPECT_FALSE(t->is_end_of_generation('a'));
    EXPECT_FALSE(t->is_end_of_generation(-1));
    // Recognised by text, so treated as control like llama.cpp does.
    EXPECT_EQ(t->kind(im_end), token_kind::control);
    EXPECT_EQ(t->token_to_piece(im_end), "");
}

// Harmony: with <|return|> and <|call|> in the set, <|end|> closes a message, not the
// answer; it becomes user-defined. The harmony markers are user-defined too.
TEST(end_of_generation, HarmonyEndIsNotTheEndWhenReturnAndCallExist) {
    special_case c;
    const token_id ret = c.v.add("<|return|>", 0, token_kind::control);
    const token_id call = c.v.add("<|call|>", 0, token_kind::control);
    const token_id end = c.v.add("<|end|>", 0, token_kind::control);
    const token_id start = c.v.add("<|start|>", 0, token_kind::control);
    const token_id channel = c.v.add("<|channel|>", 0, token_kind::control);
    const token_id message = c.v.add("<|message|>", 0, token_kind::control);
    const token_id constrain = c.v.add("<|constrain|>", 0, token_kind::control);
    c.v.set("tokenizer.ggml.eos_token_id", gguf::value::make_u32(static_cast<uint32_t>(ret)));
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->end_of_generation_ids(), (ids{ret, call}));
    for (token_id id : {end, start, channel, message, constrain}) {
        EXPECT_EQ(t->kind(id), token_kind::user_defined) << t->token_text(id);
        EXPECT_FALSE(t->is_end_of_generation(id)) << t->token_text(id);
    }
    EXPECT_EQ(t->tokenize("a<|end|><|start|>", false, false), (ids{'a', end, start}));
    EXPECT_EQ(t->detokenize({channel, 'a', end}), "<|channel|>a<|end|>");
}

// Phi-3 ends its turns with <|end|> and has no <|return|>/<|call|>: there it is the end.
TEST(end_of_generation, EndAloneEndsTheGeneration) {
    special_case c;
    const token_id end = c.v.add("<|end|>", 0, token_kind::control);
    const token_id call = c.v.add("<|call|>", 0, token_kind::control);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->end_of_generation_ids(), (ids{end, call}));
    EXPECT_EQ(t->kind(end), token_kind::control);
}

// FIM pad / repository / file-separator tokens end a generation; found by text when the
// file has no key, and a key of -1 ("none") turns that off.
TEST(end_of_generation, FimTokensByTextOrKey) {
    special_case c;
    const token_id pad = c.v.add("<|fim_pad|>", 0, token_kind::normal);
    const token_id repo = c.v.add("<|repo_name|>", 0, token_kind::control);
    const token_id sep = c.v.add("<|file_sep|>", 0, token_kind::control);
    const token_id mine = c.v.add("<my_sep>", 0, token_kind::control);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->end_of_generation_ids(), (ids{pad, repo, sep}));
    EXPECT_EQ(t->kind(pad), token_kind::control) << "found by text, so forced to control";

    c.v.set("tokenizer.ggml.fim_pad_token_id", gguf::value::make_i32(-1));
    c.v.set("tokenizer.ggml.fim_sep_token_id", gguf::value::make_u32(static_cast<uint32_t>(mine)));
    auto keyed = build_or_fail(c.v);
    ASSERT_TRUE(keyed);
    EXPECT_EQ(keyed->end_of_generation_ids(), (ids{repo, mine}));
    EXPECT_EQ(keyed->kind(pad), token_kind::normal);
}

TEST(lookups, FindTokenAndTokenText) {
    special_case c;
    const token_id tool = c.v.add("<tool>", 0, token_kind::user_defined);
    auto t = build_or_fail(c.v);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->find_token("<tool>"), tool);
    EXPECT_EQ(t->find_token("nope"), -1);
    EXPECT_EQ(t->token_text(tool), "<tool>");
    EXPECT_EQ(t->token_text(-5), "");
    EXPECT_EQ(t->kind(tool), token_kind::user_defined);
    EXPECT_EQ(t->kind(100000), token_kind::undefined);
    EXPECT_EQ(t->n_vocab(), 257);
    EXPECT_EQ(t->model(), tokenizer_model::bpe);
}

}  // namespace
}  // namespace skippy
