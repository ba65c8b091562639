// Element-wise kernels with AVX-512: avx2_math.cpp's exp_approx sequence on sixteen
// lanes, operation for operation as vector_math.cpp's scalar reference writes it, so the
// bits are the same. Tails go through masked loads and stores (the masked-off lanes
// compute on zeros and are never written).
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_util.h"
#include "kernels/exp_approx.h"

namespace skippy::kernels::avx512 {
namespace {

inline __m512 exp_approx(__m512 x) {
    const __m512 xc = _mm512_min_ps(x, _mm512_set1_ps(k_exp_max));  // NaN lanes are fixed below
    const __m512 fx = _mm512_mul_ps(xc, _mm512_set1_ps(k_log2e));
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(fx, _mm512_set1_ps(k_round_magic)), _mm512_set1_ps(k_round_magic));
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(k_ln2_hi)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(k_ln2_lo)));
    __m512 p = _mm512_mul_ps(_mm512_set1_ps(k_p0), r);
    p = _mm512_mul_ps(_mm512_add_ps(p, _mm512_set1_ps(k_p1)), r);
    p = _mm512_mul_ps(_mm512_add_ps(p, _mm512_set1_ps(k_p2)), r);
    p = _mm512_mul_ps(_mm512_add_ps(p, _mm512_set1_ps(k_p3)), r);
    p = _mm512_mul_ps(_mm512_add_ps(p, _mm512_set1_ps(k_p4)), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(k_p5));
    __m512 y = _mm512_mul_ps(p, _mm512_mul_ps(r, r));
    y = _mm512_add_ps(_mm512_add_ps(y, r), _mm512_set1_ps(1.0f));
    // n is a whole number in [-126, 127] on the lanes kept: its exact int conversion.
    const __m512i scale_bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 result = _mm512_mul_ps(y, _mm512_castsi512_ps(scale_bits));
    const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(k_exp_min), _CMP_LT_OQ);
    result = _mm512_mask_mov_ps(result, below, _mm512_setzero_ps());  // below range: 0
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(result, nan, x);  // NaN: x
}

inline __mmask16 tail_mask(int64_t m) { return static_cast<__mmask16>((1u << m) - 1u); }

}  // namespace

void exp_shifted(const float * x, float shift, float * y, int64_t n) {
    const __m512 s = _mm512_set1_ps(shift);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_approx(_mm512_sub_ps(_mm512_loadu_ps(x + i), s)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, exp_approx(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), s)));
    }
}

// Rows in fours, their vectors interleaved: four independent chains of exp_approx.
void exp_shifted_rows(const float * x, int64_t x_stride, const float * shifts, int32_t n_rows, float * y, int64_t y_stride,
                      int64_t n) {
    int32_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const float * xr[4] = {x + r * x_stride, x + (r + 1) * x_stride, x + (r + 2) * x_stride, x + (r + 3) * x_stride};
        float * yr[4] = {y + r * y_stride, y + (r + 1) * y_stride, y + (r + 2) * y_stride, y + (r + 3) * y_stride};
        __m512 s[4];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) s[k] = _mm512_set1_ps(shifts[r + k]);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(n - i);
            __m512 v[4];
            #pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) v[k] = exp_approx(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr[k] + i), s[k]));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) _mm512_mask_storeu_ps(yr[k] + i, m, v[k]);
        }
    }
    for (; r < n_rows; ++r) exp_shifted(x + r * x_stride, shifts[r], y + r * y_stride, n);
}

void swiglu(const float * gate, const float * up, float * out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    auto sixteen = [&](__m512 g, __m512 u) {
        const __m512 e = exp_approx(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))));
        return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u);
    };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, sixteen(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(out + i, k, sixteen(_mm512_maskz_loadu_ps(k, gate + i), _mm512_maskz_loadu_ps(k, up + i)));
    }
}

}  // namespace skippy::kernels::avx512
