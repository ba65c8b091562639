// Q5_1 x Q8_1 with AVX-512: the Q8_1 activation encoder and the products
// (avx512_block32.h with Q8_1 activations): values are d * q + m with 5-bit codes q,
// so the integer sum is sum(q * q_x) and the offset comes in through Q8_1's s.
#include "kernels/avx512_block32.h"
#include "kernels/avx512_kernels.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

struct q5_1_format {
    static constexpr size_t block_bytes = q5_1_block_bytes;
    static constexpr bool with_q8_1 = true;
    static constexpr int offset_shift = -1;
    static __m256i codes(const uint8_t * wb) {
        return _mm256_or_si256(unpack_nibbles_32(wb + q5_1_off_qs), q5_high_bits(wb + q5_1_off_qh));
    }
    static float scale(const uint8_t * wb) { return f16_at(wb + q5_1_off_d); }
    static float min(const uint8_t * wb) { return f16_at(wb + q5_1_off_m); }
    static_assert(q5_1_off_m == q5_1_off_d + 2);
    static constexpr size_t off_scale = q5_1_off_d;  // d, then m
    static __m512i codes2(const uint8_t * wb0, const uint8_t * wb1) {
        const __mmask64 high = static_cast<__mmask64>(load_u32(wb0 + q5_1_off_qh) | static_cast<uint64_t>(load_u32(wb1 + q5_1_off_qh)) << 32);
        return q5_codes_2x32(unpack_nibbles_2x32(wb0 + q5_1_off_qs, wb1 + q5_1_off_qs), high);
    }
    static_assert(q5_1_off_m == q5_1_off_d + 2);
    static void scales16(__m512i words, __m512 & d, __m512 & m) { f16_scales(words, d, m); }
    static constexpr auto rest = avx2::mul_tile_q5_1_q8_1;
};

using kernel = block32_kernel<q5_1_format>;

}  // namespace

// Byte for byte the scalar from_float_q8_1: Q8_0's activation codes (amax with NaNs
// skipped, q = clamp(nearest-even(x * (127 / amax)), -127, 127)), d = amax / 127 and
// s = d * (sum of the codes), both rounded to f16.
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q8_1_block_bytes;
        const __m512 v0 = _mm512_loadu_ps(x);
        const __m512 v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps())));
        const float d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = clamp_i32(round_nearest_even(_mm512_mul_ps(v0, id)), -127, 127);
        const __m512i q1 = clamp_i32(round_nearest_even(_mm512_mul_ps(v1, id)), -127, 127);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b + q8_1_off_qs), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(b + q8_1_off_qs + 16), _mm512_cvtsepi32_epi8(q1));
        const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        const uint16_t dh = _cvtss_sh(d, 0);
        const uint16_t sh = _cvtss_sh(d * static_cast<float>(sum), 0);
        std::memcpy(b + q8_1_off_d, &dh, 2);
        std::memcpy(b + q8_1_off_s, &sh, 2);
    }
}

float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q5_1_q8_1(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
