// IQ4_NL x Q8_0 products with AVX-512 (avx512_block32.h): values are the non-linear
// table's entries, taken as codes table + 128 (offset 128).
#include "kernels/avx512_block32.h"
#include "kernels/avx512_kernels.h"
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

struct iq4_nl_format {
    static constexpr size_t block_bytes = iq4_nl_block_bytes;
    static constexpr bool with_q8_1 = false;
    static constexpr int offset_shift = 7;
    static __m256i codes(const uint8_t * wb) { return lookup16(k_codes.v, unpack_nibbles_32(wb + iq4_nl_off_qs)); }
    static float scale(const uint8_t * wb) { return f16_at(wb + iq4_nl_off_d); }
    static constexpr size_t off_scale = iq4_nl_off_d;
    static __m512i codes2(const uint8_t * wb0, const uint8_t * wb1) {
        return lookup16_x4(k_codes.v, unpack_nibbles_2x32(wb0 + iq4_nl_off_qs, wb1 + iq4_nl_off_qs));
    }
    static void scales16(__m512i words, __m512 & d, __m512 & m) { f16_scales(words, d, m); }
    static constexpr auto rest = avx2::mul_tile_iq4_nl_q8_0;
};

using kernel = block32_kernel<iq4_nl_format>;

}  // namespace

float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_iq4_nl_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
