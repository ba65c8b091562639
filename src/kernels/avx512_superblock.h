// AVX-512 products of 256-value super-blocks with Q8_K activations, for the formats
// whose reference (quants_common.h) is
//   isum = sum_j sc_j * sum(v * q_x over sub-block j)          exactly in int32
//   imin = sum_j m_j * (sum of q_x over sub-block j, bsums)    (formats with mins)
//   sum += (d_w * d_x) * isum [- (dmin_w * d_x) * imin]        in super-block order
// (internal to kernels, AVX-512 files only, see avx512_util.h).
//
// A format W provides:
//   block_bytes, off_d, off_dmin (formats with mins), n_sub (8 or 16 sub-blocks)
//   has_min       the float step subtracts (dmin_w * d_x) * imin
//   bias_shift    values are codes - (1 << bias_shift) (codes unsigned; -1: no bias)
//   void codes(wb, uint8_t out[256])   the unsigned codes in value order
//   void scales(wb, int32_t sc[n_sub], uint32_t pair[8])
//       the sub-block scales, and per bsums pair k (bsums 2k, 2k + 1) the two int16
//       multipliers of those bsums in one dword: the mins m_k, m_k (formats with mins,
//       sub-blocks of 32) or the scales sc_2k, sc_2k+1 (formats with a bias, sub-blocks
//       of 16)
//   rest          the AVX2 tile of the format, for the tokens left after the groups
//
// tokens16: per sub-block, vpdpbusd of the broadcast codes (u8) with the rearranged
// activations (s8) gives the exact sub-block sum of every token; it is multiplied by
// sc_j (vpmulld, exact: |sc_j * sum| <= 32 * 255 * 128 * 128 < 2^31) and added. The bsums terms go through
// vpdpwssd (int16 pairs). The float step runs one output per lane.
#pragma once

#include "kernels/avx512_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx512 {
namespace {

template <typename W>
struct superblock_kernel {
    static constexpr int64_t block_elems = qk_k;
    static constexpr int64_t chunk_blocks = 4;  // 18.5 KiB of rearranged activations per group
    static constexpr size_t wbb = W::block_bytes;
    static constexpr size_t xbb = q8_k_block_bytes;
    static constexpr int n_sub = W::n_sub;
    static constexpr int dwords_per_sub = 64 / n_sub;
    static_assert(!W::has_min || W::bias_shift < 0, "a format has mins or a bias, not both");
    static_assert(W::has_min || W::off_dmin == 0, "off_dmin is for formats with mins");

