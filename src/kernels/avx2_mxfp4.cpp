// MXFP4 x Q8_0 products with AVX2 (avx2_block32.h): values looked up in the doubled
// E2M1 table, scale 2^(e - 128) built from the exponent byte.
#include "kernels/avx2_block32.h"
#include "kernels/quants_avx2.h"
#include "kernels/value_tables.h"

namespace skippy::kernels::avx2 {
namespace {

struct mxfp4_format {
    static constexpr size_t block_bytes = mxfp4_block_bytes;
    static __m256i values(const uint8_t * wb) { return lookup16(k_mxfp4_values, unpack_nibbles_32(wb + mxfp4_off_qs)); }
    static float scale(const uint8_t * wb) {
        const uint32_t bits = mxfp4_scale_bits(wb[mxfp4_off_e]);
        float d;
        std::memcpy(&d, &bits, 4);
        return d;
    }
    // mxfp4_scale_bits on eight exponents at once: 0x00200000 << e below 2, else
    // (e - 1) << 23.
    static __m256 scales8(const uint8_t * const wb[8]) {
        const __m256i e = _mm256_setr_epi32(wb[0][mxfp4_off_e], wb[1][mxfp4_off_e], wb[2][mxfp4_off_e], wb[3][mxfp4_off_e],
                                            wb[4][mxfp4_off_e], wb[5][mxfp4_off_e], wb[6][mxfp4_off_e], wb[7][mxfp4_off_e]);
        const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
    }
};

using kernel = block32_kernel<mxfp4_format>;

}  // namespace

float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_mxfp4_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                         int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
