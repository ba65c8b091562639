// Q2_K: super-blocks of 256 2-bit values in 16 sub-blocks of 16, each with a 4-bit
// scale and a 4-bit min (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 16;  // sub-blocks of 16 values

void unpack_scales(const uint8_t * b, int32_t * sc, int32_t * m) {
    for (int j = 0; j < n_sub; ++j) {
        sc[j] = b[q2_k_off_scales + j] & 0x0f;
        m[j] = b[q2_k_off_scales + j] >> 4;
    }
}

}  // namespace

void to_float_q2_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q2_k_block_bytes;
        uint8_t q[qk_k];
        unpack_crumbs_k(b + q2_k_off_qs, q);
        int32_t sc[n_sub], m[n_sub];
        unpack_scales(b, sc, m);
        decode_min_scale(f16_to_f32(load_u16_le(b + q2_k_off_d)), f16_to_f32(load_u16_le(b + q2_k_off_dmin)), sc, m,
                         n_sub, q, dst + ib * qk_k);
    }
}

// encode_min_scale (quants_common.h) with 2-bit codes and 4-bit scales and mins.
void from_float_q2_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        uint8_t * b = dst + ib * q2_k_block_bytes;
        min_scale_block e;
        encode_min_scale(src + ib * qk_k, min_scale_format{n_sub, 3, 15}, e);
        for (int j = 0; j < n_sub; ++j) b[q2_k_off_scales + j] = static_cast<uint8_t>(e.sc[j] | (e.m[j] << 4));
        pack_crumbs_k(e.q, b + q2_k_off_qs);
        store_u16_le(b + q2_k_off_d, e.d);
        store_u16_le(b + q2_k_off_dmin, e.dmin);
    }
}

// dot_min_scale_q8_k per super-block, added in super-block order.
float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q2_k_block_bytes;
        uint8_t q[qk_k];
        unpack_crumbs_k(w + q2_k_off_qs, q);
        int32_t sc[n_sub], m[n_sub];
        unpack_scales(w, sc, m);
        sum += dot_min_scale_q8_k(f16_to_f32(load_u16_le(w + q2_k_off_d)), f16_to_f32(load_u16_le(w + q2_k_off_dmin)), sc,
                                  m, n_sub, q, x_row + ib * q8_k_block_bytes);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
