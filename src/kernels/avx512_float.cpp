// F32 and F16 add_scaled with AVX-512 (attention's weighted sum of values), and the
// F16 encoder (queries and the KV cache's keys and values).
//
// add_scaled is element-wise (y[i] = y[i] + a[r] * row_r[i], rows in order, each
// product rounded, then each sum), so 16 elements per vector change nothing in any
// element's operations.
//
// F16 products (mul_tile_f16: attention's scores over an f16 KV cache, F16 weights):
// the reference's eight partial sums (element i in lane i % 8) make one output eight
// lanes wide, so a vector holds two outputs — two rows against one token, the token's
// eight values broadcast to both halves — and a tile of 8 rows x 4 tokens keeps 16
// such vectors. The 16 outputs of 8 vectors are then combined together by shuffles in
// the reference's order ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), instead
// of one horizontal sum each. (An earlier try, two tokens against one row per vector
// with one horizontal sum per output, measured slower than AVX2.) F16's vec_dot (one
// output) and the F32 and BF16 products stay on AVX2.
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

// Four heads' weights against the same rows, 64 values of each head at a time (16
// accumulators): a row's 64 values are loaded (and widened) once for the four heads
// instead of once per head. Each value still sees the rows in order, one rounded
// multiply and one rounded add each, as in add_scaled. Attention (4 query heads per KV
// head, f16 KV), bench-200m at a 3,072-token prompt: prefill 1.07-1.09x, AMD EPYC Zen 4.
template <typename E>
void add_scaled_heads(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows, size_t row_stride_bytes,
                      int64_t n_rows, float * y, int64_t y_stride, int64_t n) {
    int32_t g = 0;
    for (; g + 4 <= n_heads; g += 4) {
        const float * ag = a + g * a_stride;
        float * yg = y + g * y_stride;
        int64_t i = 0;
        for (; i + 64 <= n; i += 64) {
            __m512 acc[4][4];
            #pragma GCC unroll 4
            for (int h = 0; h < 4; ++h) {
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) acc[h][k] = _mm512_loadu_ps(yg + h * y_stride + i + 16 * k);
            }
            for (int64_t r = 0; r < n_rows; ++r) {
                const uint8_t * x = rows + r * row_stride_bytes + static_cast<size_t>(i) * E::elem_bytes;
                __m512 v[4];
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) v[k] = E::load16(x + 16 * k * E::elem_bytes);
                #pragma GCC unroll 4
                for (int h = 0; h < 4; ++h) {
                    const __m512 ar = _mm512_set1_ps(ag[h * a_stride + r]);
                    #pragma GCC unroll 4
                    for (int k = 0; k < 4; ++k) acc[h][k] = _mm512_add_ps(acc[h][k], _mm512_mul_ps(ar, v[k]));
                }
            }
            #pragma GCC unroll 4
            for (int h = 0; h < 4; ++h) {
                #pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) _mm512_storeu_ps(yg + h * y_stride + i + 16 * k, acc[h][k]);
            }
        }
        if (i < n) {  // the last n % 64 values (element-wise, so a column range is the same work)
            for (int h = 0; h < 4; ++h) {
                add_scaled<E>(ag + h * a_stride, rows + static_cast<size_t>(i) * E::elem_bytes, row_stride_bytes, n_rows,
                              yg + h * y_stride + i, n - i);
            }
        }
    }
    for (; g < n_heads; ++g) add_scaled<E>(a + g * a_stride, rows, row_stride_bytes, n_rows, y + g * y_stride, n);
}

// Rows a and b's 8 f16 values at a and b, widened: row a in lanes 0-7, b in 8-15.
inline __m512 f16_row_pair(const uint8_t * a, const uint8_t * b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu_128(a)), loadu_128(b), 1));
}
// The same for the last m < 8 values (the others read as 0; nothing past them is read).
inline __m512 f16_row_pair_tail(const uint8_t * a, const uint8_t * b, __mmask8 m) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_maskz_loadu_epi16(m, a)), _mm_maskz_loadu_epi16(m, b), 1));
}
// A token's 8 f16 values in both halves.
inline __m512 f16_token(__m128i h) { return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h)); }

constexpr int64_t k_f16_tile_rows = 8;
constexpr int64_t k_f16_tile_tokens = 4;

