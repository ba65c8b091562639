// make-model's per-tensor weight types (quant_mix): llama-quantize's rules per file type,
// its fallback for rows that 256-value super-blocks do not divide, and the files
// make-model writes with them.
#include "model_fixture.h"

#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <map>
#include <string>

namespace skippy::testing {
namespace {

quant_mix mix_of(const char * name) {
    auto m = parse_quant_mix(name);
    EXPECT_TRUE(m.is_ok()) << name;
    return m.is_ok() ? *m : quant_mix{};
}

// A llama-shaped tensor of layer il (or -1) with rows of n_cols.
tensor_type type_of(const char * mix, const std::string & name, int32_t il, int32_t n_layer, int64_t n_cols, int32_t n_gqa = 2) {
    return type_for_weight(mix_of(mix), weight_slot{name, il, n_layer, n_cols, n_gqa});
}

std::string layer(int32_t il, const char * tensor) { return "blk." + std::to_string(il) + "." + tensor + ".weight"; }

TEST(quant_mix, NamesAreCaseInsensitiveAndCarryLlamaFtypeNumbers) {
    const std::map<std::string, uint32_t> ftypes = {{"F32", 0},     {"F16", 1},     {"BF16", 32},   {"Q8_0", 7},
                                                    {"Q4_0", 2},    {"Q5_0", 8},    {"Q5_1", 9},    {"IQ4_NL", 25},
                                                    {"IQ4_XS", 30}, {"Q2_K", 10},   {"Q3_K_M", 12}, {"Q4_K", 14},
                                                    {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"Q6_K", 18}};
    for (const auto & [name, ft] : ftypes) {
        std::string lower = name;
        for (auto & c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        auto m = parse_quant_mix(lower);
        ASSERT_TRUE(m.is_ok()) << lower;
        EXPECT_EQ(m->name, name);
        EXPECT_EQ(m->file_type, ft) << name;
        EXPECT_NE(quant_mix_names().find(name), std::string::npos) << name;
    }
    auto bad = parse_quant_mix("Q3_K_XL");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.error().code(), error_code::invalid_argument);
}

TEST(quant_mix, OutputHeadTakesQ6_KExceptInQ8_0AndPlainTypes) {
    for (const char * mix : {"Q4_0", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"}) {
        EXPECT_EQ(type_of(mix, "output.weight", -1, 4, 256), tensor_type::q6_k) << mix;
        EXPECT_EQ(type_of(mix, "token_embd.weight", -1, 4, 256), mix_of(mix).base_type) << mix;
        // A tied head: the embedding is quantized as the output.
        EXPECT_EQ(type_for_weight(mix_of(mix), weight_slot{"token_embd.weight", -1, 4, 256, 2, true}), tensor_type::q6_k) << mix;
    }
    EXPECT_EQ(type_of("Q8_0", "output.weight", -1, 4, 256), tensor_type::q8_0);
    EXPECT_EQ(type_of("Q4_K", "output.weight", -1, 4, 256), tensor_type::q4_k);  // pure
    EXPECT_EQ(type_of("BF16", "output.weight", -1, 4, 100), tensor_type::bf16);
}

// The per-layer rules of llama-quant.cpp for a 32-layer llama with 4 query heads per
// KV head (n_gqa 4), and with 2.
TEST(quant_mix, LayerRulesFollowLlamaQuantize) {
    const int32_t n = 32;
    // use_more_bits: il < 4, il >= 28, (il - 4) % 3 == 2.
    for (int32_t il = 0; il < n; ++il) {
        const bool more = il < 4 || il >= 28 || (il - 4) % 3 == 2;
        EXPECT_EQ(type_of("Q4_K_M", layer(il, "attn_v"), il, n, 4096), more ? tensor_type::q6_k : tensor_type::q4_k) << il;
        EXPECT_EQ(type_of("Q5_K_M", layer(il, "ffn_down"), il, n, 11008), more ? tensor_type::q6_k : tensor_type::q5_k) << il;
        EXPECT_EQ(type_of("Q5_K_M", layer(il, "attn_q"), il, n, 4096), tensor_type::q5_k) << il;
        EXPECT_EQ(type_of("Q3_K_M", layer(il, "attn_v"), il, n, 4096), il < 2 ? tensor_type::q5_k : tensor_type::q4_k) << il;
        EXPECT_EQ(type_of("Q3_K_M", layer(il, "ffn_down"), il, n, 11008), il < 2 ? tensor_type::q5_k : tensor_type::q4_k) << il;
        EXPECT_EQ(type_of("Q3_K_M", layer(il, "attn_output"), il, n, 4096), tensor_type::q4_k) << il;
        EXPECT_EQ(type_of("Q3_K_M", layer(il, "ffn_up"), il, n, 4096), tensor_type::q3_k) << il;
        EXPECT_EQ(type_of("Q2_K", layer(il, "attn_v"), il, n, 4096, 4), tensor_type::q4_k) << il;
        EXPECT_EQ(type_of("Q2_K", layer(il, "attn_v"), il, n, 4096, 2), tensor_type::q3_k) << il;
        EXPECT_EQ(type_of("Q2_K", layer(il, "ffn_down"), il, n, 11008), tensor_type::q3_k) << il;
        EXPECT_EQ(type_of("Q2_K", layer(il, "attn_output"), il, n, 4096), tensor_type::q3_k) << il;
        EXPECT_EQ(type_of("Q2_K", layer(il, "ffn_gate"), il, n, 4096), tensor_type::q2_k) << il;
        for (const char * iq4 : {"IQ4_NL", "IQ4_XS"}) {
            const tensor_type base = mix_of(iq4).base_type;
            EXPECT_EQ(type_of(iq4, layer(il, "attn_v"), il, n, 4096, 4), tensor_type::q5_k) << iq4 << il;
            EXPECT_EQ(type_of(iq4, layer(il, "attn_v"), il, n, 4096, 2), base) << iq4 << il;
            EXPECT_EQ(type_of(iq4, layer(il, "ffn_down"), il, n, 11008), il < 4 ? tensor_type::q5_k : base) << iq4 << il;
        }
        for (const char * plain : {"Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q6_K", "Q4_K"}) {
            EXPECT_EQ(type_of(plain, layer(il, "attn_v"), il, n, 4096, 4), mix_of(plain).base_type) << plain << il;
            EXPECT_EQ(type_of(plain, layer(il, "ffn_down"), il, n, 11008), mix_of(plain).base_type) << plain << il;
        }
    }
}

// Rows of 896 (Qwen2 0.5B's n_embd): 256-value super-blocks do not divide them.
TEST(quant_mix, RowsSuperBlocksDoNotDivideFallBackToBlocksOf32) {
    const int64_t nx = 896;
    EXPECT_EQ(type_of("Q4_K_M", layer(5, "attn_q"), 5, 24, nx), tensor_type::q5_0);
    EXPECT_EQ(type_of("Q4_K_M", layer(0, "attn_v"), 0, 24, nx), tensor_type::q8_0);  // Q6_K -> Q8_0
    EXPECT_EQ(type_of("Q4_K_M", "output.weight", -1, 24, nx), tensor_type::q8_0);
    EXPECT_EQ(type_of("Q4_K_M", "token_embd.weight", -1, 24, nx), tensor_type::q5_0);
    EXPECT_EQ(type_of("Q5_K_M", layer(5, "attn_q"), 5, 24, nx), tensor_type::q5_1);
    EXPECT_EQ(type_of("Q6_K", layer(5, "attn_q"), 5, 24, nx), tensor_type::q8_0);
    EXPECT_EQ(type_of("Q4_K", layer(5, "attn_q"), 5, 24, nx), tensor_type::q5_0);
    EXPECT_EQ(type_of("Q2_K", layer(5, "attn_q"), 5, 24, nx), tensor_type::q4_0);
    EXPECT_EQ(type_of("Q3_K_M", layer(5, "ffn_up"), 5, 24, nx), tensor_type::q4_0);
    EXPECT_EQ(type_of("Q3_K_M", layer(0, "attn_v"), 0, 24, nx), tensor_type::q5_1);  // Q5_K -> Q5_1
    EXPECT_EQ(type_of("IQ4_XS", layer(5, "attn_q"), 5, 24, nx), tensor_type::iq4_nl);
    for (const char * mix : {"Q4_0", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "Q2_K", "Q5_K_M"}) {
        EXPECT_EQ(type_of(mix, "output.weight", -1, 24, nx), tensor_type::q8_0) << mix;  // Q6_K -> Q8_0
    }
    // ffn_down's rows (n_ff 4864 = 19 * 256) keep their super-blocks.
    EXPECT_EQ(type_of("Q4_K_M", layer(0, "ffn_down"), 0, 24, 4864), tensor_type::q6_k);
    // Not even 32 divides the row: F16.
    EXPECT_EQ(type_of("Q4_K_M", layer(5, "attn_q"), 5, 24, 100), tensor_type::f16);
    EXPECT_EQ(type_of("Q4_0", layer(5, "attn_q"), 5, 24, 100), tensor_type::f16);
}

// make-model end to end with Qwen 0.5B's row length: every matrix has a type whose
// blocks divide its rows, and the model runs.
TEST(quant_mix, SyntheticModelWithRowsOf896UsesTheFallbackTypes) {
    for (const char * type : {"Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "IQ4_XS"}) {
        synthetic_model_options o;
        o.arch = "qwen2";
        o.n_embd = 896; o.n_layer = 2; o.n_head = 14; o.n_head_kv = 2; o.n_ff = 512; o.n_vocab = 300; o.type = type;
        auto file = synthetic_model(o);
        ASSERT_NE(file, nullptr) << type;
        int n_fallback = 0;
        for (const auto & t : file->tensors()) {
            if (t.dims.size() != 2) continue;
            const int64_t block = get_tensor_type_traits(static_cast<uint32_t>(t.type))->block_elems;
            EXPECT_EQ(t.dims[0] % block, 0) << type << " " << t.name;
            n_fallback += t.dims[0] == 896 && block == 32;
        }
        EXPECT_GE(n_fallback, 5) << type;
        const auto logits = eval_logits(file, {1, 7, 42}, {});
        ASSERT_EQ(logits.size(), 3u * 300u);
        for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << type;
    }
}

}  // namespace
}  // namespace skippy::testing
