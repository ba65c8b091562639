// quantize_row -> dequantize_row: exact where the format can represent the input,
// within each format's worst-case error bound elsewhere.
#include "kernel_test_util.h"

#include "kernels/blocks.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace skippy::kernels {
namespace {

using testing::decode;
using testing::encode;
using testing::random_row;

class every_weight_type : public ::testing::TestWithParam<tensor_type> {};

TEST_P(every_weight_type, ZeroRowEncodesExactly) {
    const std::vector<float> zeros(512, 0.0f);
    const auto back = decode(GetParam(), encode(GetParam(), zeros), 512);
    for (float v : back) EXPECT_EQ(v, 0.0f);
}

TEST_P(every_weight_type, EncodingIsDeterministic) {
    const auto x = random_row(1024, 11);
    EXPECT_EQ(encode(GetParam(), x), encode(GetParam(), x));
}

// Relative RMS error on roughly normal data, against a ceiling per format a little
// above what the encoder reaches (catches a regression in encoder quality). The
// values are RMS(error) / RMS(x).
TEST_P(every_weight_type, RelativeRmsErrorOnNormalDataIsSmall) {
    const int64_t n = 256 * 64;
    const auto x = random_row(n, 5, 0.02f);
    const auto back = decode(GetParam(), encode(GetParam(), x), n);
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
        err2 += (back[i] - x[i]) * double(back[i] - x[i]);
        x2 += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(err2 / x2);
    RecordProperty("relative_rms_error", std::to_string(rel));
    double ceiling = 0;
    switch (GetParam()) {
        case tensor_type::f32: ceiling = 0; break;
        case tensor_type::f16: ceiling = 0x1p-11 / 1.5; break;  // at most half an ulp
        case tensor_type::bf16: ceiling = 0x1p-8 / 1.5; break;
        case tensor_type::q8_0: ceiling = 0.0075; break;
        case tensor_type::q4_0: ceiling = 0.12; break;
        case tensor_type::q4_k: ceiling = 0.10; break;
        case tensor_type::q6_k: ceiling = 0.025; break;
        case tensor_type::q5_0: ceiling = 0.06; break;
        case tensor_type::q5_1: ceiling = 0.048; break;
        case tensor_type::iq4_nl: ceiling = 0.10; break;
        case tensor_type::mxfp4: ceiling = 0.14; break;
        case tensor_type::q2_k: ceiling = 0.43; break;
        case tensor_type::q3_k: ceiling = 0.20; break;
        case tensor_type::q5_k: ceiling = 0.05; break;
        case tensor_type::iq4_xs: ceiling = 0.105; break;
        default: FAIL();
    }
    EXPECT_LE(rel, ceiling) << tensor_type_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(kernels, every_weight_type, ::testing::ValuesIn(testing::weight_types()),
                         [](const auto & p) { return testing::type_param_name(p.param); });

TEST(kernels_quantize, F32RoundTripsExactly) {
    auto x = random_row(64, 1);
    x.push_back(-0.0f);
    x.push_back(1e-40f);  // subnormal
    x.push_back(3.4e38f);
    x.push_back(INFINITY);
    EXPECT_EQ(decode(tensor_type::f32, encode(tensor_type::f32, x), 68), x);
}

TEST(kernels_quantize, F16RoundTripsRepresentableValuesExactly) {
    std::vector<float> x;
    for (uint32_t h = 0; h < 0x7c00; h += 7) {
        x.push_back(f16_to_f32(static_cast<f16_bits>(h)));
        x.push_back(-f16_to_f32(static_cast<f16_bits>(h)));
    }
    EXPECT_EQ(decode(tensor_type::f16, encode(tensor_type::f16, x), int64_t(x.size())), x);
}

TEST(kernels_quantize, F16AndBf16ErrorIsHalfAnUlp) {
    const auto x = random_row(4096, 2);
    const auto h = decode(tensor_type::f16, encode(tensor_type::f16, x), 4096);
    const auto b = decode(tensor_type::bf16, encode(tensor_type::bf16, x), 4096);
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::fabs(x[i]) < 0x1p-14f) continue;  // f16 subnormals have a fixed ulp
        EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
        EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;
    }
}

TEST(kernels_quantize, Bf16RoundTripsRepresentableValuesExactly) {
    std::vector<float> x;
    for (uint32_t v = 0; v < 0x7f80; v += 3) x.push_back(bf16_to_f32(static_cast<bf16_bits>(v)));
    EXPECT_EQ(decode(tensor_type::bf16, encode(tensor_type::bf16, x), int64_t(x.size())), x);
}

