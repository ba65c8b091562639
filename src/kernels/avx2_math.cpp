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

// Two passes: the largest value (vmaxps keeps its second operand, the running maximum,
// when the new value is a NaN, so NaNs are never taken), then its first index (equal
// compares -0 and +0 equal, as the reference's > does). The reference's loop ends on
// the first index of the largest non-NaN value, which is the same index.
int64_t argmax_first(const float * x, int64_t n) {
    if (x[0] != x[0]) return 0;  // nothing compares greater than a NaN at index 0
    __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
    float m = lanes[0];
    for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    const __m256 mv = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), mv, _CMP_EQ_OQ));
        if (hits != 0) return j + __builtin_ctz(static_cast<unsigned>(hits));
    }
    for (; j < n; ++j) {
        if (x[j] == m) return j;
    }
    return 0;  // not reached: m is one of the values
}

// x - x is +0 for a finite x and NaN for an infinity or a NaN.
bool all_finite(const float * x, int64_t n) {
    __m256 bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 d = _mm256_sub_ps(v, v);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
    for (; i < n; ++i) {
        if (x[i] - x[i] != 0.0f) return false;
    }
    return true;
}

}  // namespace skippy::kernels::avx2
