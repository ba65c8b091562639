// Q8_K: the activation format the K-quants are dotted with (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"
#include "kernels/rounding.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cstring>

namespace skippy::kernels::scalar {

void to_float_q8_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q8_k_block_bytes;
        const float d = bits_to_float(load_u32_le(b + q8_k_off_d));
        for (int64_t j = 0; j < qk_k; ++j) {
            dst[ib * qk_k + j] = d * static_cast<float>(static_cast<int8_t>(b[q8_k_off_qs + j]));
        }
    }
}

// As ggml's quantize_row_q8_K_ref: the value of largest magnitude maps to -127 (its
// sign kept in the scale), others round to nearest even; d = 1 / iscale in f32.
void from_float_q8_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const float * x = src + ib * qk_k;
        uint8_t * b = dst + ib * q8_k_block_bytes;
        const float max = max_by_magnitude(x, qk_k);
        if (max == 0.0f) {
            std::memset(b, 0, q8_k_block_bytes);
            continue;
        }
        const float iscale = -127.0f / max;
        int8_t q[qk_k];
        for (int64_t j = 0; j < qk_k; ++j) {
            q[j] = static_cast<int8_t>(clamp_i32(round_nearest_even(iscale * x[j]), -128, 127));
            b[q8_k_off_qs + j] = static_cast<uint8_t>(q[j]);
        }
        for (int64_t g = 0; g < qk_k / 16; ++g) {
            int32_t s = 0;
            for (int64_t j = 0; j < 16; ++j) s += q[16 * g + j];
            store_u16_le(b + q8_k_off_bsums + 2 * g, static_cast<uint16_t>(static_cast<int16_t>(s)));
        }
        store_u32_le(b + q8_k_off_d, float_to_bits(1.0f / iscale));
    }
}

}  // namespace skippy::kernels::scalar
