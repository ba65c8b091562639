// Q4_K x Q8_K products with AVX2 (avx2_superblock.h): 4-bit codes, 6-bit scales and
// mins per 32 values.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct q4_k_format {
    static constexpr size_t block_bytes = q4_k_block_bytes;
    static constexpr size_t off_d = q4_k_off_d;
    static constexpr size_t off_dmin = q4_k_off_dmin;
    static constexpr bool has_min = true, has_bias = false, is_signed = false;
    static constexpr int n_groups = 4, per_group = 2;
    using scales = k4_scales;
    static scales load_scales(const uint8_t * wb) { return unpack_scales_k4(wb + q4_k_off_scales); }
    // Group g: values 64g + l are the low nibbles of qs[32g + l], 64g + 32 + l the high.
    static void group(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + q4_k_off_qs + 32 * g);
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        q[0] = _mm256_and_si256(qs, low4);
        q[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_32(s.sc_units, v); }
    static __m256i mins(const scales & s) { return s.m; }
    static __m256i bias(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<q4_k_format>;

}  // namespace

float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q4_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
