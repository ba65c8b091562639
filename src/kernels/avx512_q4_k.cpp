// Q4_K x Q8_K products with AVX-512 (avx512_superblock.h): 4-bit codes, 6-bit scales
// and mins per 32 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

struct q4_k_format {
    static constexpr size_t block_bytes = q4_k_block_bytes;
    static constexpr size_t off_d = q4_k_off_d;
    static constexpr size_t off_dmin = q4_k_off_dmin;
    static constexpr int n_sub = 8;
    static constexpr bool has_min = true;
    static constexpr int bias_shift = -1;
    static constexpr int pair_min_tokens = 7;
    // Values 64g + l (l < 32) are the low nibbles of qs[32g + l], 64g + 32 + l the high.
    static void codes(const uint8_t * wb, uint8_t * out) {
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i qs = loadu_512(wb + q4_k_off_qs + 64 * h);  // groups 2h, 2h + 1
            const __m512i lo = _mm512_and_si512(qs, low4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
            // [lo 2h | hi 2h | lo 2h+1 | hi 2h+1] in 256-bit halves.
            _mm512_store_si512(out + 128 * h, _mm512_shuffle_i64x2(lo, hi, 0x44));
            _mm512_store_si512(out + 128 * h + 64, _mm512_shuffle_i64x2(lo, hi, 0xee));
        }
    }
    // blocks.h: j < 4: sc = s[j] & 63, m = s[j + 4] & 63; j >= 4: sc = (s[j + 4] & 15) |
    // (s[j - 4] >> 6) << 4, m = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        uint64_t sc8, m8;
        unpack_k4_scales(wb + q4_k_off_scales, sc8, m8);
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            sc[j] = static_cast<int32_t>((sc8 >> (8 * j)) & 0xff);
            pair[j] = static_cast<uint32_t>((m8 >> (8 * j)) & 0xff) * 0x10001u;
        }
    }
    static void scale_bytes(const uint8_t * wb, uint64_t & sc8, uint64_t & m8) { unpack_k4_scales(wb + q4_k_off_scales, sc8, m8); }
    static constexpr auto rest = avx2::mul_tile_q4_k_q8_k;

    // Decode (superblock_kernel::rows16; avx512_superblock.h's k4_row_decode).
    using decode_x = k4_decode_x;
    static constexpr int split_mins_from = k4_split_mins_from;
    template <int NT>
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) { k4_x_decode<NT>(xb, xd); }
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out, uint64_t & m8) {
        if constexpr (NT >= k4_split_mins_from) {
            k4_dot_row_decode<NT, false>(wb + q4_k_off_scales, wb + q4_k_off_qs, nullptr, xd, out, m8);
        } else {
            k4_row_decode<NT, false>(wb + q4_k_off_scales, wb + q4_k_off_qs, nullptr, xd, out, m8);
        }
    }
    static_assert(q4_k_off_dmin == q4_k_off_d + 2);
    static constexpr size_t off_scale = q4_k_off_d;  // d, then dmin
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) { f16_pairs(words, d, dmin); }
};

using kernel = superblock_kernel<q4_k_format>;

}  // namespace

float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q4_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
