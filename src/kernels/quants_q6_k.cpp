// Q6_K: super-blocks of 256 6-bit values (offset 32) in 16 sub-blocks of 16, each with
// a signed 8-bit scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_common.h"
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <array>
#include <cstring>

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 16;  // sub-blocks of 16 values

// The 256 values of a block in value order, offset removed: in [-32, 31].
void unpack_values(const uint8_t * block, int8_t * q) {
    for (int h = 0; h < 2; ++h) {
        const uint8_t * ql = block + q6_k_off_ql + 64 * h;
        const uint8_t * qh = block + q6_k_off_qh + 32 * h;
        int8_t * out = q + 128 * h;
        for (int l = 0; l < 32; ++l) {
            out[l]      = static_cast<int8_t>(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void unpack_scales(const uint8_t * b, int32_t * sc) {
    for (int j = 0; j < n_sub; ++j) sc[j] = static_cast<int8_t>(b[q6_k_off_scales + j]);
}

}  // namespace

void to_float_q6_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q6_k_block_bytes;
        int8_t v[qk_k];
        unpack_values(b, v);
        int32_t sc[n_sub];
        unpack_scales(b, sc);
        decode_signed_scale(f16_to_f32(load_u16_le(b + q6_k_off_d)), sc, n_sub, v, dst + ib * qk_k);
    }
}

// encode_signed_scale (quants_common.h) with the levels [-32, 31] and 8-bit scales:
// |error| <= step / 2, except values beyond +31.5 steps (they round to 31, |error| <=
// step) and, when a positive scale would need +128 (stored as 127), the sub-block's
// extreme value (|error| <= step / 2 + step / 4).
void from_float_q6_k(const float * src, uint8_t * dst, int64_t n) {
    static constexpr auto levels = [] {
        std::array<int8_t, 64> l{};
        for (int i = 0; i < 64; ++i) l[i] = static_cast<int8_t>(i - 32);
        return l;
    }();
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        uint8_t * b = dst + ib * q6_k_block_bytes;
        signed_scale_block e;
        encode_signed_scale(src + ib * qk_k, signed_scale_format{n_sub, -128, 127, levels.data(), 64, true}, e);
        std::memset(b, 0, q6_k_block_bytes);
        store_u16_le(b + q6_k_off_d, e.d);
        for (int j = 0; j < n_sub; ++j) b[q6_k_off_scales + j] = static_cast<uint8_t>(e.sc[j]);
        for (int i = 0; i < qk_k; ++i) {
            const int h = i / 128, k = (i % 128) / 32, l = i % 32;
            uint8_t & low_byte = b[q6_k_off_ql + 64 * h + l + 32 * (k & 1)];
            low_byte |= static_cast<uint8_t>(k < 2 ? (e.q[i] & 0x0f) : ((e.q[i] & 0x0f) << 4));
            b[q6_k_off_qh + 32 * h + l] |= static_cast<uint8_t>((e.q[i] >> 4) << (2 * k));
        }
    }
}

// dot_signed_scale_q8_k per super-block, added in super-block order.
float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q6_k_block_bytes;
        int8_t v[qk_k];
        unpack_values(w, v);
        int32_t sc[n_sub];
        unpack_scales(w, sc);
        sum += dot_signed_scale_q8_k(f16_to_f32(load_u16_le(w + q6_k_off_d)), sc, n_sub, v, x_row + ib * q8_k_block_bytes);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
