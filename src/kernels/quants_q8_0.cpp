// Q8_0: blocks of 32 int8 values with one f16 scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"
#include "kernels/rounding.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cmath>
#include <cstring>

namespace skippy::kernels::scalar {
namespace {

float block_amax(const float * x) {
    float amax = 0.0f;
    for (int64_t j = 0; j < qk_0; ++j) {
        const float a = std::fabs(x[j]);
        if (a > amax) amax = a;
    }
    return amax;
}

}  // namespace

void to_float_q8_0(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * q8_0_block_bytes;
        const float d = f16_to_f32(load_u16_le(b));
        for (int64_t j = 0; j < qk_0; ++j) {
            dst[ib * qk_0 + j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
        }
    }
}

void from_float_q8_0(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q8_0_block_bytes;
        const float amax = block_amax(x);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16_le(b, f32_to_f16(d));
        for (int64_t j = 0; j < qk_0; ++j) {
            b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_away_clamped(x[j] * id, -127, 127)));
        }
    }
}

void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q8_0_block_bytes;
        const float amax = block_amax(x);
        store_u16_le(b, f32_to_f16(amax / 127.0f));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t j = 0; j < qk_0; ++j) {
            const int32_t q = clamp_i32(round_nearest_even(x[j] * id), -127, 127);
            b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
    }
}

// dot_blocks_q8_0 (quants_common.h) with the codes as values.
float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_blocks_q8_0(w_row, q8_0_block_bytes, x_row, n, [](const uint8_t * w, int8_t * v) {
        std::memcpy(v, w + 2, 32);
        return f16_to_f32(load_u16_le(w));
    });
}

}  // namespace skippy::kernels::scalar
