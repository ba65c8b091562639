// IQ4_XS x Q8_K products with AVX-512 (avx512_superblock.h): values are the IQ4_NL
// table's entries, taken as codes table + 128 (the -128 through the bsums); 6-bit
// signed scales per 32 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"
#include "kernels/value_tables.h"

namespace skippy::kernels::avx512 {
namespace {

struct codes_table {
    uint8_t v[16];
};

constexpr codes_table k_codes = [] {
    codes_table t{};
    for (int i = 0; i < 16; ++i) t.v[i] = static_cast<uint8_t>(k_iq4nl_values[i] + 128);
    return t;
}();

struct iq4_xs_format {
    static constexpr size_t block_bytes = iq4_xs_block_bytes;
    static constexpr size_t off_d = iq4_xs_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr int n_sub = 8;
    static constexpr bool has_min = false;
    static constexpr int bias_shift = 7;
    static constexpr int pair_min_tokens = 7;
    // Sub-block j is qs[16j .. 16j + 15]: values 32j + l (l < 16) the low nibbles, 32j +
    // 16 + l the high nibbles.
    static void codes(const uint8_t * wb, uint8_t * out) {
        const __m512i table = _mm512_broadcast_i32x4(loadu_128(k_codes.v));
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        #pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) {
            const __m512i q = loadu_512(wb + iq4_xs_off_qs + 64 * i);  // sub-blocks 4i .. 4i + 3, 16 bytes each
            const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low4));
            const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
            // Per sub-block: its 16 low-nibble codes, then its 16 high-nibble codes.
            _mm512_store_si512(out + 128 * i, _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi));
            _mm512_store_si512(out + 128 * i + 64, _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), hi));
        }
    }
    // ls_j = (scales_l[j / 2] >> 4 (j % 2)) & 15 | ((scales_h >> 2j) & 3) << 4, scale
    // ls_j - 32; bsums pair k covers sub-block k (32 values).
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        const uint32_t h = load_u16(wb + iq4_xs_off_scales_h);
        const uint8_t * l = wb + iq4_xs_off_scales_l;
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            sc[j] = static_cast<int32_t>(((l[j / 2] >> (4 * (j % 2))) & 0x0f) | ((h >> (2 * j)) & 3) << 4) - 32;
            pair[j] = static_cast<uint32_t>(static_cast<uint16_t>(sc[j])) * 0x10001u;
        }
    }
    // The stored ls_j (sc_j + 32) as bytes, for both the scales and the bsums
    // multipliers (scale_offset): low nibbles spread from 4 bytes to 8, the two high
    // bits of each from scales_h moved to bits 4-5 of its byte.
    static void scale_bytes(const uint8_t * wb, uint64_t & sc8, uint64_t & m8) {
        uint64_t l = load_u32(wb + iq4_xs_off_scales_l);
        l = (l | l << 16) & 0x0000ffff0000ffffull;
        l = (l | l << 8) & 0x00ff00ff00ff00ffull;  // byte 2i: scales_l[i]
        uint64_t h = load_u16(wb + iq4_xs_off_scales_h);
        h = (h | h << 24) & 0x000000ff000000ffull;
        h = (h | h << 12) & 0x000f000f000f000full;
        h = (h | h << 6) & 0x0303030303030303ull;  // byte j: (scales_h >> 2j) & 3
        sc8 = (l & 0x000f000f000f000full) | ((l << 4) & 0x0f000f000f000f00ull) | h << 4;
        m8 = sc8;
    }
    static constexpr int32_t scale_offset = 32;
    static constexpr auto rest = avx2::mul_tile_iq4_xs_q8_k;

    // Decode (superblock_kernel::rows16): codes are table + 128 (up to 241, beyond
    // maddubs's int16 pairs), so the sums are vpdpbusd's, per sub-block; a 64-byte load
    // of qs holds sub-blocks 4h .. 4h + 3, one per 128-bit lane, their first 16 values
    // in the low nibbles (lo[h]) and the other 16 in the high nibbles (hi[h]). The
    // activation is rearranged to match once per block, and the -128 enters as the
    // starting value of each sub-block's sum: -128 * the sum of its activation codes.
    // The sums are then multiplied by their scales (vpmulld, exact: |32 * 241 * 128 *
    // 32| < 2^31).
    struct decode_x {
        __m512i lo[2], hi[2];
        __m512i start[2];
    };
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) {
        const __m512i ones = _mm512_set1_epi8(1);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i a = loadu_512(xb + q8_k_off_qs + 128 * h);       // sub-blocks 4h, 4h + 1
            const __m512i b = loadu_512(xb + q8_k_off_qs + 128 * h + 64);  // 4h + 2, 4h + 3
            xd.lo[h] = _mm512_shuffle_i64x2(a, b, 0x88);
            xd.hi[h] = _mm512_shuffle_i64x2(a, b, 0xdd);
            const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xd.lo[h]), ones, xd.hi[h]);
            xd.start[h] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
        }
    }
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out) {
        // ls_j - 32 per 32-bit lane j, then each 128-bit lane h's four dwords the
        // scale of sub-block 4h' + (lane) (h' = which half of qs).
        const uint32_t l = load_u32(wb + iq4_xs_off_scales_l);
        const uint32_t hbits = load_u16(wb + iq4_xs_off_scales_h);
        const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(l)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                             _mm256_set1_epi32(0x0f));
        const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(hbits)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                              _mm256_set1_epi32(3));
        const __m512i ls = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32)));
        const __m512i table = _mm512_broadcast_i32x4(loadu_128(k_codes.v));
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        __m512i lo[2], hi[2], sc[2];
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i q = loadu_512(wb + iq4_xs_off_qs + 64 * h);
            lo[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low4));
            hi[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
            sc[h] = _mm512_permutexvar_epi32(_mm512_setr_epi32(4 * h, 4 * h, 4 * h, 4 * h, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1,
                                                               4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3),
                                             ls);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) {
            __m512i acc = _mm512_setzero_si512();
            #pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                const __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(xd[i].start[h], lo[h], xd[i].lo[h]), hi[h], xd[i].hi[h]);
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(p, sc[h]));
            }
            out[i] = acc;
        }
    }
    static constexpr size_t off_scale = iq4_xs_off_d;
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) {
        d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
        dmin = d;
    }
};

using kernel = superblock_kernel<iq4_xs_format>;

}  // namespace

float vec_dot_iq4_xs_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_iq4_xs_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
