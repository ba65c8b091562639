// MXFP4: blocks of 32 E2M1 values with one shared E8M0 exponent (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"
#include "kernels/value_tables.h"

#include "base/fp16.h"

#include <algorithm>
#include <cmath>

namespace skippy::kernels::scalar {
namespace {

float block_scale(uint8_t e) { return bits_to_float(mxfp4_scale_bits(e)); }

}  // namespace

void to_float_mxfp4(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * b = src + ib * mxfp4_block_bytes;
        const float d = block_scale(b[mxfp4_off_e]);
        uint8_t q[32];
        unpack_nibbles_32(b + mxfp4_off_qs, q);
        for (int j = 0; j < 32; ++j) dst[ib * qk_0 + j] = static_cast<float>(k_mxfp4_values[q[j]]) * d;
    }
}

// As ggml's reference (the OCP rule): the shared exponent is floor(log2(amax)) minus
// E2M1's largest exponent (2), so amax lands in [4, 8) element units, and each value
// takes the code whose value is nearest (the first of equals; values past 6 units
// clip to 6). floor(log2) is read exactly from the float's exponent, not from log2f.
void from_float_mxfp4(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * mxfp4_block_bytes;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));  // NaNs skipped
        int e = 0;
        if (amax > 0.0f) {
            int exp2 = 0;
            std::frexp(std::min(amax, 3.4028235e38f), &exp2);  // amax = m * 2^exp2, m in [0.5, 1)
            e = std::clamp(exp2 - 1 - 2 + 127, 0, 254);
        }
        b[mxfp4_off_e] = static_cast<uint8_t>(e);
        const float d = block_scale(static_cast<uint8_t>(e));
        uint8_t q[32];
        for (int j = 0; j < 32; ++j) {
            int best = 0;
            float best_err = std::fabs(static_cast<float>(k_mxfp4_values[0]) * d - x[j]);
            for (int i = 1; i < 16; ++i) {
                const float err = std::fabs(static_cast<float>(k_mxfp4_values[i]) * d - x[j]);
                if (err < best_err) {
                    best = i;
                    best_err = err;
                }
            }
            q[j] = static_cast<uint8_t>(best);
        }
        pack_nibbles_32(q, b + mxfp4_off_qs);
    }
}

// dot_blocks_q8_0 (quants_common.h) with the doubled E2M1 values and d_w = 2^(e - 128).
float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_blocks_q8_0(w_row, mxfp4_block_bytes, x_row, n, [](const uint8_t * w, int8_t * v) {
        uint8_t q[32];
        unpack_nibbles_32(w + mxfp4_off_qs, q);
        for (int j = 0; j < 32; ++j) v[j] = k_mxfp4_values[q[j]];
        return block_scale(w[mxfp4_off_e]);
    });
}

}  // namespace skippy::kernels::scalar
