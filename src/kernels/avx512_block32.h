// AVX-512 products of 32-value weight blocks with Q8_0 activations, for the formats
// whose reference is "per block, sumi = exact sum of value_w * q_x; sum += sumi * (d_w *
// d_x)" (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4; internal to kernels, AVX-512 files only, see
// avx512_util.h).
//
// A format W provides:
//   block_bytes
//   offset_shift   values are codes - (1 << offset_shift), codes unsigned bytes (-1:
//                  values are the codes)
//   with_q8_1      activations are Q8_1 blocks and the reference (Q5_1's) is
//                  "sum += (d_w * d_x) * sumi + m_w * s_x"; W then provides
//                  float min(wb), m_w
//   __m256i codes(const uint8_t * wb)   the 32 codes of a block in value order
//   float scale(const uint8_t * wb)     d_w, exactly as the scalar reference reads it
//   rest           the AVX2 tile of the format, for rows decode leaves (avx512_util.h)
// and for decode (rows16 below):
//   __m512i codes2(wb0, wb1)   the codes of two blocks, wb0's in the low 256 bits
//   off_scale      where in a block the 4 bytes holding its scale field(s) start
//   void scales16(words, d, m)  16 such dwords (one per row) to d_w (and Q5_1's m_w)
// Integer sums: vpdpbusd of the codes (u8) with the activation codes (s8), exact
// (|sum| <= 32 * 255 * 128), minus (1 << offset_shift) * sum(q_x); the float step runs
// one output per lane, so results equal the reference's bit for bit.
#pragma once

#include "kernels/avx512_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx512 {
namespace {

template <typename W>
struct block32_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 16;  // 11 KiB of rearranged activations per group
    static constexpr size_t wbb = W::block_bytes;
    static constexpr bool with_q8_1 = W::with_q8_1;
    static constexpr size_t xbb = with_q8_1 ? q8_1_block_bytes : q8_0_block_bytes;
    static constexpr size_t x_off_qs = with_q8_1 ? q8_1_off_qs : 2;

    struct token_group {
        __m512i x[chunk_blocks][8];        // dword k of each token's 32 codes
        __m512i neg_offset[chunk_blocks];  // -(1 << offset_shift) * sum(q_x) per token
        __m512  dx[chunk_blocks];
        __m512  sx[chunk_blocks];          // Q8_1's s
    };

