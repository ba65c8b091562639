// Q6_K x Q8_K products with AVX-512 (avx512_superblock.h): values are 6-bit codes (4
// low bits from ql, 2 high bits from qh) minus 32; the -32 goes through the bsums;
// signed 8-bit scales per 16 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

struct q6_k_format {
    static constexpr size_t block_bytes = q6_k_block_bytes;
    static constexpr size_t off_d = q6_k_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr int n_sub = 16;
    static constexpr bool has_min = false;
    static constexpr int bias_shift = 5;
    static constexpr int pair_min_tokens = 0;
    // Half h: the codes (0..63) of values 128h + 32k + l, l < 32: low 4 bits from ql
    // (bytes l and l + 32 of the half, low then high nibbles), high 2 bits from qh bits
    // 2k, 2k + 1 (blocks.h). 16-bit shifts move bits across bytes; the masks drop what
    // crossed.
    static void codes(const uint8_t * wb, uint8_t * out) {
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        const __m512i bits45 = _mm512_set1_epi8(0x30);
        const __m512i ql = loadu_512(wb + q6_k_off_ql);        // half 0: [bytes 0-31 | 32-63]
        const __m512i ql1 = loadu_512(wb + q6_k_off_ql + 64);  // half 1
        const __m512i qh = loadu_512(wb + q6_k_off_qh);        // [half 0 | half 1]
        // Vectors of 32 codes, as 256-bit halves: k = 0, 1 from the low nibbles, k = 2, 3
        // from the high nibbles.
        const __m512i qh_halves[2] = {_mm512_shuffle_i64x2(qh, qh, 0x44), _mm512_shuffle_i64x2(qh, qh, 0xee)};  // each half's qh, twice
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i q = h == 0 ? ql : ql1;
            const __m512i hb = qh_halves[h];
            // k = 0, 1: high bits (qh >> 0) and (qh >> 2) in bits 4-5.
            const __m512i h01 = _mm512_mask_blend_epi64(0xf0, _mm512_slli_epi16(hb, 4), _mm512_slli_epi16(hb, 2));
            const __m512i h23 = _mm512_mask_blend_epi64(0xf0, hb, _mm512_srli_epi16(hb, 2));
            _mm512_store_si512(out + 128 * h, _mm512_or_si512(_mm512_and_si512(q, low4), _mm512_and_si512(h01, bits45)));
            _mm512_store_si512(out + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), low4),
                                                                   _mm512_and_si512(h23, bits45)));
        }
    }
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        const uint8_t * s = wb + q6_k_off_scales;
        #pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(s[j]);
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            pair[k] = static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * k])) | static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * k + 1])) << 16;
        }
    }
    static constexpr auto rest = avx2::mul_tile_q6_k_q8_k;

    // Decode (superblock_kernel::rows16, sub16_row_sums): the codes in value order (c[j]
    // = values [64j, 64j + 64), whose 128-bit lanes are sub-blocks 4j .. 4j + 3), the
    // order in which ql's nibbles and qh's pairs of bits come out of 64-byte loads; so
    // turned dword 4b + a is sub-block 4a + b.
    using decode_x = sub16_decode_x;
    [[gnu::always_inline]] static __m512i lane_sub() { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) {
        __m512i q[4];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) q[j] = loadu_512(xb + q8_k_off_qs + 64 * j);
        sub16_x_decode(xb, q, lane_sub(), 5, xd);
    }
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out) {
        const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
        // (a & 0x0f) | b, for b within bits 4-5.
        constexpr int low_or = (0xf0 & 0xaa) | 0xcc;
        __m512i c[4];
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = loadu_512(wb + q6_k_off_ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(loadu_256(wb + q6_k_off_qh + 32 * h));
            // Values 128h + [0, 64): low nibbles, qh bits 0-1 (low half) and 2-3 (high half).
            const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1)), bits45);
            c[2 * h] = _mm512_ternarylogic_epi32(ql, h01, low4, low_or);
            // Values 128h + [64, 128): high nibbles, qh bits 4-5 and 6-7.
            const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1)), bits45);
            c[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), h23, low4, low_or);
        }
        const __m128i s8 = _mm_shuffle_epi8(loadu_128(wb + q6_k_off_scales), _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
        sub16_row_sums<NT>(c, _mm512_cvtepi8_epi32(s8), xd, out);
    }
    // d is the block's last field: its dword starts 2 bytes before it.
    static constexpr size_t off_scale = q6_k_off_d - 2;
    static_assert(q6_k_off_d + 2 == block_bytes);
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) { f16_ending_scales(words, d, dmin); }
};

using kernel = superblock_kernel<q6_k_format>;

}  // namespace

float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q6_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
