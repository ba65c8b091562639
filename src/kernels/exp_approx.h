// The exp approximation shared by the scalar and AVX2 element-wise kernels (internal to
// kernels). Constants only: each implementation writes the same operation sequence,
// each operation rounded on its own (never fused), so both give the same bits.
//
//   exp(x), for x in [k_exp_min, k_exp_max]:
//     n = nearest-even(x * log2(e))                 (via + 1.5 * 2^23, - 1.5 * 2^23)
//     r = (x - n * k_ln2_hi) - n * k_ln2_lo          (k_ln2_hi * n is exact)
//     p = ((((k_p0 * r + k_p1) * r + k_p2) * r + k_p3) * r + k_p4) * r + k_p5
//     exp(x) = (((p * (r * r)) + r) + 1) * 2^n        (2^n built from its bits)
//   x < k_exp_min gives 0 (exp(-inf) = 0 included), x > k_exp_max is taken as
//   k_exp_max (about 2.1e38), NaN gives NaN (x itself).
// Relative error about 2e-7 (the polynomial is Cephes' expf minimax fit).
#pragma once

namespace skippy::kernels {

inline constexpr float k_exp_min = -87.33654f;  // 2^n stays a normal float
inline constexpr float k_exp_max = 88.3f;       // n <= 127
inline constexpr float k_log2e = 1.44269504088896341f;
inline constexpr float k_round_magic = 12582912.0f;  // 1.5 * 2^23
inline constexpr float k_ln2_hi = 0.693359375f;
inline constexpr float k_ln2_lo = -2.12194440e-4f;
inline constexpr float k_p0 = 1.9875691500e-4f;
inline constexpr float k_p1 = 1.3981999507e-3f;
inline constexpr float k_p2 = 8.3334519073e-3f;
inline constexpr float k_p3 = 4.1665795894e-2f;
inline constexpr float k_p4 = 1.6666665459e-1f;
inline constexpr float k_p5 = 5.0000001201e-1f;

}  // namespace skippy::kernels
