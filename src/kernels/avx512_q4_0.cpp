// Q4_0 x Q8_0 products with AVX-512 (avx512_block32.h): values are the nibbles minus 8.
#include "kernels/avx512_block32.h"
#include "kernels/avx512_kernels.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

struct q4_0_format {
    static constexpr size_t block_bytes = q4_0_block_bytes;
    static constexpr bool with_q8_1 = false;
    static constexpr int offset_shift = 3;
    static __m256i codes(const uint8_t * wb) { return unpack_nibbles_32(wb + 2); }
    static float scale(const uint8_t * wb) { return f16_at(wb); }
    static constexpr size_t off_scale = 0;
    static __m512i codes2(const uint8_t * wb0, const uint8_t * wb1) { return unpack_nibbles_2x32(wb0 + 2, wb1 + 2); }
    static void scales16(__m512i words, __m512 & d, __m512 & m) { f16_scales(words, d, m); }
    static constexpr auto rest = avx2::mul_tile_q4_0_q8_0;
};

using kernel = block32_kernel<q4_0_format>;

}  // namespace

float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q4_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
