// Q8_K activation encoder with AVX2, byte for byte the scalar from_float_q8_k
// (ggml's quantize_row_q8_K_ref): the first value of largest magnitude maps to -127,
// iscale = -127 / that value, q = clamp(nearest-even(iscale * x), -128, 127),
// bsums of 16 codes, d = 1 / iscale.
#include "kernels/avx2_util.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {

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
        const __m256 sign = _mm256_set1_ps(-0.0f);
        const __m256 target = _mm256_set1_ps(amax);
        float max = 0.0f;
        for (int64_t j = 0; j < qk_k; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), target, _CMP_EQ_OQ));
            if (hits != 0) {
                max = x[j + __builtin_ctz(static_cast<unsigned>(hits))];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vscale = _mm256_set1_ps(iscale);
        __m256i group_sums[16];  // int32 lanes of each group of 16 codes
        for (int64_t k = 0; k < qk_k / 32; ++k) {
            __m256i q[4];
            #pragma GCC unroll 8
            for (int i = 0; i < 4; ++i) {
                q[i] = clamp_i32(round_nearest_even(_mm256_mul_ps(vscale, _mm256_loadu_ps(x + 32 * k + 8 * i))), -128, 127);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + q8_k_off_qs + 32 * k), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
            group_sums[2 * k] = _mm256_add_epi32(q[0], q[1]);
            group_sums[2 * k + 1] = _mm256_add_epi32(q[2], q[3]);
        }
        const __m256i s0 = reduce8(group_sums);
        const __m256i s1 = reduce8(group_sums + 8);
        // 16 sums of at most 16 * 128 in magnitude: packs_epi32 is exact here.
        const __m256i bsums = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + q8_k_off_bsums), bsums);
        const float d = 1.0f / iscale;
        std::memcpy(b + q8_k_off_d, &d, 4);
    }
}

}  // namespace skippy::kernels::avx2
