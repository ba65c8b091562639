// AVX2 products of 32-value weight blocks with Q8_0 activations, for the formats whose
// reference is "per block, sumi = exact sum of value_w * q_x; sum += sumi * (d_w * d_x)"
// (Q8_0, IQ4_NL, MXFP4 in block32_kernel; Q4_0, Q5_0 in offset_block32_kernel below;
// internal to kernels, AVX2 files only, see avx2_util.h).
//
// A format W provides:
//   block_bytes
//   __m256i values(const uint8_t * wb)   the 32 signed values of a block in value order
//                                        (-128 taken as 128)
//   float scale(const uint8_t * wb)      d_w, exactly as the scalar reference reads it
//   __m256 scales8(const uint8_t * const wb[8])   the scales of eight blocks
// The integer sum comes from maddubs(|w|, x with w's sign) and madd, exact because
// |w| <= 128 and the Q8_0 activation codes are in [-127, 127] (quants_avx2.h); the
// float step runs one output per lane (avx2_util.h), so results equal the reference's.
#pragma once

#include "kernels/avx2_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx2 {
namespace {

// The 8 int32 partial sums of one block product of signed values w and codes x.
inline __m256i signed_block_dot(__m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// 0x10 in byte j where bit j of the little-endian u32 at qh is set (the fifth bit of
// Q5_0 / Q5_1 codes).
// The u32 goes through memcpy: qh sits at offset 2 of a block, and a float-pointer load
// (vbroadcastss from a cast pointer) is a misaligned access UBSan rightly refuses; gcc
// and clang fold memcpy + set1 into one vpbroadcastd from memory anyway.
inline __m256i q5_high_bits(const uint8_t * qh) {
    uint32_t word;
    std::memcpy(&word, qh, 4);
    const __m256i h = _mm256_set1_epi32(static_cast<int32_t>(word));
    const __m256i spread = _mm256_shuffle_epi8(h,
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

template <typename W>
struct block32_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 128;
    static constexpr size_t wbb = W::block_bytes;
    static constexpr size_t xbb = q8_0_block_bytes;
    struct token_group {
        __m256 dx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * const x[8], int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * p[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) p[i] = x[i] + b * xbb;
            g.dx[b - b0] = gather_f16(p);
        }
    }

    // NT (4 or 8) tokens carry the integer work; with 4, lanes 4-7 repeat lanes 0-3.
    template <int NT = 8>
    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        static_assert(NT == 4 || NT == 8);
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const __m256i wv = W::values(wb);
            const __m256i aw = _mm256_sign_epi8(wv, wv);
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) {
                const __m256i xq = loadu_256(x[i] + b * xbb + 2);
                v[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wv)), _mm256_set1_epi16(1));
            }
            #pragma GCC unroll 4
            for (int i = NT; i < 8; ++i) v[i] = v[i - NT];
            // Reference: d = d_w * d_x; sum += (float)sumi * d.
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(W::scale(wb)), g.dx[b - b0]);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(reduce8(v)), d));
        }
        return acc;
    }

    template <int NT>
    static void rows8(const uint8_t * const w[8], const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m256 acc[NT]) {
        #pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            __m256i xq[NT];
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) xq[t] = loadu_256(x[t] + b * xbb + 2);
            const uint8_t * wb[8];
            __m256i v[NT][8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                wb[i] = w[i] + b * wbb;
                const __m256i wv = W::values(wb[i]);
                const __m256i aw = _mm256_sign_epi8(wv, wv);
                #pragma GCC unroll 3
                for (int t = 0; t < NT; ++t) {
                    v[t][i] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[t], wv)), _mm256_set1_epi16(1));
                }
            }
            const __m256 dw = W::scales8(wb);
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) {
                const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(f16_at(x[t] + b * xbb)));
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(reduce8(v[t])), d));
            }
        }
    }

    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_0; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            const int32_t sumi = hsum_i32(signed_block_dot(W::values(wb), loadu_256(xb + 2)));
            const float d = W::scale(wb) * f16_at(xb);
            sum += static_cast<float>(sumi) * d;
        }
        return sum;
    }
};

