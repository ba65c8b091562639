// IEEE half (f16) and bfloat16 conversions, bit-exact and portable.
//
// f32 -> f16 rounds to nearest even (as F16C's _cvtps_ph with rounding mode 0 does,
// NaN payloads included);
// f32 -> bf16 rounds to nearest even and keeps NaNs quiet (as ggml does).
#pragma once

#include <cstdint>
#include <cstring>

namespace skippy {

using f16_bits  = uint16_t;
using bf16_bits = uint16_t;

inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float f16_to_f32(f16_bits h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp  = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return bits_to_float(sign);
        // subnormal: value = mant * 2^-24
        float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline f16_bits f32_to_f16(float f) {
    const uint32_t x    = float_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or nan
        // A NaN stays a NaN: quiet bit set, top of the payload kept (as F16C does), so
        // quiet f16 NaNs round-trip through f32 unchanged.
        if (absx == 0x7f800000u) return static_cast<f16_bits>(sign | 0x7c00u);
        return static_cast<f16_bits>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    }
    if (absx >= 0x477ff000u) {  // rounds to >= 65536: overflow to inf
        return static_cast<f16_bits>(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        // value / 2^-24, rounded to nearest even, via float arithmetic on exact scaling
        const float scaled = bits_to_float(absx) * 16777216.0f;  // exact: power of two
        // round half to even
        uint32_t q = static_cast<uint32_t>(scaled);
        const float rem = scaled - static_cast<float>(q);
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
        return static_cast<f16_bits>(sign | q);
    }
    // normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even
    uint32_t h = ((absx - 0x38000000u) >> 13);
    const uint32_t rest = absx & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<f16_bits>(sign | h);
}

inline float bf16_to_f32(bf16_bits b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline bf16_bits f32_to_bf16(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 64u);  // quiet nan
    return static_cast<bf16_bits>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// Rounds through f16 and back: the value a f16 KV cache would store.
inline float round_to_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

}  // namespace skippy
