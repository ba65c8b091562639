// Q2_K x Q8_K products with AVX2 (avx2_superblock.h): 2-bit codes, 4-bit scales and
// mins per 16 values.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct q2_k_format {
    static constexpr size_t block_bytes = q2_k_block_bytes;
    static constexpr size_t off_d = q2_k_off_d;
    static constexpr size_t off_dmin = q2_k_off_dmin;
    static constexpr bool has_min = true, has_bias = false, is_signed = false;
    static constexpr int n_groups = 2, per_group = 4;
    struct scales {
        __m256i sc;    // 16 scales (int16, scales16_even_odd's order)
        __m256i m;     // 16 mins (int16), one per 16 values as bsums are
        __m256i m_eo;  // the mins in sc's order (decode, against bsums_even_odd)
    };
    // Byte j: scale j in the low nibble, min j in the high one. Put in even/odd order
    // and widened once, both come out of the int16 lanes with one operation each.
    static scales load_scales(const uint8_t * wb) {
        const __m128i raw = loadu_128(wb + q2_k_off_scales);
        const __m256i eo = _mm256_cvtepu8_epi16(
            _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
        const __m128i low4 = _mm_set1_epi8(0x0f);
        return {_mm256_and_si256(eo, _mm256_set1_epi16(0x0f)),
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)), _mm256_srli_epi16(eo, 4)};
    }
    // Half g: value 128g + 32k + l is (qs[32g + l] >> 2k) & 3.
    static void group(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + q2_k_off_qs + 32 * g);
        const __m256i three = _mm256_set1_epi8(3);
        q[0] = _mm256_and_si256(qs, three);
        q[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 2), three);
        q[2] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), three);
        q[3] = _mm256_and_si256(_mm256_srli_epi16(qs, 6), three);
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_16(s.sc, v); }
    static __m256i mins(const scales & s) { return s.m; }
    static __m256i x_mins(const scales & s) { return s.m_eo; }
    static __m256i bias(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<q2_k_format>;

}  // namespace

float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q2_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