// The same products for formats whose values are unsigned codes minus a constant
// (Q4_0: nibbles - 8, Q5_0: 5-bit codes - 16): the codes (< 32) are multiplied as
// unsigned bytes by maddubs (pair sums within 2 * 31 * 128) and the offset is taken out
// afterwards, sum((q_w - c) * q_x) = sum(q_w * q_x) - c * sum(q_x), with sum(q_x)
// formed once per token and block, not per row. W provides block_bytes, offset (c),
// codes(wb) (32 unsigned codes in value order), scale and scales8 as above.
template <typename W>
struct offset_block32_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 128;
    static constexpr size_t wbb = W::block_bytes;
    static constexpr size_t xbb = q8_0_block_bytes;

    // 8 int32 partial sums of q_w * q_x over a block.
    static __m256i block_dot_unsigned(__m256i w, __m256i x) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
    }

    // [sum of p[0]'s lanes, ..., sum of p[7]'s lanes] for eight maddubs results of
    // codes < 32 (pairs within 2 * 31 * 128): widened to int32 pairs by madd, then
    // reduce8.
    static __m256i reduce8_pair_sums(const __m256i p[8]) {
        static_assert(W::offset <= 16, "codes are below 2 * offset <= 32");
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i v[8];
        #pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) v[i] = _mm256_madd_epi16(p[i], ones);
        return reduce8(v);
    }

    // c * sum of a block's 32 activation codes.
    static int32_t offset_sum(__m256i x) { return W::offset * hsum_i32(block_dot_unsigned(_mm256_set1_epi8(1), x)); }

    struct token_group {
        __m256  dx[chunk_blocks];
        __m256i offset[chunk_blocks];  // c * sum(q_x) per token
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

    // NT (4 or 8) tokens carry the integer work; with 4, lanes 4-7 repeat lanes 0-3.
    template <int NT = 8>
    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        static_assert(NT == 4 || NT == 8);
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const __m256i wq = W::codes(wb);
            __m256i p[8];
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) p[i] = _mm256_maddubs_epi16(wq, loadu_256(x[i] + b * xbb + 2));
            #pragma GCC unroll 4
            for (int i = NT; i < 8; ++i) p[i] = p[i - NT];
            const __m256i sumi = _mm256_sub_epi32(reduce8_pair_sums(p), g.offset[b - b0]);
            // Reference: d = d_w * d_x; sum += (float)sumi * d.
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(W::scale(wb)), g.dx[b - b0]);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
        }
        return acc;
    }

    template <int NT>
    static void rows8(const uint8_t * const w[8], const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m256 acc[NT]) {
        #pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            __m256i xq[NT];
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) xq[t] = loadu_256(x[t] + b * xbb + 2);
            const uint8_t * wb[8];
            __m256i p[NT][8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                wb[i] = w[i] + b * wbb;
                const __m256i c = W::codes(wb[i]);
                #pragma GCC unroll 3
                for (int t = 0; t < NT; ++t) p[t][i] = _mm256_maddubs_epi16(c, xq[t]);
            }
            const __m256 dw = W::scales8(wb);
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) {
                const __m256i sumi = _mm256_sub_epi32(reduce8_pair_sums(p[t]), _mm256_set1_epi32(offset_sum(xq[t])));
                const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(f16_at(x[t] + b * xbb)));
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), d));
            }
        }
    }

    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_0; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            const __m256i xq = loadu_256(xb + 2);
            const int32_t sumi = hsum_i32(block_dot_unsigned(W::codes(wb), xq)) - offset_sum(xq);
            const float d = W::scale(wb) * f16_at(xb);
            sum += static_cast<float>(sumi) * d;
        }
        return sum;
    }
};

}  // namespace
}  // namespace skippy::kernels::avx2
