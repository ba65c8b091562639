// Code -> value tables of the non-linear 4-bit formats (internal to kernels).
//
// Data only, with internal linkage, so the AVX2 files may include it (avx2_util.h's
// linkage rule is about code).
#pragma once

#include <cstdint>

namespace skippy::kernels {
namespace {

// IQ4_NL and IQ4_XS: the 16 levels (ascending, denser near zero) as the GGUF/ggml
// format defines them; a value is the block scale times one of these.
constexpr int8_t k_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// MXFP4 (OCP microscaling, E2M1 elements): codes 0-7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6 and
// codes 8-15 the same magnitudes negated, here doubled to integers; the block scale
// 2^(e - 128) takes the factor 1/2 back.
constexpr int8_t k_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The bits of 2^(e - 128) as an f32, for an E8M0 exponent e: normal for e >= 2, the
// subnormals 2^-128 and 2^-127 for e = 0 and 1. (ggml reads e = 255, the OCP NaN,
// as 2^127; so do we.)
constexpr uint32_t mxfp4_scale_bits(uint8_t e) {
    return e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
}

}  // namespace
}  // namespace skippy::kernels