    struct token_group {
        __m512i x[chunk_blocks][64];    // dword k of each token's 256 codes
        __m512i bsums[chunk_blocks][8];  // bsums 2k, 2k + 1 of each token
        __m512  dx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * x0, __m512i offsets, int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * base = x0 + b * xbb;
            #pragma GCC unroll 8
            for (int k = 0; k < 64; ++k) g.x[b - b0][k] = gather_dwords(offsets, base + q8_k_off_qs + 4 * k);
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) g.bsums[b - b0][k] = gather_dwords(offsets, base + q8_k_off_bsums + 4 * k);
            g.dx[b - b0] = gather_f32(offsets, base + q8_k_off_d);
        }
    }

    static float dmin_of(const uint8_t * wb) {
        if constexpr (W::has_min) {
            return f16_at(wb + W::off_dmin);
        } else {
            return 0.0f;
        }
    }

    // R rows x G token groups at once: each rearranged activation vector is loaded once
    // for R rows; each row's codes and scales are unpacked once, and each broadcast
    // weight dword serves G groups.
    template <int R, int G>
    static void tokens(const uint8_t * const w[R], const token_group * const g[G], int64_t b0, int64_t b1, __m512 acc[R][G]) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t i = b - b0;
            alignas(64) uint8_t codes[R][qk_k];
            int32_t sc[R][n_sub];
            uint32_t pair[R][8];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                W::codes(w[r] + b * wbb, codes[r]);
                W::scales(w[r] + b * wbb, sc[r], pair[r]);
            }
            // The codes are read back as broadcast loads (a load port each), not moved
            // through registers (two shuffles each, on the ports the products need).
            __asm__("" : "+m"(codes));
            __m512i isum[R][G];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) isum[r][q] = _mm512_setzero_si512();
            }
            #pragma GCC unroll 16
            for (int j = 0; j < n_sub; ++j) {
                __m512i a[R][G];
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    #pragma GCC unroll 2
                    for (int q = 0; q < G; ++q) a[r][q] = _mm512_setzero_si512();
                }
                #pragma GCC unroll 8
                for (int k = j * dwords_per_sub; k < (j + 1) * dwords_per_sub; ++k) {
                    __m512i x[G];
                    #pragma GCC unroll 2
                    for (int q = 0; q < G; ++q) x[q] = g[q]->x[i][k];
                    #pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        const __m512i c = _mm512_set1_epi32(static_cast<int32_t>(load_u32(codes[r] + 4 * k)));
                        #pragma GCC unroll 2
                        for (int q = 0; q < G; ++q) a[r][q] = _mm512_dpbusd_epi32(a[r][q], c, x[q]);
                    }
                }
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    const __m512i s = _mm512_set1_epi32(sc[r][j]);
                    #pragma GCC unroll 2
                    for (int q = 0; q < G; ++q) isum[r][q] = _mm512_add_epi32(isum[r][q], _mm512_mullo_epi32(a[r][q], s));
                }
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t * wb = w[r] + b * wbb;
                const __m512 dw = _mm512_set1_ps(f16_at(wb + W::off_d));
                const __m512 dmin = _mm512_set1_ps(dmin_of(wb));
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) {
                    __m512i bsum_term = _mm512_setzero_si512();
                    #pragma GCC unroll 8
                    for (int k = 0; k < 8; ++k) {
                        bsum_term = _mm512_dpwssd_epi32(bsum_term, g[q]->bsums[i][k], _mm512_set1_epi32(static_cast<int32_t>(pair[r][k])));
                    }
                    const __m512 dx = g[q]->dx[i];
                    if constexpr (W::has_min) {
                        // Reference: sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin.
                        const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r][q]));
                        const __m512 tm = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(bsum_term));
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_sub_ps(t, tm));
                    } else {
                        // isum = sum_j sc_j * (sum(code * x) - (1 << bias_shift) * bsum_j).
                        __m512i is = isum[r][q];
                        if constexpr (W::bias_shift >= 0) is = _mm512_sub_epi32(is, _mm512_slli_epi32(bsum_term, W::bias_shift));
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(is)));
                    }
                }
            }
        }
    }

    static void rest(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                     int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
        W::rest(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
    }

    // One token, 256-bit vectors: vpdpbusd of 32 codes with 32 activation codes, each
    // dword lane within one sub-block, times that sub-block's scale (vpmulld, exact).
    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_k; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            alignas(64) uint8_t codes[qk_k];
            W::codes(wb, codes);
            int32_t sc[n_sub];
            uint32_t pair[8];
            W::scales(wb, sc, pair);
            __m256i acc = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int v = 0; v < 8; ++v) {
                const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), loadu_256(codes + 32 * v), loadu_256(xb + q8_k_off_qs + 32 * v));
                const __m256i mult = n_sub == 8 ? _mm256_set1_epi32(sc[v])
                                                : _mm256_set_m128i(_mm_set1_epi32(sc[(2 * v + 1) % n_sub]), _mm_set1_epi32(sc[(2 * v) % n_sub]));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p, mult));
            }
            const __m256i pairs = _mm256_setr_epi32(static_cast<int32_t>(pair[0]), static_cast<int32_t>(pair[1]),
                                                    static_cast<int32_t>(pair[2]), static_cast<int32_t>(pair[3]),
                                                    static_cast<int32_t>(pair[4]), static_cast<int32_t>(pair[5]),
                                                    static_cast<int32_t>(pair[6]), static_cast<int32_t>(pair[7]));
            const int32_t bsum_term = hsum_i32(_mm256_madd_epi16(loadu_256(xb + q8_k_off_bsums), pairs));
            int32_t isum = hsum_i32(acc);
            const float dx = load_f32(xb + q8_k_off_d);
            const float t_dw = f16_at(wb + W::off_d) * dx;
            if constexpr (W::has_min) {
                sum += t_dw * static_cast<float>(isum) - (dmin_of(wb) * dx) * static_cast<float>(bsum_term);
            } else {
                if constexpr (W::bias_shift >= 0) isum -= bsum_term * (1 << W::bias_shift);
                sum += t_dw * static_cast<float>(isum);
            }
        }
        return sum;
    }
};

}  // namespace
}  // namespace skippy::kernels::avx512
