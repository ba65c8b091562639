// Q6_K x Q8_K products with AVX2 (avx2_superblock.h): values are 6-bit codes (4 low
// bits from ql, 2 high bits from qh) minus 32; the -32 goes through the bsums as a
// bias; signed 8-bit scales per 16 values.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct q6_k_format {
    static constexpr size_t block_bytes = q6_k_block_bytes;
    static constexpr size_t off_d = q6_k_off_d;
    static constexpr size_t off_dmin = 0;
    static constexpr bool has_min = false, has_bias = true, is_signed = false;
    static constexpr int n_groups = 2, per_group = 4;
    struct scales {
        __m256i sc;    // 16 scales (int16, scales16_even_odd)
        __m256i bias;  // -32 * scale (int16; |32 * scale| <= 4096, madd lanes within 2 * 4096 * 2048)
    };
    static scales load_scales(const uint8_t * wb) {
        const __m128i sc = loadu_128(wb + q6_k_off_scales);
        return {scales16_even_odd(sc), _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5))};
    }
    // Half h: the codes (0..63) of values 128h + 32k + l, l < 32: low 4 bits from ql
    // (bytes l and l + 32 of the half, low then high nibbles), high 2 bits from qh bits
    // 2k, 2k + 1 (blocks.h). 16-bit shifts move bits across bytes; the masks drop what
    // crossed.
    static void group(const uint8_t * wb, int h, __m256i * q) {
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        const __m256i bits45 = _mm256_set1_epi8(0x30);
        const __m256i ql0 = loadu_256(wb + q6_k_off_ql + 64 * h);
        const __m256i ql1 = loadu_256(wb + q6_k_off_ql + 64 * h + 32);
        const __m256i qh = loadu_256(wb + q6_k_off_qh + 32 * h);
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_16(s.sc, v); }
    static __m256i bias(const scales & s) { return s.bias; }
    // Decode's form of the bias: -16 * bsums in scales16_even_odd's order, once per
    // activation block (|16 * bsum| <= 16 * 16 * 127 = 32512 fits int16), times twice
    // the scales (|2 * scale| <= 256).
    static __m256i x_bias(const uint8_t * xb) {
        const __m256i eo = bsums_even_odd(xb);
        return _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(eo, 4));
    }
    static __m256i x_bias_scales(const scales & s) { return _mm256_add_epi16(s.sc, s.sc); }
    static __m256i mins(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<q6_k_format>;

}  // namespace

float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q6_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
