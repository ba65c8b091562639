// Q4_0: blocks of 32 4-bit values (offset 8) with one f16 scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"


namespace skippy::kernels::scalar {

void to_float_q4_0(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * q4_0_block_bytes;
        const float d = f16_to_f32(load_u16_le(b));
        float * y = dst + ib * qk_0;
        for (int64_t j = 0; j < qk_0 / 2; ++j) {
            y[j]            = static_cast<float>((b[2 + j] & 0x0f) - 8) * d;
            y[j + qk_0 / 2] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
        }
    }
}

// As ggml's reference: the value of largest magnitude maps to -8 exactly (d = max / -8,
// keeping its sign), which uses the asymmetric range [-8, 7] in full; the others
// round half up after the +8 offset.
void from_float_q4_0(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q4_0_block_bytes;
        const float d = max_by_magnitude(x, qk_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16_le(b, f32_to_f16(d));
        uint8_t q[32];
        // In [0.5, 16.5] for finite input (truncated); the clamp also absorbs inf/nan.
        for (int j = 0; j < 32; ++j) q[j] = truncate_code(x[j] * id + 8.5f, 15);
        pack_nibbles_32(q, b + 2);
    }
}

// dot_blocks_q8_0 (quants_common.h) with the values q_w - 8.
float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_blocks_q8_0(w_row, q4_0_block_bytes, x_row, n, [](const uint8_t * w, int8_t * v) {
        uint8_t q[32];
        unpack_nibbles_32(w + 2, q);
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(q[j] - 8);
        return f16_to_f32(load_u16_le(w));
    });
}

}  // namespace skippy::kernels::scalar
