// Q8_1: the activation format Q5_1 is dotted with (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_scalar.h"
#include "kernels/rounding.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cmath>

namespace skippy::kernels::scalar {

void to_float_q8_1(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * q8_1_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + q8_1_off_d));
        for (int64_t j = 0; j < qk_0; ++j) {
            dst[ib * qk_0 + j] = static_cast<float>(static_cast<int8_t>(b[q8_1_off_qs + j])) * d;
        }
    }
}

// As Q8_0's activation encoder (amax skips NaNs; codes in [-127, 127]), plus the sum
// of the codes times the unrounded d.
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q8_1_block_bytes;
        float amax = 0.0f;
        for (int64_t j = 0; j < qk_0; ++j) {
            const float a = std::fabs(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t j = 0; j < qk_0; ++j) {
            const int32_t q = clamp_i32(round_nearest_even(x[j] * id), -127, 127);
            b[q8_1_off_qs + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
            sum += q;
        }
        store_u16_le(b + q8_1_off_d, f32_to_f16(d));
        store_u16_le(b + q8_1_off_s, f32_to_f16(d * static_cast<float>(sum)));
    }
}

}  // namespace skippy::kernels::scalar
