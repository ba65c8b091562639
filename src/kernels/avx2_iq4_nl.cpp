// IQ4_NL x Q8_0 products with AVX2 (avx2_block32.h): values looked up in the table.
#include "kernels/avx2_block32.h"
#include "kernels/quants_avx2.h"
#include "kernels/value_tables.h"

namespace skippy::kernels::avx2 {
namespace {

struct iq4_nl_format {
    static constexpr size_t block_bytes = iq4_nl_block_bytes;
    static __m256i values(const uint8_t * wb) { return lookup16(k_iq4nl_values, unpack_nibbles_32(wb + iq4_nl_off_qs)); }
    static float scale(const uint8_t * wb) { return f16_at(wb + iq4_nl_off_d); }
    static __m256 scales8(const uint8_t * const wb[8]) { return gather_f16(wb); }  // d is at offset 0
};

using kernel = block32_kernel<iq4_nl_format>;

}  // namespace

float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_iq4_nl_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
