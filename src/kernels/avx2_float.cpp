// F32, F16 and BF16 rows with AVX2 + F16C: dot products, tiles, activation encoders.
//
// The reference (quants_float.cpp) keeps eight partial sums, element i in lane i % 8,
// each step a rounded multiply then a rounded add, and combines them with hsum_fixed.
// One __m256 accumulator per output does exactly that, so every result here is the
// reference's, bit for bit. A tile of R rows x T tokens keeps R * T accumulators and
// converts each loaded row chunk once for T tokens. (An FMA would be faster but would
// round differently from the reference and from every other path.)
#include "kernels/avx2_util.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct f32_elems {
    static constexpr size_t elem_bytes = 4;
    static __m256 load8(const uint8_t * p) { return _mm256_loadu_ps(reinterpret_cast<const float *>(p)); }
    // m < 8 elements; the others read as 0 (masked loads never touch memory past the row).
    static __m256 load_tail(const uint8_t * p, int64_t m) {
        return _mm256_maskload_ps(reinterpret_cast<const float *>(p), lane_mask(m));
    }
};

struct f16_elems {
    static constexpr size_t elem_bytes = 2;
    static __m256 load8(const uint8_t * p) { return _mm256_cvtph_ps(loadu_128(p)); }
    static __m256 load_tail(const uint8_t * p, int64_t m) {
        alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(h, p, static_cast<size_t>(m) * 2);
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(h)));
    }
};

struct bf16_elems {
    static constexpr size_t elem_bytes = 2;
    static __m256 widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
    static __m256 load8(const uint8_t * p) { return widen(loadu_128(p)); }
    static __m256 load_tail(const uint8_t * p, int64_t m) {
        alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(h, p, static_cast<size_t>(m) * 2);
        return widen(_mm_load_si128(reinterpret_cast<const __m128i *>(h)));
    }
};

// y[t * y_stride + r] for R rows and T tokens. Weights and activations share one
// element type (the vec_dot_type of F32/F16/BF16 is the type itself).
template <typename E, int R, int T>
void dot_tile(const uint8_t * w, size_t w_row_bytes, const uint8_t * x, size_t x_row_bytes, int64_t n, float * y,
              int64_t y_stride) {
    __m256 acc[R][T];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const size_t off = static_cast<size_t>(i) * E::elem_bytes;
        __m256 xv[T];
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) xv[t] = E::load8(x + t * x_row_bytes + off);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 wv = E::load8(w + r * w_row_bytes + off);
            #pragma GCC unroll 8
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_mul_ps(wv, xv[t]));
        }
    }
    if (i < n) {
        // The last n % 8 elements go to lanes 0 .. n % 8 - 1, as in the reference; the
        // other lanes keep their value exactly (a blend, not an add of zero, which
        // would turn -0 into +0).
        const int64_t m = n - i;
        const size_t off = static_cast<size_t>(i) * E::elem_bytes;
        const __m256 keep = _mm256_castsi256_ps(lane_mask(m));
        __m256 xv[T];
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) xv[t] = E::load_tail(x + t * x_row_bytes + off, m);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 wv = E::load_tail(w + r * w_row_bytes + off, m);
            #pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                acc[r][t] = _mm256_blendv_ps(acc[r][t], _mm256_add_ps(acc[r][t], _mm256_mul_ps(wv, xv[t])), keep);
            }
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) y[t * y_stride + r] = hsum_fixed(acc[r][t]);
    }
}

// Tiles of up to 4 rows x 2 tokens: 8 accumulators, 2 activation vectors and a weight
// vector stay in registers.
constexpr int64_t k_tile_rows = 4;
constexpr int64_t k_tile_tokens = 2;

