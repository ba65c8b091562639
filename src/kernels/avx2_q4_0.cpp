// Q4_0 x Q8_0 products with AVX2.
//
// The reference (quants_q4_0.cpp) computes, per block, the exact int32 sum of
// (q_w - 8) * q_x, then sum += sumi * (d_w * d_x) in block order. Here the nibbles
// (0..15) are multiplied as unsigned bytes by maddubs and the offset is taken out
// afterwards: sum((q_w - 8) * q_x) = sum(q_w * q_x) - 8 * sum(q_x). The float steps
// run one output per lane (avx2_util.h), so results equal the reference's.
#include "kernels/avx2_util.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t wbb = q4_0_block_bytes;
constexpr size_t xbb = q8_0_block_bytes;

// 8 int32 partial sums of q_w * q_x over a block; pair sums stay within 2 * 15 * 128.
inline __m256i block_dot_unsigned(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// 8 * sum of a block's 32 activation codes.
inline int32_t offset_sum(__m256i x) { return 8 * hsum_i32(block_dot_unsigned(_mm256_set1_epi8(1), x)); }

struct q4_0_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 128;
    struct token_group {
        __m256  dx[chunk_blocks];
        __m256i offset[chunk_blocks];  // 8 * sum(q_x) per token
    };

    static void prepare(token_group & g, const uint8_t * const x[8], int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * p[8];
            alignas(32) int32_t off[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                p[i] = x[i] + b * xbb;
                off[i] = offset_sum(loadu_256(p[i] + 2));
            }
            g.dx[b - b0] = gather_f16(p);
            g.offset[b - b0] = _mm256_load_si256(reinterpret_cast<const __m256i *>(off));
        }
    }

    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const __m256i wq = unpack_nibbles_32(wb + 2);
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) v[i] = block_dot_unsigned(wq, loadu_256(x[i] + b * xbb + 2));
            const __m256i sumi = _mm256_sub_epi32(reduce8(v), g.offset[b - b0]);
            // Reference: d = d_w * d_x; sum += (float)sumi * d.
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_at(wb)), g.dx[b - b0]);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
        }
        return acc;
    }

    static __m256 rows8(const uint8_t * const w[8], const uint8_t * x, int64_t nb, const uint8_t * next) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            const __m256i xq = loadu_256(x + b * xbb + 2);
            const uint8_t * wb[8];
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                wb[i] = w[i] + b * wbb;
                v[i] = block_dot_unsigned(unpack_nibbles_32(wb[i] + 2), xq);
            }
            const __m256i sumi = _mm256_sub_epi32(reduce8(v), _mm256_set1_epi32(offset_sum(xq)));
            const __m256 d = _mm256_mul_ps(gather_f16(wb), _mm256_set1_ps(f16_at(x + b * xbb)));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
        }
        return acc;
    }
};

}  // namespace

float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * w = w_row + ib * wbb;
        const uint8_t * x = x_row + ib * xbb;
        const __m256i xq = loadu_256(x + 2);
        const int32_t sumi = hsum_i32(block_dot_unsigned(unpack_nibbles_32(w + 2), xq)) - offset_sum(xq);
        const float d = f16_at(w) * f16_at(x);
        sum += static_cast<float>(sumi) * d;
    }
    return sum;
}

void mul_tile_q4_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<q4_0_kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
