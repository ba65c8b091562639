// Q5_1: blocks of 32 5-bit values with an f16 scale and an f16 offset (layout in
// blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cfloat>

namespace skippy::kernels::scalar {

void to_float_q5_1(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * q5_1_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + q5_1_off_d));
        const float m = f16_to_f32(load_u16_le(b + q5_1_off_m));
        uint8_t q[32];
        unpack_q5_codes(b + q5_1_off_qh, b + q5_1_off_qs, q);
        for (int j = 0; j < 32; ++j) dst[ib * qk_0 + j] = static_cast<float>(q[j]) * d + m;
    }
}

// As ggml's reference: d = (max - min) / 31, m = min, codes round half up from the
// unrounded d and min.
void from_float_q5_1(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q5_1_block_bytes;
        float min = FLT_MAX;
        float max = -FLT_MAX;
        for (int64_t j = 0; j < qk_0; ++j) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16_le(b + q5_1_off_d, f32_to_f16(d));
        store_u16_le(b + q5_1_off_m, f32_to_f16(min));
        uint8_t q[32];
        for (int j = 0; j < 32; ++j) q[j] = truncate_code((x[j] - min) * id + 0.5f, 31);
        pack_q5_codes(q, b + q5_1_off_qh, b + q5_1_off_qs);
    }
}

// Per block: exact int32 sum of q_w * q_x, then
//   sum += (d_w * d_x) * sumi + m_w * s_x
// (s_x = d_x * sum(q_x) carries the offset's share).
float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * w = w_row + ib * q5_1_block_bytes;
        const uint8_t * x = x_row + ib * q8_1_block_bytes;
        uint8_t q[32];
        unpack_q5_codes(w + q5_1_off_qh, w + q5_1_off_qs, q);
        int32_t sumi = 0;
        for (int j = 0; j < 32; ++j) sumi += q[j] * static_cast<int8_t>(x[q8_1_off_qs + j]);
        const float d = f16_to_f32(load_u16_le(w + q5_1_off_d)) * f16_to_f32(load_u16_le(x + q8_1_off_d));
        const float m = f16_to_f32(load_u16_le(w + q5_1_off_m)) * f16_to_f32(load_u16_le(x + q8_1_off_s));
        sum += d * static_cast<float>(sumi) + m;
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