template <typename E>
void mul_tile_float(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                    int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    for (int64_t r = 0; r < n_rows; r += k_tile_rows) {
        const int64_t rc = n_rows - r < k_tile_rows ? n_rows - r : k_tile_rows;
        const uint8_t * wr = w + static_cast<size_t>(r) * w_row_bytes;
        for (int64_t t = 0; t < n_tokens; t += k_tile_tokens) {
            const int64_t tc = n_tokens - t < k_tile_tokens ? n_tokens - t : k_tile_tokens;
            const uint8_t * xt = xq + static_cast<size_t>(t) * xq_row_bytes;
            float * yt = y + t * y_stride + r;
            switch (rc * 10 + tc) {
                case 42: dot_tile<E, 4, 2>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 41: dot_tile<E, 4, 1>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 32: dot_tile<E, 3, 2>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 31: dot_tile<E, 3, 1>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 22: dot_tile<E, 2, 2>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 21: dot_tile<E, 2, 1>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                case 12: dot_tile<E, 1, 2>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
                default: dot_tile<E, 1, 1>(wr, w_row_bytes, xt, xq_row_bytes, n, yt, y_stride); break;
            }
        }
    }
}

template <typename E>
float vec_dot_float(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float y = 0.0f;
    dot_tile<E, 1, 1>(w_row, 0, x_row, 0, n, &y, 1);
    return y;
}

// Scalar tail of from_float_bf16, the same integer steps as base/fp16.h (not included
// here: see the linkage rule in avx2_util.h).
uint16_t bf16_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

__m256i bf16_of(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    return _mm256_blendv_epi8(rounded, quiet, nan);
}

// y stays in registers across the rows, 32 values at a time; each value still sees
// the rows in order, one rounded multiply and one rounded add each.
template <typename E>
void add_scaled(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 acc[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) acc[k] = _mm256_loadu_ps(y + i + 8 * k);
        for (int64_t r = 0; r < n_rows; ++r) {
            const __m256 ar = _mm256_set1_ps(a[r]);
            const uint8_t * x = rows + r * row_stride_bytes + static_cast<size_t>(i) * E::elem_bytes;
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(ar, E::load8(x + 8 * k * E::elem_bytes)));
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) _mm256_storeu_ps(y + i + 8 * k, acc[k]);
    }
    for (; i < n; i += 8) {
        const int64_t m = n - i < 8 ? n - i : 8;
        alignas(32) float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(part, y + i, static_cast<size_t>(m) * sizeof(float));
        __m256 acc = _mm256_load_ps(part);
        for (int64_t r = 0; r < n_rows; ++r) {
            const uint8_t * x = rows + r * row_stride_bytes + static_cast<size_t>(i) * E::elem_bytes;
            const __m256 v = m == 8 ? E::load8(x) : E::load_tail(x, m);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(a[r]), v));
        }
        _mm256_store_ps(part, acc);
        std::memcpy(y + i, part, static_cast<size_t>(m) * sizeof(float));
    }
}

}  // namespace

float vec_dot_f32(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return vec_dot_float<f32_elems>(w_row, x_row, n); }
float vec_dot_f16(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return vec_dot_float<f16_elems>(w_row, x_row, n); }
float vec_dot_bf16(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return vec_dot_float<bf16_elems>(w_row, x_row, n); }

void mul_tile_f32(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_float<f32_elems>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

void mul_tile_f16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_float<f16_elems>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

void mul_tile_bf16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_float<bf16_elems>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

// F16C rounds to nearest even and keeps NaN payloads as base/fp16.h's f32_to_f16 does.
void from_float_f16(const float * src, uint8_t * dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    }
    for (; i < n; ++i) {
        const uint16_t h = _cvtss_sh(src[i], 0);
        std::memcpy(dst + 2 * i, &h, 2);
    }
}

void from_float_bf16(const float * src, uint8_t * dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i lo = bf16_of(_mm256_loadu_ps(src + i));
        const __m256i hi = bf16_of(_mm256_loadu_ps(src + i + 8));
        // packus works within 128-bit halves: [lo 0-3, hi 0-3 | lo 4-7, hi 4-7].
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + 2 * i), packed);
    }
    for (; i < n; ++i) {
        const uint16_t b = bf16_of(src[i]);
        std::memcpy(dst + 2 * i, &b, 2);
    }
}

void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    add_scaled<f32_elems>(a, rows, row_stride_bytes, n_rows, y, n);
}
void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    add_scaled<f16_elems>(a, rows, row_stride_bytes, n_rows, y, n);
}

}  // namespace skippy::kernels::avx2
