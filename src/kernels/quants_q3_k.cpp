// Q3_K: super-blocks of 256 3-bit values (offset 4) in 16 sub-blocks of 16, each with a
// 6-bit scale (offset 32) (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cstring>

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 16;  // sub-blocks of 16 values

// The signed scales s_j - 32.
void unpack_scales(const uint8_t * b, int32_t * sc) {
    const uint8_t * s = b + q3_k_off_scales;
    for (int j = 0; j < n_sub; ++j) {
        const int low = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | high << 4) - 32;
    }
}

// The 256 values in [-4, 3], in value order: 2 low bits as Q2_K, plus 4 when bit
// (4h + k) of hmask[l] is set, minus 4.
void unpack_values(const uint8_t * b, int8_t * v) {
    uint8_t q[qk_k];
    unpack_crumbs_k(b + q3_k_off_qs, q);
    for (int i = 0; i < qk_k; ++i) {
        const int bit = (b[q3_k_off_hmask + i % 32] >> (i / 32)) & 1;
        v[i] = static_cast<int8_t>(q[i] + 4 * bit - 4);
    }
}

}  // namespace

void to_float_q3_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q3_k_block_bytes;
        int8_t v[qk_k];
        unpack_values(b, v);
        int32_t sc[n_sub];
        unpack_scales(b, sc);
        decode_signed_scale(f16_to_f32(load_u16_le(b + q3_k_off_d)), sc, n_sub, v, dst + ib * qk_k);
    }
}

// encode_signed_scale (quants_common.h) with the levels [-4, 3] and scales [-32, 31].
void from_float_q3_k(const float * src, uint8_t * dst, int64_t n) {
    static constexpr int8_t levels[8] = {-4, -3, -2, -1, 0, 1, 2, 3};
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        uint8_t * b = dst + ib * q3_k_block_bytes;
        signed_scale_block e;
        encode_signed_scale(src + ib * qk_k, signed_scale_format{n_sub, -32, 31, levels, 8, true}, e);
        std::memset(b, 0, q3_k_block_bytes);
        pack_crumbs_k(e.q, b + q3_k_off_qs);  // level index = value + 4: low 2 bits, then the high bit
        for (int i = 0; i < qk_k; ++i) b[q3_k_off_hmask + i % 32] |= static_cast<uint8_t>((e.q[i] >> 2) << (i / 32));
        uint8_t * s = b + q3_k_off_scales;
        for (int j = 0; j < n_sub; ++j) {
            const int u = e.sc[j] + 32;
            s[j % 8] |= static_cast<uint8_t>((u & 0x0f) << (4 * (j / 8)));
            s[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
        }
        store_u16_le(b + q3_k_off_d, e.d);
    }
}

// dot_signed_scale_q8_k per super-block, added in super-block order.
float vec_dot_q3_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q3_k_block_bytes;
        int8_t v[qk_k];
        unpack_values(w, v);
        int32_t sc[n_sub];
        unpack_scales(w, sc);
        sum += dot_signed_scale_q8_k(f16_to_f32(load_u16_le(w + q3_k_off_d)), sc, n_sub, v, x_row + ib * q8_k_block_bytes);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
