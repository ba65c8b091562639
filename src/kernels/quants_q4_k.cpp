// Q4_K: super-blocks of 256 4-bit values in 8 sub-blocks of 32, each sub-block with a
// 6-bit scale and a 6-bit min (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 8;  // sub-blocks of 32 values

void unpack_scales(const uint8_t * b, int32_t * sc, int32_t * m) {
    for (int j = 0; j < n_sub; ++j) unpack_scale_min_k4(b + q4_k_off_scales, j, sc[j], m[j]);
}

}  // namespace

void to_float_q4_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q4_k_block_bytes;
        uint8_t q[qk_k];
        unpack_nibbles_k(b + q4_k_off_qs, q);
        int32_t sc[n_sub], m[n_sub];
        unpack_scales(b, sc, m);
        decode_min_scale(f16_to_f32(load_u16_le(b + q4_k_off_d)), f16_to_f32(load_u16_le(b + q4_k_off_dmin)), sc, m,
                         n_sub, q, dst + ib * qk_k);
    }
}

// encode_min_scale (quants_common.h) with 4-bit codes and 6-bit scales and mins.
void from_float_q4_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        uint8_t * b = dst + ib * q4_k_block_bytes;
        min_scale_block e;
        encode_min_scale(src + ib * qk_k, min_scale_format{n_sub, 15, 63}, e);
        store_u16_le(b + q4_k_off_d, e.d);
        store_u16_le(b + q4_k_off_dmin, e.dmin);
        pack_scales_mins_k4(e.sc, e.m, b + q4_k_off_scales);
        pack_nibbles_k(e.q, b + q4_k_off_qs);
    }
}

// dot_min_scale_q8_k per super-block (exact integer sums, then
// (d_w * d_x) * isum - (dmin_w * d_x) * imin), added to the sum in super-block order.
float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q4_k_block_bytes;
        uint8_t q[qk_k];
        unpack_nibbles_k(w + q4_k_off_qs, q);
        int32_t sc[n_sub], m[n_sub];
        unpack_scales(w, sc, m);
        sum += dot_min_scale_q8_k(f16_to_f32(load_u16_le(w + q4_k_off_d)), f16_to_f32(load_u16_le(w + q4_k_off_dmin)), sc,
                                  m, n_sub, q, x_row + ib * q8_k_block_bytes);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
