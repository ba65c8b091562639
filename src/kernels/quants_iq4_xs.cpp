// IQ4_XS: super-blocks of 256 indices into IQ4_NL's table, in 8 sub-blocks of 32 with
// 6-bit scales (offset 32) (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"
#include "kernels/value_tables.h"

#include "base/byte_io.h"
#include "base/fp16.h"

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 8;  // sub-blocks of 32 values

// The signed scales ls_j - 32.
void unpack_scales(const uint8_t * b, int32_t * sc) {
    const uint16_t h = load_u16_le(b + iq4_xs_off_scales_h);
    for (int j = 0; j < n_sub; ++j) {
        const int low = (b[iq4_xs_off_scales_l + j / 2] >> (4 * (j % 2))) & 0x0f;
        sc[j] = (low | ((h >> (2 * j)) & 3) << 4) - 32;
    }
}

void unpack_values(const uint8_t * b, int8_t * v) {
    for (int j = 0; j < n_sub; ++j) {
        uint8_t q[32];
        unpack_nibbles_32(b + iq4_xs_off_qs + 16 * j, q);
        for (int l = 0; l < 32; ++l) v[32 * j + l] = k_iq4nl_values[q[l]];
    }
}

}  // namespace

void to_float_iq4_xs(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * iq4_xs_block_bytes;
        int8_t v[qk_k];
        unpack_values(b, v);
        int32_t sc[n_sub];
        unpack_scales(b, sc);
        decode_signed_scale(f16_to_f32(load_u16_le(b + iq4_xs_off_d)), sc, n_sub, v, dst + ib * qk_k);
    }
}

// encode_signed_scale (quants_common.h) with IQ4_NL's levels and scales [-32, 31].
void from_float_iq4_xs(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        uint8_t * b = dst + ib * iq4_xs_block_bytes;
        signed_scale_block e;
        encode_signed_scale(src + ib * qk_k, signed_scale_format{n_sub, -32, 31, k_iq4nl_values, 16, false}, e);
        uint16_t h = 0;
        for (int j = 0; j < n_sub; ++j) {
            const int u = e.sc[j] + 32;
            h = static_cast<uint16_t>(h | (u >> 4) << (2 * j));
            if (j % 2 == 0) {
                b[iq4_xs_off_scales_l + j / 2] = static_cast<uint8_t>(u & 0x0f);
            } else {
                b[iq4_xs_off_scales_l + j / 2] = static_cast<uint8_t>(b[iq4_xs_off_scales_l + j / 2] | (u & 0x0f) << 4);
            }
            pack_nibbles_32(e.q + 32 * j, b + iq4_xs_off_qs + 16 * j);
        }
        store_u16_le(b + iq4_xs_off_d, e.d);
        store_u16_le(b + iq4_xs_off_scales_h, h);
    }
}

// dot_signed_scale_q8_k per super-block, added in super-block order.
float vec_dot_iq4_xs_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * iq4_xs_block_bytes;
        int8_t v[qk_k];
        unpack_values(w, v);
        int32_t sc[n_sub];
        unpack_scales(w, sc);
        sum += dot_signed_scale_q8_k(f16_to_f32(load_u16_le(w + iq4_xs_off_d)), sc, n_sub, v, x_row + ib * q8_k_block_bytes);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