// Rows [0, n_rows) (n_rows <= 8) x T tokens. Rows past n_rows repeat the last row (its
// outputs are not stored), so the loop has one shape.
template <int T>
void f16_tile(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * x, size_t x_row_bytes, int64_t n, float * y,
              int64_t y_stride) {
    const uint8_t * row[k_f16_tile_rows];
    for (int64_t r = 0; r < k_f16_tile_rows; ++r) row[r] = w + static_cast<size_t>(r < n_rows ? r : n_rows - 1) * w_row_bytes;
    // acc[p][t]: rows 2p (lanes 0-7) and 2p + 1 (lanes 8-15) against token t.
    __m512 acc[4][T];
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const size_t off = static_cast<size_t>(i) * 2;
        __m512 xv[T];
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = f16_token(loadu_128(x + t * x_row_bytes + off));
        #pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512 wv = f16_row_pair(row[2 * p] + off, row[2 * p + 1] + off);
            #pragma GCC unroll 4
            for (int t = 0; t < T; ++t) acc[p][t] = _mm512_add_ps(acc[p][t], _mm512_mul_ps(wv, xv[t]));
        }
    }
    if (i < n) {
        // The last n % 8 values go to lanes 0 .. n % 8 - 1 of each half, as in the
        // reference; the other lanes keep their value exactly (a masked add, not an add
        // of zero, which would turn -0 into +0).
        const size_t off = static_cast<size_t>(i) * 2;
        const __mmask8 m = static_cast<__mmask8>((1u << (n - i)) - 1u);
        const __mmask16 keep = static_cast<__mmask16>(m | (static_cast<unsigned>(m) << 8));
        __m512 xv[T];
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = f16_token(_mm_maskz_loadu_epi16(m, x + t * x_row_bytes + off));
        #pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512 wv = f16_row_pair_tail(row[2 * p] + off, row[2 * p + 1] + off, m);
            #pragma GCC unroll 4
            for (int t = 0; t < T; ++t) acc[p][t] = _mm512_mask_add_ps(acc[p][t], keep, acc[p][t], _mm512_mul_ps(wv, xv[t]));
        }
    }
    // Lanes l0..l7 of each output to one value, 16 outputs at a time. Tokens past T
    // enter as zeros and are not stored.
    const __m512 zero = _mm512_setzero_ps();
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        // s1[t], 128-bit lane k: row 4h + k's (l0 + l4, l1 + l5, l2 + l6, l3 + l7).
        __m512 s1[4];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            const __m512 a = t < T ? acc[2 * h][t < T ? t : 0] : zero;
            const __m512 b = t < T ? acc[2 * h + 1][t < T ? t : 0] : zero;
            s1[t] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
        }
        // s2[u], lane k: row 4h + k's (l0 + l4) + (l2 + l6) and (l1 + l5) + (l3 + l7) for
        // tokens 2u, then 2u + 1.
        __m512 s2[2];
        #pragma GCC unroll 2
        for (int u = 0; u < 2; ++u) {
            const __m512 c = s1[2 * u], d = s1[2 * u + 1];
            s2[u] = _mm512_add_ps(_mm512_shuffle_ps(c, d, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        // Lane 4k + t: row 4h + k against token t.
        const __m512 out = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, out);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const int64_t r = 4 * h + k;
            if (r >= n_rows) break;
            #pragma GCC unroll 4
            for (int t = 0; t < T; ++t) y[t * y_stride + r] = lanes[4 * k + t];
        }
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

void add_scaled_heads_f32(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows, size_t row_stride_bytes,
                          int64_t n_rows, float * y, int64_t y_stride, int64_t n) {
    add_scaled_heads<f32_elems>(a, a_stride, n_heads, rows, row_stride_bytes, n_rows, y, y_stride, n);
}

void add_scaled_heads_f16(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows, size_t row_stride_bytes,
                          int64_t n_rows, float * y, int64_t y_stride, int64_t n) {
    add_scaled_heads<f16_elems>(a, a_stride, n_heads, rows, row_stride_bytes, n_rows, y, y_stride, n);
}

void mul_tile_f16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    for (int64_t r = 0; r < n_rows; r += k_f16_tile_rows) {
        const int64_t rc = n_rows - r < k_f16_tile_rows ? n_rows - r : k_f16_tile_rows;
        const uint8_t * wr = w + static_cast<size_t>(r) * w_row_bytes;
        for (int64_t t = 0; t < n_tokens; t += k_f16_tile_tokens) {
            const uint8_t * xt = xq + static_cast<size_t>(t) * xq_row_bytes;
            float * yt = y + t * y_stride + r;
            switch (n_tokens - t < k_f16_tile_tokens ? n_tokens - t : k_f16_tile_tokens) {
                case 4: f16_tile<4>(wr, w_row_bytes, rc, xt, xq_row_bytes, n, yt, y_stride); break;
                case 3: f16_tile<3>(wr, w_row_bytes, rc, xt, xq_row_bytes, n, yt, y_stride); break;
                case 2: f16_tile<2>(wr, w_row_bytes, rc, xt, xq_row_bytes, n, yt, y_stride); break;
                default: f16_tile<1>(wr, w_row_bytes, rc, xt, xq_row_bytes, n, yt, y_stride); break;
            }
        }
    }
}

}  // namespace skippy::kernels::avx512
