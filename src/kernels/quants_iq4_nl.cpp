// IQ4_NL: blocks of 32 4-bit indices into a fixed non-linear table, with one f16
// scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"
#include "kernels/value_tables.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cmath>

namespace skippy::kernels::scalar {

void to_float_iq4_nl(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * iq4_nl_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + iq4_nl_off_d));
        uint8_t q[32];
        unpack_nibbles_32(b + iq4_nl_off_qs, q);
        for (int j = 0; j < 32; ++j) dst[ib * qk_0 + j] = d * static_cast<float>(k_iq4nl_values[q[j]]);
    }
}

// A plain encoder with one refinement: the value of largest magnitude maps to the
// table's -127 end (d = max / -127), every value takes its nearest level, then d
// becomes the least-squares scale for those levels (sum x * l / sum l^2) and the
// levels are chosen again against the stored d. Deterministic; llama-quantize
// searches a few more scales.
void from_float_iq4_nl(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * iq4_nl_block_bytes;
        uint8_t q[32];
        float d = max_by_magnitude(x, 32) / static_cast<float>(k_iq4nl_values[0]);
        if (d != 0.0f && std::isfinite(d)) {
            float sum_xl = 0.0f, sum_ll = 0.0f;
            for (int j = 0; j < 32; ++j) {
                const float l = static_cast<float>(k_iq4nl_values[nearest_level(k_iq4nl_values, 16, x[j] / d)]);
                sum_xl += x[j] * l;
                sum_ll += l * l;
            }
            const float refined = sum_xl / sum_ll;
            if (std::isfinite(refined) && refined != 0.0f) d = refined;
        }
        const f16_bits d_bits = f32_to_f16(d);
        const float ds = f16_to_f32(d_bits);
        for (int j = 0; j < 32; ++j) {
            q[j] = static_cast<uint8_t>(ds != 0.0f ? nearest_level(k_iq4nl_values, 16, x[j] / ds) : 8);
        }
        store_u16_le(b + iq4_nl_off_d, d_bits);
        pack_nibbles_32(q, b + iq4_nl_off_qs);
    }
}

// dot_blocks_q8_0 (quants_common.h) with the table's values.
float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_blocks_q8_0(w_row, iq4_nl_block_bytes, x_row, n, [](const uint8_t * w, int8_t * v) {
        uint8_t q[32];
        unpack_nibbles_32(w + iq4_nl_off_qs, q);
        for (int j = 0; j < 32; ++j) v[j] = k_iq4nl_values[q[j]];
        return f16_to_f32(load_u16_le(w + iq4_nl_off_d));
    });
}

}  // namespace skippy::kernels::scalar
