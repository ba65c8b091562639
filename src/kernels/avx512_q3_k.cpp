// Q3_K x Q8_K products with AVX-512 (avx512_superblock.h): values are 3-bit codes (2
// low bits as Q2_K's, the high bit from hmask) minus 4, the -4 through the bsums;
// 6-bit signed scales per 16 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

// Bit s of every byte of v (per 16-bit lane shift counts s), at bit `to`.
inline __m512i bit_of_bytes(__m512i v, __m512i s, int to) {
    return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(v, s), _mm512_set1_epi8(1)), to);
}

inline __m512i shifts(int lo, int hi) {
    return _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(static_cast<int16_t>(lo)), _mm512_set1_epi16(static_cast<int16_t>(hi)));
}

struct q3_k_format {
    static constexpr size_t block_bytes = q3_k_block_bytes;
    static constexpr size_t off_d = q3_k_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr int n_sub = 16;
    static constexpr bool has_min = false;
    static constexpr int bias_shift = 2;
    static constexpr int pair_min_tokens = 0;
    // Value 128h + 32k + l: (qs[32h + l] >> 2k) & 3, plus 4 * bit (4h + k) of hmask[l].
    static void codes(const uint8_t * wb, uint8_t * out) {
        const __m512i hm = _mm512_broadcast_i64x4(loadu_256(wb + q3_k_off_hmask));
        const __m512i three = _mm512_set1_epi8(3);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(loadu_256(wb + q3_k_off_qs + 32 * h));
            #pragma GCC unroll 2
            for (int k0 = 0; k0 < 4; k0 += 2) {
                const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(q, shifts(2 * k0, 2 * k0 + 2)), three);
                const __m512i high = bit_of_bytes(hm, shifts(4 * h + k0, 4 * h + k0 + 1), 2);
                _mm512_store_si512(out + 128 * h + 32 * k0, _mm512_or_si512(low, high));
            }
        }
    }
    // s_j = (scales[j % 8] >> 4 (j / 8)) & 15 | ((scales[8 + j % 4] >> 2 (j / 4)) & 3) << 4,
    // scale s_j - 32; bsums pair k covers sub-blocks 2k and 2k + 1.
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        const uint8_t * s = wb + q3_k_off_scales;
        #pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
            sc[j] = (((s[j % 8] >> (4 * (j / 8))) & 0x0f) | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        }
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            pair[k] = static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * k])) | static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * k + 1])) << 16;
        }
    }
    static constexpr auto rest = avx2::mul_tile_q3_k_q8_k;

    // Decode (superblock_kernel::rows16, sub16_row_sums): the codes in crumbs_x_decode's
    // order, c[k] = values [32k, 32k + 32) and [128 + 32k, 160 + 32k), whose 128-bit
    // lanes are sub-blocks 2k, 2k + 1, 8 + 2k and 9 + 2k; their high bits are bits k and
    // 4 + k of hmask (broadcast to both halves), added where vptestmb finds them.
    using decode_x = sub16_decode_x;
    [[gnu::always_inline]] static __m512i lane_sub() { return _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15); }
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) {
        __m512i q[4];
        crumbs_x_decode(xb, q);
        sub16_x_decode(xb, q, lane_sub(), 2, xd);
    }
    // The 16 scales s_j - 32 as int16 (blocks.h): low 4 bits from nibble j / 8 of byte
    // j % 8, high 2 bits from bits 2 (j / 4) of byte 8 + j % 4; in general registers,
    // 8 sub-blocks per 64-bit word.
    static __m256i scales_i16(const uint8_t * wb) {
        const uint8_t * s = wb + q3_k_off_scales;
        uint64_t a;
        std::memcpy(&a, s, 8);
        const uint32_t c = load_u32(s + 8);
        const uint64_t m2 = 0x03030303u;
        const uint64_t lo = (a & 0x0f0f0f0f0f0f0f0full) | ((c & m2) | ((c >> 2) & m2) << 32) << 4;
        const uint64_t hi = ((a >> 4) & 0x0f0f0f0f0f0f0f0full) | (((c >> 4) & m2) | ((c >> 6) & m2) << 32) << 4;
        const __m256i s16 = _mm256_cvtepu8_epi16(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
        return _mm256_sub_epi16(s16, _mm256_set1_epi16(32));
    }
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out) {
        const __m512i qs = loadu_512(wb + q3_k_off_qs);
        const __m512i hm = _mm512_broadcast_i64x4(loadu_256(wb + q3_k_off_hmask));
        const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
        __m512i c[4];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i low = _mm512_and_si512(k == 0 ? qs : _mm512_srli_epi16(qs, 2 * k), three);
            c[k] = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, bit_pair(k, 4 + k)), low, four);
        }
        sub16_row_sums<NT>(c, _mm512_permutexvar_epi32(lane_sub(), _mm512_cvtepi16_epi32(scales_i16(wb))), xd, out);
    }
    // d is the block's last field: its dword starts 2 bytes before it.
    static constexpr size_t off_scale = q3_k_off_d - 2;
    static_assert(q3_k_off_d + 2 == block_bytes);
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) { f16_ending_scales(words, d, dmin); }
};

using kernel = superblock_kernel<q3_k_format>;

}  // namespace

float vec_dot_q3_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q3_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
