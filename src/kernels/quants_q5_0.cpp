// Q5_0: blocks of 32 5-bit values (offset 16) with one f16 scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"


namespace skippy::kernels::scalar {

void to_float_q5_0(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * q5_0_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + q5_0_off_d));
        uint8_t q[32];
        unpack_q5_codes(b + q5_0_off_qh, b + q5_0_off_qs, q);
        for (int j = 0; j < 32; ++j) dst[ib * qk_0 + j] = static_cast<float>(q[j] - 16) * d;
    }
}

// As ggml's reference: the value of largest magnitude maps to -16 exactly (d = max /
// -16, keeping its sign); the others round half up after the +16 offset.
void from_float_q5_0(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * q5_0_block_bytes;
        const float d = max_by_magnitude(x, qk_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        store_u16_le(b + q5_0_off_d, f32_to_f16(d));
        uint8_t q[32];
        // In [0.5, 32.5] for finite input (truncated); the clamp also absorbs inf/nan.
        for (int j = 0; j < 32; ++j) q[j] = truncate_code(x[j] * id + 16.5f, 31);
        pack_q5_codes(q, b + q5_0_off_qh, b + q5_0_off_qs);
    }
}

// dot_blocks_q8_0 (quants_common.h) with the values q_w - 16.
float vec_dot_q5_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_blocks_q8_0(w_row, q5_0_block_bytes, x_row, n, [](const uint8_t * w, int8_t * v) {
        uint8_t q[32];
        unpack_q5_codes(w + q5_0_off_qh, w + q5_0_off_qs, q);
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(q[j] - 16);
        return f16_to_f32(load_u16_le(w + q5_0_off_d));
    });
}

}  // namespace skippy::kernels::scalar
