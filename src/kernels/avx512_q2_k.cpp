// Q2_K x Q8_K products with AVX-512 (avx512_superblock.h): 2-bit codes, 4-bit scales
// and mins per 16 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

// Every product is taken with the code already times its sub-block's scale: code <= 3
// and scale <= 15, so code * scale <= 45 is still an unsigned byte for vpdpbusd, and the
// integer sum isum = sum_j sc_j * sum(code * q_x) is the same, with no vpmulld per
// sub-block. The scaled code is a vpshufb lookup in a table whose dword j holds
// [0, sc_j, 2 sc_j, 3 sc_j] (sc_j * 0x03020100: no carries between the bytes), itself
// looked up by vpermd, which reads only the low 4 bits of each index: the scale of a
// byte whose high 4 bits are the min.
inline __m512i scale_multiples(__m128i scale_bytes) {
    const __m512i multiples = _mm512_setr_epi32(0, 0x03020100, 0x06040200, 0x09060300, 0x0c080400, 0x0f0a0500, 0x120c0600,
                                                0x150e0700, 0x18100800, 0x1b120900, 0x1e140a00, 0x21160b00, 0x24180c00,
                                                0x271a0d00, 0x2a1c0e00, 0x2d1e0f00);
    return _mm512_permutexvar_epi32(_mm512_cvtepu8_epi32(scale_bytes), multiples);
}

// (a & 3) | b per byte: a code (in the low 2 bits of a) plus a table offset.
inline __m512i code_index(__m512i a, __m512i b) {
    return _mm512_ternarylogic_epi32(a, _mm512_set1_epi8(3), b, 0xea);
}

struct q2_k_format {
    static constexpr size_t block_bytes = q2_k_block_bytes;
    static constexpr size_t off_d = q2_k_off_d;
    static constexpr size_t off_dmin = q2_k_off_dmin;
    static constexpr int n_sub = 16;
    static constexpr bool has_min = true;
    static constexpr int bias_shift = -1;
    static constexpr int pair_min_tokens = 0;
    // codes() gives code * scale (above), so every scale is 1.
    static constexpr bool prescaled = true;
    // Values 128h + 64p + 16l + i are (qs[32h + 16(l % 2) + i] >> 2(2p + l / 2)) & 3, in
    // sub-block 8h + 4p + l: from one vector of qs[32h, 32h + 32) twice, shifted per
    // 256-bit half, each 128-bit lane l looks its code up in dword l of the table's
    // 128-bit lane 2h + p (broadcast).
    static void codes(const uint8_t * wb, uint8_t * out) {
        alignas(64) uint8_t table[64];
        _mm512_store_si512(table, scale_multiples(loadu_128(wb + q2_k_off_scales)));
        const __m512i lane_dword = _mm512_setr_epi32(0, 0, 0, 0, 0x04040404, 0x04040404, 0x04040404, 0x04040404, 0x08080808,
                                                     0x08080808, 0x08080808, 0x08080808, 0x0c0c0c0c, 0x0c0c0c0c, 0x0c0c0c0c,
                                                     0x0c0c0c0c);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(loadu_256(wb + q2_k_off_qs + 32 * h));
            #pragma GCC unroll 2
            for (int p = 0; p < 2; ++p) {
                const __m512i shift = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(static_cast<int16_t>(4 * p)),
                                                              _mm512_set1_epi16(static_cast<int16_t>(4 * p + 2)));
                const __m512i index = code_index(_mm512_srlv_epi16(q, shift), lane_dword);
                const __m512i lookup = _mm512_broadcast_i32x4(loadu_128(table + 16 * (2 * h + p)));
                _mm512_store_si512(out + 128 * h + 64 * p, _mm512_shuffle_epi8(lookup, index));
            }
        }
    }
    // scales[j] >> 4 is the min of sub-block j (16 values); bsums pair k covers
    // sub-blocks 2k and 2k + 1.
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        const uint8_t * s = wb + q2_k_off_scales;
        #pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) sc[j] = 1;
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) pair[k] = static_cast<uint32_t>(s[2 * k] >> 4) | static_cast<uint32_t>(s[2 * k + 1] >> 4) << 16;
    }
    static constexpr auto rest = avx2::mul_tile_q2_k_q8_k;

    // Decode (superblock_kernel::rows16): the activation in crumbs_x_decode's order.
    using decode_x = min_decode_x;
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) {
        crumbs_x_decode(xb, xd.q);
        xd.bsums = loadu_256(xb + q8_k_off_bsums);
    }
    // The scaled codes (above) of each 64-byte load's crumbs: vector k's 128-bit lanes are
    // sub-blocks 2k, 2k + 1, 8 + 2k, 9 + 2k, so the table is ordered to hold them as dword
    // k of lanes 0-3 (sub-blocks 0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15), and the
    // lookup index is code + 4k. Then per token one vpdpbusd per 64 values.
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out) {
        const __m128i raw = loadu_128(wb + q2_k_off_scales);
        const __m256i m = _mm256_srli_epi16(_mm256_cvtepu8_epi16(raw), 4);
        const __m128i by_lane = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
        const __m512i table = scale_multiples(_mm_shuffle_epi8(raw, by_lane));
        const __m512i qs = loadu_512(wb + q2_k_off_qs);
        __m512i c[4];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i index = code_index(k == 0 ? qs : _mm512_srli_epi16(qs, 2 * k), _mm512_set1_epi8(static_cast<char>(4 * k)));
            c[k] = _mm512_shuffle_epi8(table, index);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) {
            __m512i isum = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) isum = _mm512_dpbusd_epi32(isum, c[k], xd[i].q[k]);
            out[i] = isum_imin(isum, _mm256_madd_epi16(xd[i].bsums, m));
        }
    }
    static_assert(q2_k_off_dmin == q2_k_off_d + 2);
    static constexpr size_t off_scale = q2_k_off_d;  // d, then dmin
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) { f16_pairs(words, d, dmin); }
};

using kernel = superblock_kernel<q2_k_format>;

}  // namespace

float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q2_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