TEST(kernels_quantize, Q8_0RoundTripsMultiplesOfTheScaleExactly) {
    // amax = 127 * 0.125, so d = 0.125 exactly (an f16) and every k * d is a code.
    std::vector<float> x;
    for (int k = -127; k <= 127; ++k) x.push_back(0.125f * static_cast<float>(k));
    while (x.size() % 32 != 0) x.push_back(0.125f * 127);
    // Every block must contain the extreme so its d is 0.125.
    for (size_t b = 0; b < x.size(); b += 32) x[b] = 0.125f * 127;
    const auto bytes = encode(tensor_type::q8_0, x);
    EXPECT_EQ(bytes[0], 0x00);  // d = 0.125 = 0x3000
    EXPECT_EQ(bytes[1], 0x30);
    EXPECT_EQ(decode(tensor_type::q8_0, bytes, int64_t(x.size())), x);
}

TEST(kernels_quantize, Q8_0WeightEncoderRoundsTiesAwayFromZeroLikeGgmlReference) {
    // amax = 127 makes d = 1 and id = 1, so x * id is exactly 2.5 and -2.5.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 3.5f;
    const auto bytes = encode(tensor_type::q8_0, x);
    EXPECT_EQ(static_cast<int8_t>(bytes[2 + 1]), 3);
    EXPECT_EQ(static_cast<int8_t>(bytes[2 + 2]), -3);
    EXPECT_EQ(static_cast<int8_t>(bytes[2 + 3]), 4);
}

TEST(kernels_quantize, Q8_0ErrorIsWithinHalfAStep) {
    const auto x = random_row(32 * 200, 3);
    const auto back = decode(tensor_type::q8_0, encode(tensor_type::q8_0, x), int64_t(x.size()));
    for (size_t b = 0; b < x.size(); b += 32) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        const float d = amax / 127;
        // Half a step, plus |q| <= 127 times the f16 rounding of d (2^-11 relative).
        const float bound = d * 0.5f + 127 * d * 0x1p-11f;
        for (size_t j = 0; j < 32; ++j) ASSERT_LE(std::fabs(back[b + j] - x[b + j]), bound) << b + j;
    }
}

TEST(kernels_quantize, Q4_0RoundTripsRepresentableBlocksExactly) {
    for (float sign : {1.0f, -1.0f}) {
        // The value of largest magnitude is sign * -8 * 0.25, so d = sign * 0.25 and
        // every k * d with k in [-8, 7] is a code.
        std::vector<float> x(32);
        for (int j = 0; j < 32; ++j) x[j] = sign * 0.25f * static_cast<float>(j % 16 - 8);
        const auto back = decode(tensor_type::q4_0, encode(tensor_type::q4_0, x), 32);
        EXPECT_EQ(back, x) << "sign " << sign;
    }
}

TEST(kernels_quantize, Q4_0ErrorIsWithinOneStep) {
    const auto x = random_row(32 * 200, 4);
    const auto back = decode(tensor_type::q4_0, encode(tensor_type::q4_0, x), int64_t(x.size()));
    for (size_t b = 0; b < x.size(); b += 32) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        const float d = amax / 8;
        // Half a step, except a value of the opposite sign to the extreme at +8 steps,
        // which can only reach +7: one step. Plus the f16 rounding of d on |q - 8| <= 8.
        const float bound = d * 1.0f + 8 * d * 0x1p-11f;
        for (size_t j = 0; j < 32; ++j) ASSERT_LE(std::fabs(back[b + j] - x[b + j]), bound) << b + j;
    }
}

TEST(kernels_quantize, Q4_0MatchesGgmlReferenceBytes) {
    // Values chosen by hand: max magnitude -4 -> d = 0.5; 1.3 / 0.5 = 2.6 -> +8.5 = 11.1
    // -> 11; 0.25 / 0.5 = 0.5 -> 9.0 -> 9 (ties go up); 3.9 -> 7.8 + 8.5 = 16.3 -> 15.
    std::vector<float> x(32, 0.0f);
    x[0] = -4.0f;
    x[1] = 1.3f;
    x[2] = 0.25f;
    x[16] = 3.9f;
    const auto bytes = encode(tensor_type::q4_0, x);
    EXPECT_EQ(load_u16_le(bytes.data()), f32_to_f16(0.5f));
    EXPECT_EQ(bytes[2 + 0], 0x0 | (15 << 4));  // x[0] -> 0, x[16] -> 15
    EXPECT_EQ(bytes[2 + 1], 11 | (8 << 4));
    EXPECT_EQ(bytes[2 + 2], 9 | (8 << 4));
}