    static void prepare(token_group & g, const uint8_t * x0, __m512i offsets, int64_t b0, int64_t b1) {
        const __m512i ones = _mm512_set1_epi8(1);
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * base = x0 + b * xbb;
            __m512i s = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const __m512i v = gather_dwords(offsets, base + x_off_qs + 4 * k);
                g.x[b - b0][k] = v;
                if constexpr (W::offset_shift >= 0) s = _mm512_dpbusd_epi32(s, ones, v);
            }
            if constexpr (W::offset_shift >= 0) {
                g.neg_offset[b - b0] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, W::offset_shift));
            } else {
                g.neg_offset[b - b0] = s;
            }
            g.dx[b - b0] = gather_f16(offsets, base);
            if constexpr (with_q8_1) g.sx[b - b0] = gather_f16(offsets, base + q8_1_off_s);
        }
    }

    // R rows x G token groups at once: each rearranged activation vector is loaded once
    // for R rows, each broadcast weight dword serves G groups.
    template <int R, int G>
    static void tokens(const uint8_t * const w[R], const token_group * const g[G], int64_t b0, int64_t b1, __m512 acc[R][G],
                       prefetch_stream & pf) {
        for (int64_t b = b0; b < b1; ++b) {
            pf.step();
            const int64_t i = b - b0;
            alignas(32) uint8_t codes[R][32];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) _mm256_store_si256(reinterpret_cast<__m256i *>(codes[r]), W::codes(w[r] + b * wbb));
            // Read back as broadcast loads (a load port each), not through shuffles.
            __asm__("" : "+m"(codes));
            __m512i a[R][G];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) a[r][q] = g[q]->neg_offset[i];
            }
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
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
                const __m512 dw = _mm512_set1_ps(W::scale(w[r] + b * wbb));
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) {
                    const __m512 d = _mm512_mul_ps(dw, g[q]->dx[i]);
                    const __m512 sumi = _mm512_cvtepi32_ps(a[r][q]);
                    if constexpr (with_q8_1) {
                        // Reference: d = d_w * d_x; m = m_w * s_x; sum += d * (float)sumi + m.
                        const __m512 m = _mm512_mul_ps(_mm512_set1_ps(W::min(w[r] + b * wbb)), g[q]->sx[i]);
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_add_ps(_mm512_mul_ps(d, sumi), m));
                    } else {
                        // Reference: d = d_w * d_x; sum += (float)sumi * d.
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_mul_ps(sumi, d));
                    }
                }
            }
        }
    }

    static void rest(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                     int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
        W::rest(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
    }

    // Decode (avx512_util.h's decode_tile): blocks b and b + 1 of a row in one vector
    // (W::codes2), so that one vpdpbusd per row and token covers 64 values, and the
    // reduction of 16 rows yields both blocks' sums (reduce16_pairs). The offset enters
    // as the starting value of every row's sums: -(1 << offset_shift) * sum(q_x) of
    // each block, formed once per token and block pair. An odd last block is paired
    // with itself and its second result dropped.
    template <int NT>
    static void rows16(const row_group & rows, const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m512 acc[NT]) {
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            if (next != nullptr) prefetch_span(next + b * 16 * wbb, 32 * wbb);
            block_pair<NT, true>(rows, x, b, acc);
        }
        if (b < nb) block_pair<NT, false>(rows, x, b, acc);
    }

    // Blocks b and b + 1 (Pair), or block b alone (taken twice, the copy dropped), of
    // the 16 rows (in two halves of 8, row_group's addressing).
    template <int NT, bool Pair>
    [[gnu::always_inline]] static void block_pair(const row_group & rows, const uint8_t * const x[NT], int64_t b, __m512 acc[NT]) {
        constexpr int64_t step = Pair ? static_cast<int64_t>(wbb) : 0;  // block b + 1 from block b
        const int64_t b1 = Pair ? b + 1 : b;
        const int64_t off = b * static_cast<int64_t>(wbb);
        const __m512i ones = _mm512_set1_epi8(1);
        __m512i xv[NT], start[NT];
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) {
            xv[i] = _mm512_inserti64x4(_mm512_castsi256_si512(loadu_256(x[i] + b * xbb + x_off_qs)),
                                       loadu_256(x[i] + b1 * xbb + x_off_qs), 1);
            if constexpr (W::offset_shift >= 0) {
                start[i] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv[i]), W::offset_shift));
            } else {
                start[i] = _mm512_setzero_si512();
            }
        }
        dword_collector16 scale[2];  // blocks b, b + 1
        reduce16_pairs red[NT];
        __m512i halves[NT][2];
        for_row_pairs(
            rows, off,
            [&](int k, const uint8_t * p0, const uint8_t * p1) __attribute__((always_inline)) {
                scale[0].add_pair(k, p0 + W::off_scale, p1 + W::off_scale);
                if constexpr (Pair) scale[1].add_pair(k, p0 + step + W::off_scale, p1 + step + W::off_scale);
                const __m512i c0 = W::codes2(p0, p0 + step), c1 = W::codes2(p1, p1 + step);
                #pragma GCC unroll 8
                for (int i = 0; i < NT; ++i) {
                    red[i].add_pair(k, _mm512_dpbusd_epi32(start[i], c0, xv[i]), _mm512_dpbusd_epi32(start[i], c1, xv[i]));
                }
            },
            [&](int h, int q) __attribute__((always_inline)) {
                scale[0].add_quad(2 * h + q);
                if constexpr (Pair) scale[1].add_quad(2 * h + q);
                #pragma GCC unroll 8
                for (int i = 0; i < NT; ++i) red[i].add_quad(q);
            },
            [&](int h) __attribute__((always_inline)) {
                #pragma GCC unroll 8
                for (int i = 0; i < NT; ++i) halves[i][h] = red[i].half();
            });
        __m512 dw[2], mw[2];
        W::scales16(scale[0].vec(), dw[0], mw[0]);
        if constexpr (Pair) W::scales16(scale[1].vec(), dw[1], mw[1]);
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) {
            __m512i sumi[2];
            reduce16_pairs::finish(halves[i][0], halves[i][1], sumi[0], sumi[1]);
            #pragma GCC unroll 2
            for (int h = 0; h < (Pair ? 2 : 1); ++h) {
                const uint8_t * xb = x[i] + (b + h) * xbb;
                const __m512 d = _mm512_mul_ps(dw[h], _mm512_set1_ps(f16_at(xb)));
                if constexpr (with_q8_1) {
                    // Reference: d = d_w * d_x; m = m_w * s_x; sum += d * (float)sumi + m.
                    const __m512 m = _mm512_mul_ps(mw[h], _mm512_set1_ps(f16_at(xb + q8_1_off_s)));
                    acc[i] = _mm512_add_ps(acc[i], _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi[h])), m));
                } else {
                    // Reference: d = d_w * d_x; sum += (float)sumi * d.
                    acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi[h]), d));
                }
            }
        }
    }

    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        const __m256i ones = _mm256_set1_epi8(1);
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_0; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            const __m256i xq = loadu_256(xb + x_off_qs);
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W::codes(wb), xq);
            if constexpr (W::offset_shift >= 0) {
                p = _mm256_sub_epi32(p, _mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq), W::offset_shift));
            }
            const int32_t sumi = hsum_i32(p);
            const float d = W::scale(wb) * f16_at(xb);
            if constexpr (with_q8_1) {
                const float m = W::min(wb) * f16_at(xb + q8_1_off_s);
                sum += d * static_cast<float>(sumi) + m;
            } else {
                sum += static_cast<float>(sumi) * d;
            }
        }
        return sum;
    }
};

