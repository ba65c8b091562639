// A token's logits are bitwise the same whatever batch, chunk or thread count
// computes them (DESIGN §4). Synthetic models built in memory: no shared data needed.
#include "model_fixture.h"

#include <cmath>
#include <cstring>

namespace skippy::testing {
namespace {



struct invariance_case {
    const char * name;
    const char * arch;
    const char * type;
    kv_dtype     kv;
};

class batch_invariance : public ::testing::TestWithParam<invariance_case> {};

TEST_P(batch_invariance, LogitsAreBitwiseEqualAcrossChunkingAndThreads) {
    const invariance_case & c = GetParam();
    synthetic_model_options o;
    o.arch = c.arch;
    o.n_embd = 256;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ff = 512;
    o.n_vocab = 300;
    o.type = c.type;
    auto file = synthetic_model(o);
    ASSERT_NE(file, nullptr);
    const auto ids = sample_ids(70, o.n_vocab, 12345u);  // spans several KV blocks, a partial last one

    const auto reference = eval_logits(file, ids, {0, 1, c.kv});
    ASSERT_FALSE(reference.empty());
    for (float v : reference) ASSERT_TRUE(std::isfinite(v));
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {7, 1, c.kv}))) << "chunks of 7";
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {64, 1, c.kv}))) << "chunks of 64";
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {1, 1, c.kv}))) << "token by token";
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {0, 2, c.kv}))) << "2 threads";
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {5, 3, c.kv}))) << "3 threads, chunks of 5";
    // One token over 3 threads: attention then splits the query heads of a KV head.
    EXPECT_TRUE(bitwise_equal(reference, eval_logits(file, ids, {1, 3, c.kv}))) << "token by token, 3 threads";
}

INSTANTIATE_TEST_SUITE_P(types, batch_invariance,
                         ::testing::Values(invariance_case{"llama_f32", "llama", "F32", kv_dtype::f16},
                                           invariance_case{"llama_f32_kvf32", "llama", "F32", kv_dtype::f32},
                                           invariance_case{"llama_f16", "llama", "F16", kv_dtype::f16},
                                           invariance_case{"llama_bf16", "llama", "BF16", kv_dtype::f16},
                                           invariance_case{"llama_q8_0", "llama", "Q8_0", kv_dtype::f16},
                                           invariance_case{"llama_q4_0", "llama", "Q4_0", kv_dtype::f16},
                                           invariance_case{"llama_q4_k", "llama", "Q4_K", kv_dtype::f16},
                                           invariance_case{"llama_q6_k", "llama", "Q6_K", kv_dtype::f16},
                                           invariance_case{"llama_q5_0", "llama", "Q5_0", kv_dtype::f16},
                                           invariance_case{"llama_q5_1", "llama", "Q5_1", kv_dtype::f16},
                                           invariance_case{"llama_q5_k_m", "llama", "Q5_K_M", kv_dtype::f16},
                                           invariance_case{"llama_q3_k_m", "llama", "Q3_K_M", kv_dtype::f16},
                                           invariance_case{"llama_q2_k", "llama", "Q2_K", kv_dtype::f16},
                                           invariance_case{"llama_iq4_nl", "llama", "IQ4_NL", kv_dtype::f16},
                                           invariance_case{"llama_iq4_xs", "llama", "IQ4_XS", kv_dtype::f16},
                                           invariance_case{"qwen2_q4_k_m", "qwen2", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"llama3_q4_k_m", "llama3", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"qwen3_q4_k_m", "qwen3", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"gemma3_q4_k_m", "gemma3", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"gemma3_f32_kvf32", "gemma3", "F32", kv_dtype::f32},
                                           invariance_case{"phi3_q4_k_m", "phi3", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"qwen3moe_q4_k_m", "qwen3moe", "Q4_K_M", kv_dtype::f16},
                                           invariance_case{"qwen3moe_f32", "qwen3moe", "F32", kv_dtype::f16},
                                           invariance_case{"gptoss_mxfp4", "gpt-oss", "MXFP4_MOE", kv_dtype::f16},
                                           invariance_case{"gptoss_f32_kvf32", "gpt-oss", "F32", kv_dtype::f32}),
                         [](const auto & param_info) { return std::string(param_info.param.name); });

// A batch longer than one internal pass of forward_layers (256 tokens) gives the bits
// of smaller chunks.
TEST(model_forward, BatchLongerThanOnePassEqualsChunks) {
    synthetic_model_options o;
    o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 256; o.n_vocab = 300; o.type = "Q4_0";
    auto file = synthetic_model(o);
    ASSERT_NE(file, nullptr);
    const auto ids = sample_ids(300, o.n_vocab, 12345u);
    const auto whole = eval_logits(file, ids, {0, 2, kv_dtype::f16});
    EXPECT_TRUE(bitwise_equal(whole, eval_logits(file, ids, {37, 2, kv_dtype::f16})));
}

TEST(model_forward, ChangingAnEarlierTokenChangesLaterLogits) {
    synthetic_model_options o;
    o.n_embd = 64; o.n_layer = 1; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    auto file = synthetic_model(o);
    ASSERT_NE(file, nullptr);
    std::vector<token_id> a = {1, 50, 60, 70}, b = {1, 51, 60, 70};
    auto la = eval_logits(file, a, {});
    auto lb = eval_logits(file, b, {});
    ASSERT_EQ(la.size(), lb.size());
    // position 0 is identical, the last position differs (attention sees the past)
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), 300 * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(la.data() + 3 * 300, lb.data() + 3 * 300, 300 * sizeof(float)), 0);
}

}  // namespace
}  // namespace skippy::testing
