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
    double ceiling = 0;
    switch (GetParam()) {
        case tensor_type::f32: ceiling = 0; break;
        case tensor_type::f16: ceiling = 0x1p-11 / 1.5; break;  // at most half an ulp
        case tensor_type::bf16: ceiling = 0x1p-8 / 1.5; break;
        case tensor_type::q8_0: ceiling = 0.0075; break;
        case tensor_type::q4_0: ceiling = 0.12; break;
        case tensor_type::q4_k: ceiling = 0.10; break;
        case tensor_type::q6_k: ceiling = 0.025; break;
        default: FAIL();
    }
    EXPECT_LE(rel, ceiling) << tensor_type_name(GetParam());
    RecordProperty("relative_rms_error", std::to_string(rel));
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

// Per-sub-block bound of our Q4_K encoder (see from_float_q4_k): nothing is clipped,
// so |error| <= step_j / 2 with step_j <= (range_j + dmin) / 15 + d, where range_j =
// max - min(0, min) of the sub-block, dmin ~ max_j(-min(0, min_j)) / 63 and
// d ~ max_j step_j / 63 (each 2^-10 larger at most from rounding up to an f16).
TEST(kernels_quantize, Q4_KErrorIsWithinHalfAStepOfEachSubBlock) {
    for (uint64_t seed : {6u, 7u, 8u}) {
        auto x = random_row(256 * 40, seed);
        if (seed == 7) for (auto & v : x) v = std::fabs(v);       // all positive
        if (seed == 8) for (auto & v : x) v = -std::fabs(v) - 1;  // all negative
        const auto back = decode(tensor_type::q4_k, encode(tensor_type::q4_k, x), int64_t(x.size()));
        for (size_t b = 0; b < x.size(); b += 256) {
            float range[8], neg_lo_max = 0, max_step = 0;
            for (int j = 0; j < 8; ++j) {
                float lo = 0, hi = x[b + 32 * j];
                for (int l = 0; l < 32; ++l) {
                    lo = std::min(lo, x[b + 32 * j + l]);
                    hi = std::max(hi, x[b + 32 * j + l]);
                }
                range[j] = hi - lo;
                neg_lo_max = std::max(neg_lo_max, -lo);
            }
            const float dmin = neg_lo_max / 63 * (1 + 0x1p-10f);
            for (int j = 0; j < 8; ++j) max_step = std::max(max_step, (range[j] + dmin) / 15);
            const float d = max_step / 63 * (1 + 0x1p-10f);
            for (int j = 0; j < 8; ++j) {
                const float bound = ((range[j] + dmin) / 15 + d) / 2 * (1 + 1e-5f);
                for (int l = 0; l < 32; ++l) {
                    const size_t i = b + 32 * j + l;
                    ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "seed " << seed << " value " << i;
                }
            }
        }
    }
}

// Per-sub-block bound of our Q6_K encoder (see from_float_q6_k): the step is
// amax_j / 32 rounded up to a multiple of d ~ amax_block / 4096; |error| <= one step
// (half a step except near +32 steps, which rounds to 31).
TEST(kernels_quantize, Q6_KErrorIsWithinOneStepOfEachSubBlock) {
    for (uint64_t seed : {9u, 10u}) {
        auto x = random_row(256 * 40, seed);
        if (seed == 10) for (auto & v : x) v = std::fabs(v);
        const auto back = decode(tensor_type::q6_k, encode(tensor_type::q6_k, x), int64_t(x.size()));
        for (size_t b = 0; b < x.size(); b += 256) {
            float amax_block = 0, amax[16];
            for (int j = 0; j < 16; ++j) {
                amax[j] = 0;
                for (int l = 0; l < 16; ++l) amax[j] = std::max(amax[j], std::fabs(x[b + 16 * j + l]));
                amax_block = std::max(amax_block, amax[j]);
            }
            const float d = amax_block / 4096 * (1 + 0x1p-10f);
            for (int j = 0; j < 16; ++j) {
                const float bound = (amax[j] / 32 + d) * (1 + 1e-5f);
                for (int l = 0; l < 16; ++l) {
                    const size_t i = b + 16 * j + l;
                    ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "seed " << seed << " value " << i;
                }
            }
        }
    }
}

TEST(kernels_quantize, KQuantsKeepSmallSubBlocksNextToLargeOnes) {
    // A sub-block 20 times smaller than the rest keeps a scale of its own (a 6-bit or
    // 8-bit multiple of d) instead of collapsing to a constant.
    for (tensor_type t : {tensor_type::q4_k, tensor_type::q6_k}) {
        auto x = random_row(256, 12);
        for (int l = 0; l < 32; ++l) x[l] *= 0.05f;
        const auto back = decode(t, encode(t, x), 256);
        float amax = 0, max_err = 0;
        for (int l = 0; l < 32; ++l) {
            amax = std::max(amax, std::fabs(x[l]));
            max_err = std::max(max_err, std::fabs(back[l] - x[l]));
        }
        EXPECT_LT(max_err, amax * 0.25f) << tensor_type_name(t);
    }
}

}  // namespace
}  // namespace skippy::kernels
