// Float -> integer rounding helpers shared by the quantizers (internal to kernels).
#pragma once

#include "base/fp16.h"

#include <cmath>
#include <cstdint>

namespace skippy::kernels {

// Nearest integer, ties to even: the rounding ggml's quantizers use (nearest_int) and
// that the FPU / _mm256_round_ps apply by default. Adding 1.5 * 2^23 pushes the
// fraction out of the mantissa, so the hardware rounds for us; the integer sits in
// the low 23 bits. Exact for |v| < 2^22; NaN gives 0 and larger values give garbage
// (never undefined behaviour), which callers clamp.
inline int32_t round_nearest_even(float v) {
    const float shifted = v + 12582912.0f;
    return static_cast<int32_t>(float_to_bits(shifted) & 0x007fffffu) - 0x00400000;
}

// Nearest integer, ties away from zero (C's roundf), clamped to [lo, hi]; NaN gives 0.
inline int32_t round_away_clamped(float v, int32_t lo, int32_t hi) {
    const float r = std::round(v);
    if (!(r >= static_cast<float>(lo))) return std::isnan(r) ? 0 : lo;
    if (r > static_cast<float>(hi)) return hi;
    return static_cast<int32_t>(r);
}

inline int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The f16 nearest to v >= 0, moved up one step if that is below v: the stored scale
// is then never smaller than the one computed, so encoders that rely on it to cover
// a range do not clip. REQUIRES: v >= 0 and finite.
inline f16_bits f32_to_f16_not_below(float v) {
    f16_bits h = f32_to_f16(v);
    if (f16_to_f32(h) < v && h < 0x7c00u) ++h;
    return h;
}

// ceil(v) for v in [0, hi], clamped to hi; NaN gives 0.
inline int32_t ceil_clamped(float v, int32_t hi) {
    if (!(v > 0.0f)) return 0;
    if (v >= static_cast<float>(hi)) return hi;
    return static_cast<int32_t>(std::ceil(v));
}

}  // namespace skippy::kernels
