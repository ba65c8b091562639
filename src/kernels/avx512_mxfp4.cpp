// MXFP4 x Q8_0 products with AVX-512 (avx512_block32.h): values are twice the E2M1
// values (value_tables.h), taken as codes value + 128 (offset 128); the block scale is
// 2^(e - 128) from the E8M0 exponent.
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
    for (int i = 0; i < 16; ++i) t.v[i] = static_cast<uint8_t>(k_mxfp4_values[i] + 128);
    return t;
}();

struct mxfp4_format {
    static constexpr size_t block_bytes = mxfp4_block_bytes;
    static constexpr bool with_q8_1 = false;
    static constexpr int offset_shift = 7;
    static __m256i codes(const uint8_t * wb) { return lookup16(k_codes.v, unpack_nibbles_32(wb + mxfp4_off_qs)); }
    static float scale(const uint8_t * wb) {
        const uint32_t bits = mxfp4_scale_bits(wb[mxfp4_off_e]);
        float d;
        std::memcpy(&d, &bits, 4);
        return d;
    }
    static constexpr size_t off_scale = mxfp4_off_e;  // the exponent byte (and 3 code bytes)
    static __m512i codes2(const uint8_t * wb0, const uint8_t * wb1) {
        return lookup16_x4(k_codes.v, unpack_nibbles_2x32(wb0 + mxfp4_off_qs, wb1 + mxfp4_off_qs));
    }
    // mxfp4_scale_bits per lane: e < 2 gives 0x00200000 << e, else (e - 1) << 23.
    static void scales16(__m512i words, __m512 & d, __m512 & m) {
        const __m512i e = _mm512_and_si512(words, _mm512_set1_epi32(0xff));
        const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        d = _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
        m = d;
    }
    static constexpr auto rest = avx2::mul_tile_mxfp4_q8_0;
};

using kernel = block32_kernel<mxfp4_format>;

}  // namespace

float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_mxfp4_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                         int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
