// Q3_K x Q8_K products with AVX2 (avx2_superblock.h): values are codes 0..7 (2 low
// bits and the hmask bit) minus 4; the -4 goes through the bsums as a bias.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct q3_k_format {
    static constexpr size_t block_bytes = q3_k_block_bytes;
    static constexpr size_t off_d = q3_k_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr bool has_min = false, has_bias = true, is_signed = false;
    static constexpr int n_groups = 2, per_group = 4;
    struct scales {
        __m256i sc;    // 16 signed scales s_j - 32 (int16, scales16_even_odd)
        __m256i bias;  // -4 * (s_j - 32) (int16)
    };
    // Scale j: low 4 bits from nibble j / 8 of byte j % 8, high 2 bits from bits
    // 2 * (j / 4) of byte 8 + j % 4 (blocks.h). One 16-byte load that ends with the
    // 12 scale bytes (it stays inside the block), then byte shuffles and per-lane
    // shifts put every field at the bottom of byte j.
    static_assert(q3_k_off_scales >= 4 && q3_k_off_scales + 12 == q3_k_off_d);
    static scales load_scales(const uint8_t * wb) {
        const __m128i raw = loadu_128(wb + q3_k_off_scales - 4);  // raw byte 4 + i = scale byte i
        const __m128i a = _mm_shuffle_epi8(raw, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
        const __m128i lows = _mm_and_si128(_mm_srlv_epi64(a, _mm_setr_epi32(0, 0, 4, 0)), _mm_set1_epi8(0x0f));
        const __m128i b = _mm_shuffle_epi8(raw, _mm_setr_epi8(12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15));
        const __m128i highs = _mm_and_si128(_mm_srlv_epi32(b, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
        const __m128i sc = _mm_sub_epi8(_mm_or_si128(lows, _mm_slli_epi16(highs, 4)), _mm_set1_epi8(32));
        return {scales16_even_odd(sc), _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 2))};
    }
    // Half g: code of value 128g + 32k + l = ((qs[32g + l] >> 2k) & 3) | 4 * bit (4g + k)
    // of hmask[l]. 16-bit shifts move bits across bytes; the masks drop what crossed.
    static void group(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + q3_k_off_qs + 32 * g);
        const __m256i hm = _mm256_srl_epi16(loadu_256(wb + q3_k_off_hmask), _mm_cvtsi32_si128(4 * g));
        const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
        q[0] = _mm256_or_si256(_mm256_and_si256(qs, three), _mm256_and_si256(_mm256_slli_epi16(hm, 2), four));
        q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 2), three), _mm256_and_si256(_mm256_slli_epi16(hm, 1), four));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), three), _mm256_and_si256(hm, four));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 6), three), _mm256_and_si256(_mm256_srli_epi16(hm, 1), four));
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_16(s.sc, v); }
    static __m256i bias(const scales & s) { return s.bias; }
    // Decode's form of the bias: -4 * bsums in scales16_even_odd's order, once per
    // activation block (|4 * bsum| <= 4 * 16 * 127 fits int16), times the scales
    // themselves, which saves widening, shifting and negating them on every row.
    static __m256i x_bias(const uint8_t * xb) {
        const __m256i eo = bsums_even_odd(xb);
        return _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(eo, 2));
    }
    static __m256i x_bias_scales(const scales & s) { return s.sc; }
    static __m256i mins(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<q3_k_format>;

}  // namespace

float vec_dot_q3_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q3_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
