// Q8_0 with AVX2: activation encoder and Q8_0 x Q8_0 products.
//
// The products are avx2_block32.h's (per block, the exact int32 sum of q_w * q_x,
// then sum += sumi * (d_w * d_x) in block order, as quants_q8_0.cpp).
#include "kernels/avx2_block32.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t bb = q8_0_block_bytes;

// Weights are int8 codes as they are; |w| <= 128 with activations in [-127, 127]
// keeps maddubs' pair sums within 2 * 128 * 127.
struct q8_0_format {
    static constexpr size_t block_bytes = q8_0_block_bytes;
    static __m256i values(const uint8_t * wb) { return loadu_256(wb + 2); }
    static float scale(const uint8_t * wb) { return f16_at(wb); }
    static __m256 scales8(const uint8_t * const wb[8]) { return gather_f16(wb); }
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
        const float amax = abs_max(x, qk_0);
        const uint16_t d = _cvtss_sh(amax / 127.0f, 0);
        std::memcpy(b, &d, 2);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k) {
            q[k] = clamp_i32(round_nearest_even(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id)), -127, 127);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + 2), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    }
}

float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q8_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
