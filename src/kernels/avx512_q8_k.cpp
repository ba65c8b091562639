// Q8_K activation encoder with AVX-512, byte for byte the scalar from_float_q8_k
// (ggml's quantize_row_q8_K_ref): the first value of largest magnitude maps to -127,
// iscale = -127 / that value, q = clamp(nearest-even(iscale * x), -128, 127),
// bsums of 16 codes (one vector each), d = 1 / iscale.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx512 {

void from_float_q8_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const float * x = src + ib * qk_k;
        uint8_t * b = dst + ib * q8_k_block_bytes;
        const float amax = abs_max(x, qk_k);
        if (amax == 0.0f) {
            std::memset(b, 0, q8_k_block_bytes);
            continue;
        }
        // The reference keeps the first value whose |x| is the maximum (a later value of
        // the same magnitude and opposite sign does not replace it).
        const __m512 target = _mm512_set1_ps(amax);
        float max = 0.0f;
        for (int64_t j = 0; j < qk_k; j += 16) {
            const __mmask16 hits = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), target, _CMP_EQ_OQ);
            if (hits != 0) {
                max = x[j + __builtin_ctz(static_cast<unsigned>(hits))];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 vscale = _mm512_set1_ps(iscale);
        __m512i q[16];  // group g: codes 16g .. 16g + 15
        #pragma GCC unroll 16
        for (int g = 0; g < 16; ++g) {
            q[g] = clamp_i32(round_nearest_even(_mm512_mul_ps(vscale, _mm512_loadu_ps(x + 16 * g))), -128, 127);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(b + q8_k_off_qs + 16 * g), _mm512_cvtsepi32_epi8(q[g]));
        }
        // 16 sums of at most 16 * 128 in magnitude: the int16 truncation is exact.
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + q8_k_off_bsums), _mm512_cvtepi32_epi16(reduce16(q)));
        const float d = 1.0f / iscale;
        std::memcpy(b + q8_k_off_d, &d, 4);
    }
}

}  // namespace skippy::kernels::avx512
