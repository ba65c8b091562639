// Element-wise kernels with AVX2: exp_approx.h's sequence on eight lanes, operation for
// operation as vector_math.cpp's scalar reference writes it, so the bits are the same.
#include "kernels/avx2_util.h"
#include "kernels/exp_approx.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

inline __m256 exp_approx(__m256 x) {
    const __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(k_exp_max));  // NaN lanes are fixed below
    const __m256 fx = _mm256_mul_ps(xc, _mm256_set1_ps(k_log2e));
    const __m256 n = _mm256_sub_ps(_mm256_add_ps(fx, _mm256_set1_ps(k_round_magic)), _mm256_set1_ps(k_round_magic));
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(k_ln2_hi)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(k_ln2_lo)));
    __m256 p = _mm256_mul_ps(_mm256_set1_ps(k_p0), r);
    p = _mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(k_p1)), r);
    p = _mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(k_p2)), r);
    p = _mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(k_p3)), r);
    p = _mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(k_p4)), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(k_p5));
    __m256 y = _mm256_mul_ps(p, _mm256_mul_ps(r, r));
    y = _mm256_add_ps(_mm256_add_ps(y, r), _mm256_set1_ps(1.0f));
    // n is a whole number in [-126, 127] on the lanes kept: its exact int conversion.
    const __m256i scale_bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(scale_bits));
    result = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(k_exp_min), _CMP_LT_OQ), result);  // below range: 0
    return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));                      // NaN: x
}

}  // namespace

void exp_shifted(const float * x, float shift, float * y, int64_t n) {
    const __m256 s = _mm256_set1_ps(shift);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_approx(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    if (i < n) {  // the last n % 8 values, through a zero-padded lane buffer
        const size_t m_bytes = static_cast<size_t>(n - i) * sizeof(float);
        alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(buf, x + i, m_bytes);
        _mm256_store_ps(buf, exp_approx(_mm256_sub_ps(_mm256_load_ps(buf), s)));
        std::memcpy(y + i, buf, m_bytes);
    }
}

void swiglu(const float * gate, const float * up, float * out, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 one = _mm256_set1_ps(1.0f);
    auto eight = [&](__m256 g, __m256 u) {
        const __m256 e = exp_approx(_mm256_xor_ps(g, sign));
        return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
    };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, eight(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const size_t m_bytes = static_cast<size_t>(n - i) * sizeof(float);
        alignas(32) float g[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        alignas(32) float u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(g, gate + i, m_bytes);
        std::memcpy(u, up + i, m_bytes);
        _mm256_store_ps(g, eight(_mm256_load_ps(g), _mm256_load_ps(u)));
        std::memcpy(out + i, g, m_bytes);
    }
}

}  // namespace skippy::kernels::avx2
