// base/fp16.h: f16 and bf16 conversions, checked exhaustively where the space allows
// and against an independent nearest-value search elsewhere.
#include "base/fp16.h"

#include "kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace skippy {
namespace {

bool is_f16_nan(f16_bits h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Value of a finite f16 pattern from the IEEE definition, in double.
double f16_value_reference(f16_bits h) {
    const int sign = (h >> 15) ? -1 : 1;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
    return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

// Round-to-nearest-even f32 -> f16 by searching the (monotonic) table of positive f16
// values and comparing with the exact midpoints, written independently of fp16.h.
f16_bits f32_to_f16_reference(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65520.0) return sign | 0x7c00;  // at or past the midpoint of 65504 and 2^16
    uint16_t lo = 0, hi = 0x7bff;            // largest h with value(h) <= a
    while (lo < hi) {
        const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
        if (f16_value_reference(mid) <= a) lo = mid; else hi = static_cast<uint16_t>(mid - 1);
    }
    if (f16_value_reference(lo) == a || lo == 0x7bff) return sign | lo;
    const double midpoint = (f16_value_reference(lo) + f16_value_reference(static_cast<f16_bits>(lo + 1))) / 2;
    uint16_t h = lo;
    if (a > midpoint || (a == midpoint && (lo & 1))) ++h;
    return static_cast<f16_bits>(sign | h);
}

TEST(kernels_fp16, EveryHalfPatternConvertsToItsIeeeValue) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<f16_bits>(h));
        if (is_f16_nan(static_cast<f16_bits>(h))) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << h;
        } else if ((h & 0x7fffu) == 0x7c00u) {
            EXPECT_TRUE(std::isinf(f) && std::signbit(f) == bool(h & 0x8000u)) << std::hex << h;
        } else {
            EXPECT_EQ(static_cast<double>(f), f16_value_reference(static_cast<f16_bits>(h))) << std::hex << h;
            EXPECT_EQ(std::signbit(f), bool(h & 0x8000u)) << std::hex << h;
        }
    }
}

TEST(kernels_fp16, EveryHalfPatternRoundTripsThroughF32) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const auto bits = static_cast<f16_bits>(h);
        const f16_bits back = f32_to_f16(f16_to_f32(bits));
        if (is_f16_nan(bits)) {
            // NaNs stay NaN with their sign; a signalling NaN comes back quiet.
            EXPECT_TRUE(is_f16_nan(back)) << std::hex << h;
            EXPECT_EQ(back, bits | 0x200u) << std::hex << h;
        } else {
            EXPECT_EQ(back, bits) << std::hex << h;
        }
    }
}

TEST(kernels_fp16, RoundsTiesToEven) {
    EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);                // halfway, even below
    EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);            // halfway, even above
    EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);     // just past halfway
    EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f - 0x1p-20f), 0x3c00);     // just short of it
    EXPECT_EQ(f32_to_f16(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
    EXPECT_EQ(f32_to_f16(2047.0f + 0.5f), 0x6800);                 // 2048 (carry into exponent)
}

TEST(kernels_fp16, OverflowsToInfinityPastTheLargestHalf) {
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // below the midpoint to 2^16
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // the midpoint: ties to even = 2^16 = inf
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
    EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_TRUE(is_f16_nan(f32_to_f16(NAN)));
    EXPECT_TRUE(is_f16_nan(f32_to_f16(-NAN)));
}

TEST(kernels_fp16, EncodesSubnormalsAndUnderflow) {
    EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);              // smallest subnormal
    EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);              // tie between 0 and 1: even
    EXPECT_EQ(f32_to_f16(0x1p-25f * 1.0001f), 0x0001);
    EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);          // tie between 1 and 2: even
    EXPECT_EQ(f32_to_f16(1023 * 0x1p-24f), 0x03ff);       // largest subnormal
    EXPECT_EQ(f32_to_f16(1023.5f * 0x1p-24f), 0x0400);    // tie into the smallest normal
    EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);
    EXPECT_EQ(f32_to_f16(-0x1p-24f), 0x8001);
    EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(0x1p-149f), 0x0000);             // f32 subnormal
}

TEST(kernels_fp16, MatchesNearestValueSearchOnMidpointsAndSampledFloats) {
    std::vector<float> inputs;
    // Every midpoint between neighbouring positive halves, and the floats either side.
    for (uint32_t h = 0; h < 0x7bff; ++h) {
        const double mid = (f16_value_reference(static_cast<f16_bits>(h)) +
                            f16_value_reference(static_cast<f16_bits>(h + 1))) / 2;
        const float m = static_cast<float>(mid);  // exact: one bit more than a half
        inputs.push_back(m);
        inputs.push_back(std::nextafter(m, 0.0f));
        inputs.push_back(std::nextafter(m, INFINITY));
    }
    // A spread of all f32 bit patterns.
    for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 4099) {
        inputs.push_back(bits_to_float(static_cast<uint32_t>(bits)));
    }
    kernels::testing::rng r(7);
    for (int i = 0; i < 200000; ++i) inputs.push_back(bits_to_float(r.next_u32()));

    for (float f : inputs) {
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_f16(f), f32_to_f16_reference(f)) << std::hexfloat << f;
        ASSERT_EQ(f32_to_f16(-f), f32_to_f16_reference(-f)) << std::hexfloat << -f;
    }
}

TEST(kernels_fp16, NanPayloadIsKeptAndMadeQuiet) {
    EXPECT_EQ(f32_to_f16(bits_to_float(0x7fc00000u)), 0x7e00);
    EXPECT_EQ(f32_to_f16(bits_to_float(0xffc02000u)), 0xfe01);
    EXPECT_EQ(f32_to_f16(bits_to_float(0x7f800001u)), 0x7e00);  // signalling, low payload
}

TEST(kernels_bf16, EveryPatternRoundTripsThroughF32) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float f = bf16_to_f32(static_cast<bf16_bits>(b));
        EXPECT_EQ(float_to_bits(f), b << 16);
        const bf16_bits back = f32_to_bf16(f);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << b;
            EXPECT_EQ(back & 0x8000u, b & 0x8000u);
        } else {
            EXPECT_EQ(back, b) << std::hex << b;
        }
    }
}

TEST(kernels_bf16, RoundsTiesToEvenAndOverflowsToInfinity) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);              // tie, even below
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);          // tie, even above
    EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    EXPECT_EQ(f32_to_bf16(-1.5f), 0xbfc0);
    EXPECT_EQ(f32_to_bf16(3.4028235e38f), 0x7f80);  // FLT_MAX rounds up to inf
    EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
    const bf16_bits nan = f32_to_bf16(bits_to_float(0x7f800001u));  // signalling NaN
    EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));                       // not truncated to inf
    EXPECT_EQ(nan & 0x0040u, 0x0040u);                               // quiet
}

}  // namespace
}  // namespace skippy