// The 32 nibbles of 16 bytes in value order: low nibbles (values 0-15), then high.
inline __m256i unpack_nibbles_32(const uint8_t * qs) {
    const __m128i q = loadu_128(qs);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
}

// 0x10 in byte j where bit j of the little-endian u32 at qh is set (the fifth bit of
// Q5_0 / Q5_1 codes).
inline __m256i q5_high_bits(const uint8_t * qh) {
    return _mm256_maskz_mov_epi8(static_cast<__mmask32>(load_u32(qh)), _mm256_set1_epi8(0x10));
}

// 16 table entries (bytes) looked up by 32 indices < 16.
inline __m256i lookup16(const uint8_t * table, __m256i idx) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(loadu_128(table)), idx);
}

// Decode's forms (block32_kernel::rows16), for blocks at p0 and p1 in one vector:
// the nibbles of 16 bytes at each, in value order (p0's block in the low 256 bits).
inline __m512i unpack_nibbles_2x32(const uint8_t * p0, const uint8_t * p1) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(loadu_128(p0))),
                                         _mm256_broadcastsi128_si256(loadu_128(p1)), 1);
    return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
}

// Q5_0 / Q5_1 codes of two blocks: the nibbles plus 0x10 where the blocks' qh bits
// (bit j of `high`: value j of the pair) are set.
inline __m512i q5_codes_2x32(__m512i nib, __mmask64 high) { return _mm512_mask_add_epi8(nib, high, nib, _mm512_set1_epi8(0x10)); }

inline __m512i lookup16_x4(const uint8_t * table, __m512i idx) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(loadu_128(table)), idx);
}

// The f16 scales in the low halves of 16 dwords (d), and in the high halves (Q5_1's m).
inline void f16_scales(__m512i words, __m512 & d, __m512 & m) {
    d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
    m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
}

}  // namespace
}  // namespace skippy::kernels::avx512
