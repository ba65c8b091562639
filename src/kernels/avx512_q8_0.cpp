// Q8_0 with AVX-512: activation encoder and Q8_0 x Q8_0 products.
//
// The products are avx512_block32.h's, with the weight codes taken as w + 128 (offset
// 128); the reference is quants_q8_0.cpp's (per block, the exact int32 sum of
// q_w * q_x, then sum += sumi * (d_w * d_x) in block order).
#include "kernels/avx512_block32.h"
#include "kernels/avx512_kernels.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

constexpr size_t bb = q8_0_block_bytes;

struct q8_0_format {
    static constexpr size_t block_bytes = q8_0_block_bytes;
    static constexpr bool with_q8_1 = false;
    static constexpr int offset_shift = 7;
    static __m256i codes(const uint8_t * wb) { return _mm256_xor_si256(loadu_256(wb + 2), _mm256_set1_epi8(static_cast<char>(0x80))); }
    static float scale(const uint8_t * wb) { return f16_at(wb); }
    static constexpr size_t off_scale = 0;
    static __m512i codes2(const uint8_t * wb0, const uint8_t * wb1) {
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(loadu_256(wb0 + 2)), loadu_256(wb1 + 2), 1);
        return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
    }
    static void scales16(__m512i words, __m512 & d, __m512 & m) { f16_scales(words, d, m); }
    static constexpr auto rest = avx2::mul_tile_q8_0_q8_0;
};

using kernel = block32_kernel<q8_0_format>;

}  // namespace

// Byte for byte the scalar from_float_q8_0_activation: the same amax (NaNs skipped),
// d = amax / 127 rounded to f16 by F16C (as f32_to_f16 rounds), and
// q = clamp(nearest-even(x * (127 / amax)), -127, 127) with the same rounding trick.
void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * bb;
        const __m512 v0 = _mm512_loadu_ps(x);
        const __m512 v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps())));
        const uint16_t d = _cvtss_sh(amax / 127.0f, 0);
        std::memcpy(b, &d, 2);
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = clamp_i32(round_nearest_even(_mm512_mul_ps(v0, id)), -127, 127);
        const __m512i q1 = clamp_i32(round_nearest_even(_mm512_mul_ps(v1, id)), -127, 127);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b + 2), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b + 18), _mm512_cvtsepi32_epi8(q1));
    }
}

float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q8_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
