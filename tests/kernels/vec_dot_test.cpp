// Activation conversion (as llama.cpp does it on CPU) and the per-type dot products.
#include "kernel_test_util.h"

#include "kernels/blocks.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace skippy::kernels {
namespace {

using testing::decode;
using testing::encode;
using testing::encode_activation;
using testing::random_row;

TEST(kernels_activation, VecDotTypesAreLlamaCppCpuOnes) {
    EXPECT_EQ(active_kernels(tensor_type::f32)->vec_dot_type, tensor_type::f32);
    EXPECT_EQ(active_kernels(tensor_type::f16)->vec_dot_type, tensor_type::f16);
    EXPECT_EQ(active_kernels(tensor_type::bf16)->vec_dot_type, tensor_type::bf16);
    EXPECT_EQ(active_kernels(tensor_type::q8_0)->vec_dot_type, tensor_type::q8_0);
    EXPECT_EQ(active_kernels(tensor_type::q4_0)->vec_dot_type, tensor_type::q8_0);
    EXPECT_EQ(active_kernels(tensor_type::q4_k)->vec_dot_type, tensor_type::q8_k);
    EXPECT_EQ(active_kernels(tensor_type::q6_k)->vec_dot_type, tensor_type::q8_k);
    EXPECT_EQ(active_kernels(tensor_type::q5_0)->vec_dot_type, tensor_type::q8_0);
    EXPECT_EQ(active_kernels(tensor_type::q5_1)->vec_dot_type, tensor_type::q8_1);
    EXPECT_EQ(active_kernels(tensor_type::iq4_nl)->vec_dot_type, tensor_type::q8_0);
    EXPECT_EQ(active_kernels(tensor_type::mxfp4)->vec_dot_type, tensor_type::q8_0);
    EXPECT_EQ(active_kernels(tensor_type::q2_k)->vec_dot_type, tensor_type::q8_k);
    EXPECT_EQ(active_kernels(tensor_type::q3_k)->vec_dot_type, tensor_type::q8_k);
    EXPECT_EQ(active_kernels(tensor_type::q5_k)->vec_dot_type, tensor_type::q8_k);
    EXPECT_EQ(active_kernels(tensor_type::iq4_xs)->vec_dot_type, tensor_type::q8_k);
}

TEST(kernels_activation, Q8_1StoresTheScaledSumOfItsCodes) {
    // amax = 127: d = 1 and id = 1, so the codes are the values (ties to even).
    std::vector<float> x(64, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[5] = -20.0f;
    x[32] = -0.5f;  // second block: amax 0.5, d = 0.5 / 127, codes -127 and 0
    const auto q = encode_activation(tensor_type::q5_1, x);
    ASSERT_EQ(q.size(), 2 * q8_1_block_bytes);
    EXPECT_EQ(load_u16_le(q.data() + q8_1_off_d), f32_to_f16(1.0f));
    EXPECT_EQ(static_cast<int8_t>(q[q8_1_off_qs + 1]), 2);
    EXPECT_EQ(static_cast<int8_t>(q[q8_1_off_qs + 2]), -4);
    EXPECT_EQ(load_u16_le(q.data() + q8_1_off_s), f32_to_f16(127.0f + 2 - 4 - 20));
    const uint8_t * b1 = q.data() + q8_1_block_bytes;
    EXPECT_EQ(static_cast<int8_t>(b1[q8_1_off_qs]), -127);
    EXPECT_EQ(load_u16_le(b1 + q8_1_off_d), f32_to_f16(0.5f / 127.0f));
    EXPECT_EQ(load_u16_le(b1 + q8_1_off_s), f32_to_f16(-0.5f / 127.0f * 127.0f));
}

TEST(kernels_activation, Q8_0ActivationsRoundTiesToEvenWithScale127OverAmax) {
    // amax = 127: id = 127 / amax = 1 exactly, so x * id hits the ties.
    std::vector<float> x(32, 0.0f);
    x[0] = -127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 3.5f;
    x[4] = 0.5f;
    const auto q = encode_activation(tensor_type::q8_0, x);
    EXPECT_EQ(load_u16_le(q.data()), f32_to_f16(1.0f));
    EXPECT_EQ(static_cast<int8_t>(q[2 + 0]), -127);
    EXPECT_EQ(static_cast<int8_t>(q[2 + 1]), 2);
    EXPECT_EQ(static_cast<int8_t>(q[2 + 2]), -2);
    EXPECT_EQ(static_cast<int8_t>(q[2 + 3]), 4);
    EXPECT_EQ(static_cast<int8_t>(q[2 + 4]), 0);
}

TEST(kernels_activation, Q8_KMapsTheLargestMagnitudeToMinus127AndStoresBlockSums) {
    auto x = random_row(512, 21);
    x[3] = 50.0f;      // largest magnitude in block 0, positive: d < 0
    x[256] = -127.0f;  // largest in block 1, negative: iscale = 1 exactly, d = 1
    x[257] = 2.5f;     // ties go to even
    x[258] = 3.5f;
    x[259] = -2.5f;
    const auto q = encode_activation(tensor_type::q6_k, x);
    ASSERT_EQ(q.size(), 2 * q8_k_block_bytes);
    for (int b = 0; b < 2; ++b) {
        const uint8_t * blk = q.data() + b * q8_k_block_bytes;
        const float d = bits_to_float(load_u32_le(blk + q8_k_off_d));
        EXPECT_FLOAT_EQ(d, b == 0 ? 50.0f / -127.0f : 1.0f) << b;
        EXPECT_EQ(static_cast<int8_t>(blk[q8_k_off_qs + (b == 0 ? 3 : 0)]), -127);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += static_cast<int8_t>(blk[q8_k_off_qs + 16 * g + j]);
            EXPECT_EQ(static_cast<int16_t>(load_u16_le(blk + q8_k_off_bsums + 2 * g)), sum) << b << " " << g;
        }
    }
    const uint8_t * qs1 = q.data() + q8_k_block_bytes + q8_k_off_qs;
    EXPECT_EQ(static_cast<int8_t>(qs1[1]), 2);
    EXPECT_EQ(static_cast<int8_t>(qs1[2]), 4);
    EXPECT_EQ(static_cast<int8_t>(qs1[3]), -2);
}

TEST(kernels_activation, F16AndBf16ActivationsAreRounded) {
    const std::vector<float> x = {1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-8f + 0x1p-20f};
    const auto h = encode_activation(tensor_type::f16, x);
    EXPECT_EQ(load_u16_le(h.data()), 0x3c01);
    const auto b = encode_activation(tensor_type::bf16, x);
    EXPECT_EQ(load_u16_le(b.data() + 2), 0x3f81);
}

// Worst-case error of the activation format for each value of x (see the activation
// encoders).
std::vector<double> activation_error_bound(tensor_type weight_type, const std::vector<float> & x) {
    std::vector<double> e(x.size(), 0.0);
    const tensor_type at = active_kernels(weight_type)->vec_dot_type;
    const size_t block = at == tensor_type::q8_k ? 256 : 32;
    for (size_t i = 0; i < x.size(); ++i) {
        if (at == tensor_type::f16) e[i] = std::fabs(x[i]) * 0x1p-11;
        if (at == tensor_type::bf16) e[i] = std::fabs(x[i]) * 0x1p-8;
    }
    if (at == tensor_type::q8_0 || at == tensor_type::q8_1 || at == tensor_type::q8_k) {
        for (size_t b = 0; b < x.size(); b += block) {
            double amax = 0;
            for (size_t j = 0; j < block; ++j) amax = std::max(amax, double(std::fabs(x[b + j])));
            const double d = amax / 127;
            // Q8_0 and Q8_1 store d as f16: 127 codes times its 2^-11 relative rounding.
            const double bound = at == tensor_type::q8_k ? d * 0.5 * (1 + 1e-6) : d * (0.5 + 127 * 0x1p-11);
            for (size_t j = 0; j < block; ++j) e[b + j] = bound;
        }
    }
    return e;
}

// Q5_1's offset is dotted through Q8_1's s = f16(d * sum(q)) with the unrounded d:
// besides the codes' rounding, s is off by at most |sum(q)| * d * 2^-10 from the
// stored d times the codes' sum, weighted by the block's offset (at most its largest
// |value|). Zero for the other activation formats.
double offset_rounding_bound(tensor_type weight_type, const std::vector<float> & w_decoded,
                             const std::vector<float> & x) {
    if (active_kernels(weight_type)->vec_dot_type != tensor_type::q8_1) return 0.0;
    double bound = 0;
    for (size_t b = 0; b < x.size(); b += 32) {
        double w_max = 0, x_abs = 0;
        for (size_t j = 0; j < 32; ++j) {
            w_max = std::max(w_max, double(std::fabs(w_decoded[b + j])));
            x_abs += std::fabs(x[b + j]);
        }
        bound += w_max * x_abs * 0x1p-10 * 1.01;
    }
    return bound;
}

class vec_dot_per_type : public ::testing::TestWithParam<tensor_type> {};

// The dot product of the encoded rows equals the dot product of their decoded values
// up to float rounding: pins the integer arithmetic (nibble pairing, bsums, mins) to
// the decoders, which block_layout_test pins to the format.
TEST_P(vec_dot_per_type, EqualsDotOfDecodedRows) {
    const tensor_type t = GetParam();
    const vec_dot_fn vec_dot = active_kernels(t)->vec_dot;
    const tensor_type at = active_kernels(t)->vec_dot_type;
    for (int64_t n : {256, 1024, 4096}) {
        for (uint64_t seed = 0; seed < 5; ++seed) {
            const auto w = encode(t, random_row(n, 100 + seed, 0.05f));
            const auto a = encode_activation(t, random_row(n, 200 + seed));
            const auto wd = decode(t, w, n);
            const auto ad = decode(at, a, n);
            double exact = 0, abs_sum = 0, a_abs_sum = 0, w_max = 0;
            for (int64_t i = 0; i < n; ++i) {
                exact += double(wd[i]) * ad[i];
                abs_sum += std::fabs(double(wd[i]) * ad[i]);
                a_abs_sum += std::fabs(ad[i]);
                w_max = std::max(w_max, double(std::fabs(wd[i])));
            }
            const float got = vec_dot(w.data(), a.data(), n);
            // f32 rounding: at most ~n/8 accumulation steps per lane (float types) or per
            // block partial products and sums (quantized types, whose scale and min
            // parts are each at most about max|w| * sum|a|).
            const double bound = 2e-5 * (abs_sum + w_max * a_abs_sum) * (double(n) / 1024 + 1) +
                                 offset_rounding_bound(t, wd, ad);
            EXPECT_NEAR(got, exact, bound) << "n " << n << " seed " << seed;
        }
    }
}

// Against the unconverted f32 activations, the only extra error is the activation
// rounding, which each value's worst case bounds.
TEST_P(vec_dot_per_type, ErrorAgainstF32ActivationsIsBoundedByActivationRounding) {
    const tensor_type t = GetParam();
    const vec_dot_fn vec_dot = active_kernels(t)->vec_dot;
    const int64_t n = 2048;
    for (uint64_t seed = 0; seed < 5; ++seed) {
        const auto w = encode(t, random_row(n, 300 + seed, 0.05f));
        const auto x = random_row(n, 400 + seed);
        const auto wd = decode(t, w, n);
        const auto e = activation_error_bound(t, x);
        double exact = 0, bound = 0, abs_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            exact += double(wd[i]) * x[i];
            bound += std::fabs(wd[i]) * e[i];
            abs_sum += std::fabs(double(wd[i]) * x[i]);
        }
        bound += offset_rounding_bound(t, wd, x);
        const float got = vec_dot(w.data(), encode_activation(t, x).data(), n);
        EXPECT_NEAR(got, exact, bound + 1e-4 * abs_sum) << "seed " << seed;
        if (t != tensor_type::f32) {
            EXPECT_GT(bound, 0.0);
        }
    }
}

TEST_P(vec_dot_per_type, ResultDoesNotDependOnAlignment) {
    const tensor_type t = GetParam();
    const vec_dot_fn vec_dot = active_kernels(t)->vec_dot;
    const int64_t n = 512;
    const auto w = encode(t, random_row(n, 7, 0.05f));
    const auto a = encode_activation(t, random_row(n, 8));
    const float aligned = vec_dot(w.data(), a.data(), n);
    for (size_t shift : {1u, 2u, 3u}) {
        std::vector<uint8_t> w2(w.size() + shift), a2(a.size() + shift);
        std::memcpy(w2.data() + shift, w.data(), w.size());
        std::memcpy(a2.data() + shift, a.data(), a.size());
        const float shifted = vec_dot(w2.data() + shift, a2.data() + shift, n);
        EXPECT_EQ(std::memcmp(&aligned, &shifted, sizeof(float)), 0) << "shift " << shift;
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, vec_dot_per_type, ::testing::ValuesIn(testing::weight_types()),
                         [](const auto & p) { return testing::type_param_name(p.param); });

}  // namespace
}  // namespace skippy::kernels
