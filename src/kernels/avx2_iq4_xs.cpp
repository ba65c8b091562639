// IQ4_XS x Q8_K products with AVX2 (avx2_superblock.h): signed table values, 6-bit
// scales (minus 32) per 32 values.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"
#include "kernels/value_tables.h"

namespace skippy::kernels::avx2 {
namespace {

struct iq4_xs_format {
    static constexpr size_t block_bytes = iq4_xs_block_bytes;
    static constexpr size_t off_d = iq4_xs_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr bool has_min = false, has_bias = false, is_signed = true;
    static constexpr int n_groups = 4, per_group = 2;
    struct scales {
        __m256i units;  // the signed scales ls_j - 32 as scale_units_of_8
    };
    // ls_j = nibble j of scales_l | ((scales_h >> 2j) & 3) << 4 (blocks.h), one 32-bit
    // lane per j, then each lane's ls_j - 32 as an int16 pair (scale_units_of_8's form).
    static scales load_scales(const uint8_t * wb) {
        uint32_t l;
        uint16_t h;
        std::memcpy(&l, wb + iq4_xs_off_scales_l, 4);
        std::memcpy(&h, wb + iq4_xs_off_scales_h, 2);
        const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(l)),
                                                               _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                             _mm256_set1_epi32(0x0f));
        const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                              _mm256_set1_epi32(3));
        const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
        return {_mm256_or_si256(_mm256_and_si256(sc, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(sc, 16))};
    }
    // Group g: sub-blocks 2g and 2g + 1, 16 bytes each (low nibbles, then high nibbles).
    static void group(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + iq4_xs_off_qs + 32 * g);
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        const __m256i lo = _mm256_and_si256(qs, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
        q[0] = lookup16(k_iq4nl_values, _mm256_permute2x128_si256(lo, hi, 0x20));
        q[1] = lookup16(k_iq4nl_values, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_32(s.units, v); }
    // Decode (rows8): vector 2g holds the low nibbles of sub-blocks 2g and 2g + 1 (one
    // per 128-bit lane), vector 2g + 1 their high nibbles, so a row needs no cross-lane
    // shuffle and one multiplier per group; the activation is rearranged to match once
    // per block.
    static void x_lanes(const uint8_t * xb, __m256i * xl) {
        #pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
            const __m256i a = loadu_256(xb + q8_k_off_qs + 64 * g);
            const __m256i b = loadu_256(xb + q8_k_off_qs + 64 * g + 32);
            xl[2 * g] = _mm256_permute2x128_si256(a, b, 0x20);
            xl[2 * g + 1] = _mm256_permute2x128_si256(a, b, 0x31);
        }
    }
    static void group_lanes(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + iq4_xs_off_qs + 32 * g);
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        q[0] = lookup16(k_iq4nl_values, _mm256_and_si256(qs, low4));
        q[1] = lookup16(k_iq4nl_values, _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4));
    }
    // Units 2g (low lane) and 2g + 1 (high lane) of s.units, for both vectors of group g.
    static __m256i scale_lanes(const scales & s, int v) {
        const int j = v & ~1;
        return _mm256_permutevar8x32_epi32(s.units, _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1));
    }
    static __m256i bias(const scales &) { return _mm256_setzero_si256(); }
    static __m256i mins(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<iq4_xs_format>;

}  // namespace

float vec_dot_iq4_xs_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_iq4_xs_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
