// F32 and F16 add_scaled with AVX-512 (attention's weighted sum of values), and the
// F16 encoder (queries and the KV cache's keys and values).
//
// add_scaled is element-wise (y[i] = y[i] + a[r] * row_r[i], rows in order, each
// product rounded, then each sum), so 16 elements per vector change nothing in any
// element's operations. The F32/F16/BF16 dot products stay on AVX2: the reference's
// eight partial sums (element i in lane i % 8) make one output eight lanes wide, and
// two outputs per zmm (one row against two tokens) measured slower than AVX2 on
// attention's short rows (BM_dot_rows_f16: 265 vs 209 ns).
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_util.h"

namespace skippy::kernels::avx512 {
namespace {

struct f32_elems {
    static constexpr size_t elem_bytes = 4;
    static const float * f(const uint8_t * p) { return reinterpret_cast<const float *>(p); }
    static __m512 load16(const uint8_t * p) { return _mm512_loadu_ps(f(p)); }
    // m < 16 elements; the others read as 0 (masked loads never touch memory past the row).
    static __m512 load_tail(const uint8_t * p, int64_t m) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1u), f(p)); }
};

// F16 elements widened to f32 exactly.
struct f16_elems {
    static constexpr size_t elem_bytes = 2;
    static __m512 load16(const uint8_t * p) { return _mm512_cvtph_ps(loadu_256(p)); }
    static __m512 load_tail(const uint8_t * p, int64_t m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << m) - 1u), p));
    }
};

// y stays in registers across the rows, 64 values at a time; each value still sees the
// rows in order, one rounded multiply and one rounded add each.
template <typename E>
void add_scaled(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 acc[4];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) acc[k] = _mm512_loadu_ps(y + i + 16 * k);
        for (int64_t r = 0; r < n_rows; ++r) {
            const __m512 ar = _mm512_set1_ps(a[r]);
            const uint8_t * x = rows + r * row_stride_bytes + static_cast<size_t>(i) * E::elem_bytes;
            #pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(ar, E::load16(x + 16 * k * E::elem_bytes)));
        }
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) _mm512_storeu_ps(y + i + 16 * k, acc[k]);
    }
    for (; i < n; i += 16) {
        const int64_t m = n - i < 16 ? n - i : 16;
        const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1u);
        __m512 acc = _mm512_maskz_loadu_ps(lanes, y + i);
        for (int64_t r = 0; r < n_rows; ++r) {
            const uint8_t * x = rows + r * row_stride_bytes + static_cast<size_t>(i) * E::elem_bytes;
            const __m512 v = m == 16 ? E::load16(x) : E::load_tail(x, m);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(a[r]), v));
        }
        _mm512_mask_storeu_ps(y + i, lanes, acc);
    }
}

}  // namespace

// F16C rounds to nearest even and keeps NaN payloads as base/fp16.h's f32_to_f16 does
// (the AVX2 encoder's conversion, 16 values per instruction); masked tails.
void from_float_f16(const float * src, uint8_t * dst, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i h0 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), 0);
        const __m256i h1 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), 0);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 2 * i), h0);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 2 * i + 32), h1);
    }
    for (; i < n; i += 16) {
        const int64_t m = n - i < 16 ? n - i : 16;
        const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1u);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(lanes, src + i), 0);
        _mm256_mask_storeu_epi16(dst + 2 * i, lanes, h);
    }
}

void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    add_scaled<f32_elems>(a, rows, row_stride_bytes, n_rows, y, n);
}

void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    add_scaled<f16_elems>(a, rows, row_stride_bytes, n_rows, y, n);
}

}  // namespace skippy::kernels::avx512