// Per-sub-block bound of the min-scale encoder (Q2_K, Q4_K, Q5_K; encode_min_scale in
// src/kernels/quants_common.h): nothing is clipped, so |error| <= step_j / 2 with
// step_j <= (range_j + dmin) / q_max + d, where range_j = max - min(0, min) of the
// sub-block, dmin ~ max_j(-min(0, min_j)) / scale_max and d ~ max_j step_j / scale_max
// (each 2^-10 larger at most from rounding up to an f16).
struct min_scale_case {
    tensor_type t;
    int         n_sub, q_max, scale_max;
};

class min_scale_encoder : public ::testing::TestWithParam<min_scale_case> {};

TEST_P(min_scale_encoder, ErrorIsWithinHalfAStepOfEachSubBlock) {
    const auto [t, n_sub, q_max, scale_max] = GetParam();
    const int sub_len = 256 / n_sub;
    for (uint64_t seed : {6u, 7u, 8u}) {
        auto x = random_row(256 * 40, seed);
        if (seed == 7) for (auto & v : x) v = std::fabs(v);       // all positive
        if (seed == 8) for (auto & v : x) v = -std::fabs(v) - 1;  // all negative
        const auto back = decode(t, encode(t, x), int64_t(x.size()));
        for (size_t b = 0; b < x.size(); b += 256) {
            float range[16], neg_lo_max = 0, max_step = 0;
            for (int j = 0; j < n_sub; ++j) {
                float lo = 0, hi = x[b + sub_len * j];
                for (int l = 0; l < sub_len; ++l) {
                    lo = std::min(lo, x[b + sub_len * j + l]);
                    hi = std::max(hi, x[b + sub_len * j + l]);
                }
                range[j] = hi - lo;
                neg_lo_max = std::max(neg_lo_max, -lo);
            }
            const float dmin = neg_lo_max / static_cast<float>(scale_max) * (1 + 0x1p-10f);
            for (int j = 0; j < n_sub; ++j) max_step = std::max(max_step, (range[j] + dmin) / static_cast<float>(q_max));
            const float d = max_step / static_cast<float>(scale_max) * (1 + 0x1p-10f);
            for (int j = 0; j < n_sub; ++j) {
                const float bound = ((range[j] + dmin) / static_cast<float>(q_max) + d) / 2 * (1 + 1e-5f);
                for (int l = 0; l < sub_len; ++l) {
                    const size_t i = b + sub_len * j + l;
                    ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "seed " << seed << " value " << i;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, min_scale_encoder,
                         ::testing::Values(min_scale_case{tensor_type::q2_k, 16, 3, 15},
                                           min_scale_case{tensor_type::q4_k, 8, 15, 63},
                                           min_scale_case{tensor_type::q5_k, 8, 31, 63}),
                         [](const auto & p) { return testing::type_param_name(p.param.t); });

// Per-sub-block bound of the signed-scale encoder (Q3_K, Q6_K, IQ4_XS;
// encode_signed_scale in src/kernels/quants_common.h): the step is amax_j / |level_0|
// rounded up to a multiple of d ~ amax_block / (|level_0| * |scale_lo|). Linear levels:
// |error| <= one step (half a step except near the far end, which rounds to the last
// level). IQ4_XS's table: at most 14 steps (past its last level, 113, up to 127), else
// half its widest gap (24).
struct signed_scale_case {
    tensor_type t;
    int         n_sub, level0, scale_lo;
    float       max_error_steps;
};

class signed_scale_encoder : public ::testing::TestWithParam<signed_scale_case> {};

TEST_P(signed_scale_encoder, ErrorIsBoundedInStepsOfEachSubBlock) {
    const auto [t, n_sub, level0, scale_lo, max_error_steps] = GetParam();
    const int sub_len = 256 / n_sub;
    for (uint64_t seed : {9u, 10u}) {
        auto x = random_row(256 * 40, seed);
        if (seed == 10) for (auto & v : x) v = std::fabs(v);
        const auto back = decode(t, encode(t, x), int64_t(x.size()));
        for (size_t b = 0; b < x.size(); b += 256) {
            float amax_block = 0, amax[16];
            for (int j = 0; j < n_sub; ++j) {
                amax[j] = 0;
                for (int l = 0; l < sub_len; ++l) amax[j] = std::max(amax[j], std::fabs(x[b + sub_len * j + l]));
                amax_block = std::max(amax_block, amax[j]);
            }
            const float d = amax_block / static_cast<float>(level0 * scale_lo) * (1 + 0x1p-10f);
            for (int j = 0; j < n_sub; ++j) {
                const float bound = max_error_steps * (amax[j] / static_cast<float>(level0) + d) * (1 + 1e-5f);
                for (int l = 0; l < sub_len; ++l) {
                    const size_t i = b + sub_len * j + l;
                    ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "seed " << seed << " value " << i;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, signed_scale_encoder,
                         ::testing::Values(signed_scale_case{tensor_type::q3_k, 16, 4, 32, 1.0f},
                                           signed_scale_case{tensor_type::q6_k, 16, 32, 128, 1.0f},
                                           signed_scale_case{tensor_type::iq4_xs, 8, 127, 32, 14.0f}),
                         [](const auto & p) { return testing::type_param_name(p.param.t); });

TEST(kernels_quantize, KQuantsKeepSmallSubBlocksNextToLargeOnes) {
    // A sub-block 20 times smaller than the rest keeps a scale of its own (a 4-, 6- or
    // 8-bit multiple of d) instead of collapsing to a constant (an error near amax). Q2_K
    // has 4 codes, and its 4-bit min is a coarse multiple of the large sub-blocks' dmin:
    // the small one's error reaches about amax / 2.
    for (tensor_type t : {tensor_type::q2_k, tensor_type::q3_k, tensor_type::q4_k, tensor_type::q5_k, tensor_type::q6_k,
                          tensor_type::iq4_xs}) {
        auto x = random_row(256, 12);
        for (int l = 0; l < 32; ++l) x[l] *= 0.05f;
        const auto back = decode(t, encode(t, x), 256);
        float amax = 0, max_err = 0;
        for (int l = 0; l < 32; ++l) {
            amax = std::max(amax, std::fabs(x[l]));
            max_err = std::max(max_err, std::fabs(back[l] - x[l]));
        }
        EXPECT_LT(max_err, amax * (t == tensor_type::q2_k ? 0.5f : 0.25f)) << tensor_type_name(t);
    }
}

TEST(kernels_quantize, Q5_0MatchesGgmlReferenceBytes) {
    // Largest magnitude -4 -> d = 0.25, id = 4; codes truncate x * 4 + 16.5:
    // 1.3 -> 21.7 -> 21; 0.125 -> 17.0 -> 17; 3.99 -> 32.46 -> 32 -> 31; 0 -> 16.
    std::vector<float> x(32, 0.0f);
    x[0] = -4.0f;
    x[1] = 1.3f;
    x[2] = 0.125f;
    x[16] = 3.99f;
    const auto bytes = encode(tensor_type::q5_0, x);
    EXPECT_EQ(load_u16_le(bytes.data() + q5_0_off_d), f32_to_f16(0.25f));
    EXPECT_EQ(load_u32_le(bytes.data() + q5_0_off_qh), 0xfffffffeu);  // every code >= 16 but code 0
    EXPECT_EQ(bytes[q5_0_off_qs + 0], 0x0 | (0xf << 4));  // codes 0 and 31
    EXPECT_EQ(bytes[q5_0_off_qs + 1], 0x5);               // codes 21 and 16
    EXPECT_EQ(bytes[q5_0_off_qs + 2], 0x1);               // codes 17 and 16
}

TEST(kernels_quantize, Q5_1RoundTripsRepresentableBlocksExactly) {
    // min -1 and max -1 + 31 / 16: d = 1 / 16 exactly, every -1 + k / 16 is a code.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = -1.0f + static_cast<float>((j * 7) % 32) / 16.0f;
    EXPECT_EQ(decode(tensor_type::q5_1, encode(tensor_type::q5_1, x), 32), x);
}

TEST(kernels_quantize, Mxfp4RoundTripsE2M1ValuesExactly) {
    // amax 6 * 2^-3: exponent floor(log2(0.75)) - 2 = -3, so every E2M1 value * 2^-3 is a code.
    const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    std::vector<float> x(64);
    for (int j = 0; j < 64; ++j) x[j] = (j % 3 == 0 ? -1.0f : 1.0f) * e2m1[(j * 5) % 8] * 0.125f;
    x[7] = 0.75f;
    x[40] = -0.75f;
    EXPECT_EQ(decode(tensor_type::mxfp4, encode(tensor_type::mxfp4, x), 64), x);
}

TEST(kernels_quantize, Iq4NlRoundTripsScaledTableValuesExactly) {
    // The largest magnitude at the table's -127 end: d = 0.5, every level * 0.5 is exact
    // and the least-squares refinement keeps d.
    const int8_t levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(levels[(j * 3) % 16]);
    EXPECT_EQ(decode(tensor_type::iq4_nl, encode(tensor_type::iq4_nl, x), 32), x);
}

}  // namespace
}  // namespace skippy::kernels
