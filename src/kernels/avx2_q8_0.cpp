// Q8_0 with AVX2: activation encoder and Q8_0 x Q8_0 products.
//
// The reference (quants_q8_0.cpp) computes, per block, the exact int32 sum of
// q_w * q_x, then sum += sumi * (d_w * d_x) in block order. Here the integer block sum
// comes from maddubs(|w|, x with w's sign) and madd, reduced per output; the float
// steps run one output per lane (avx2_util.h), so results equal the reference's.
#include "kernels/avx2_util.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t bb = q8_0_block_bytes;

// The 8 int32 partial sums of one block product (w, x: 32 codes each). |w| times x
// with w's sign is w * x; maddubs cannot saturate because |x| <= 127 (the activation
// encoder's range) and |w| <= 128, so each pair sum is at most 2 * 128 * 127.
inline __m256i block_dot(__m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Eight tokens: their block scales as vectors, for a chunk of blocks.
struct q8_0_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 256;
    struct token_group {
        __m256 dx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * const x[8], int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * p[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) p[i] = x[i] + b * bb;
            g.dx[b - b0] = gather_f16(p);
        }
    }

    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * bb;
            const __m256i wq = loadu_256(wb + 2);
            const __m256i aw = _mm256_sign_epi8(wq, wq);
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                const __m256i xq = loadu_256(x[i] + b * bb + 2);
                v[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq)), _mm256_set1_epi16(1));
            }
            const __m256i sumi = reduce8(v);
            // Reference: d = d_w * d_x; sum += (float)sumi * d.
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_at(wb)), g.dx[b - b0]);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
        }
        return acc;
    }

    static __m256 rows8(const uint8_t * const w[8], const uint8_t * x, int64_t nb, const uint8_t * next) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * bb, 8 * bb);
            const __m256i xq = loadu_256(x + b * bb + 2);
            const uint8_t * wb[8];
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                wb[i] = w[i] + b * bb;
                v[i] = block_dot(loadu_256(wb[i] + 2), xq);
            }
            const __m256i sumi = reduce8(v);
            const __m256 d = _mm256_mul_ps(gather_f16(wb), _mm256_set1_ps(f16_at(x + b * bb)));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
        }
        return acc;
    }
};

}  // namespace

// Byte for byte the scalar from_float_q8_0_activation: the same amax (NaNs skipped),
// d = amax / 127 rounded to f16 by F16C (as f32_to_f16 rounds), and
// q = clamp(nearest-even(x * (127 / amax)), -127, 127) with the same rounding trick.
void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * bb;
        const float amax = abs_max(x, qk_0);
        const uint16_t d = _cvtss_sh(amax / 127.0f, 0);
        std::memcpy(b, &d, 2);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k) {
            q[k] = clamp_i32(round_nearest_even(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id)), -127, 127);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + 2), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    }
}

float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * w = w_row + ib * bb;
        const uint8_t * x = x_row + ib * bb;
        const int32_t sumi = hsum_i32(block_dot(loadu_256(w + 2), loadu_256(x + 2)));
        const float d = f16_at(w) * f16_at(x);
        sum += static_cast<float>(sumi) * d;
    }
    return sum;
}

void mul_tile_q8_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<q8_0_kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
