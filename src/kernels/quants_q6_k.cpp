// Q6_K: super-blocks of 256 6-bit values (offset 32) in 16 sub-blocks of 16, each with
// a signed 8-bit scale (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_scalar.h"
#include "kernels/rounding.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <algorithm>
#include <cmath>
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

inline int32_t sub_scale(const uint8_t * block, int j) { return static_cast<int8_t>(block[q6_k_off_scales + j]); }

}  // namespace

void to_float_q6_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q6_k_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + q6_k_off_d));
        int8_t q[qk_k];
        unpack_values(b, q);
        float * y = dst + ib * qk_k;
        for (int e = 0; e < qk_k; ++e) {
            y[e] = d * static_cast<float>(sub_scale(b, e / 16)) * static_cast<float>(q[e]);
        }
    }
}

// A plain (non-iterative) encoder: each sub-block's value of largest magnitude maps
// to -32 (the end of the asymmetric range [-32, 31] with more room), so its ideal step
// is that value / -32. Sub-block scales are int8 multiples of d (the largest maps to
// -128), rounded away from zero so the stored step is never smaller than the ideal
// one and nothing is clipped on the -32 side. Every value is then re-encoded against
// the stored step: |error| <= step / 2, except values beyond +31.5 steps (they round
// to 31, |error| <= step) and, when a positive scale would need +128 (stored as 127),
// the sub-block's extreme value (|error| <= step / 2 + step / 4).
void from_float_q6_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const float * x = src + ib * qk_k;
        uint8_t * b = dst + ib * q6_k_block_bytes;

        float scale[n_sub];
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int j = 0; j < n_sub; ++j) {
            float amax = 0.0f, vmax = 0.0f;
            for (int l = 0; l < 16; ++l) {
                if (std::fabs(x[16 * j + l]) > amax) {
                    amax = std::fabs(x[16 * j + l]);
                    vmax = x[16 * j + l];
                }
            }
            scale[j] = vmax / -32.0f;
            if (std::fabs(scale[j]) > max_abs_scale) {
                max_abs_scale = std::fabs(scale[j]);
                max_scale = scale[j];
            }
        }
        std::memset(b, 0, q6_k_block_bytes);
        if (!(max_abs_scale > 0.0f)) continue;  // all zero: d = 0 encodes it exactly

        // d carries the sign that makes the largest scale -128.
        const f16_bits d_abs_bits = f32_to_f16_not_below(max_abs_scale / 128.0f);
        const f16_bits d_bits = static_cast<f16_bits>(d_abs_bits | (max_scale > 0.0f ? 0x8000u : 0u));
        store_u16_le(b + q6_k_off_d, d_bits);
        const float d = f16_to_f32(d_bits);
        const float d_abs = f16_to_f32(d_abs_bits);

        int8_t sc[n_sub];
        for (int j = 0; j < n_sub; ++j) {
            const float t = scale[j] / d;  // in [-128, 128] up to rounding
            const int32_t magnitude = d_abs > 0.0f ? ceil_clamped(std::fabs(t), 128) : 0;
            sc[j] = static_cast<int8_t>(t < 0.0f ? -magnitude : std::min(magnitude, 127));
            b[q6_k_off_scales + j] = static_cast<uint8_t>(sc[j]);
        }

        uint8_t q[qk_k];
        for (int j = 0; j < n_sub; ++j) {
            const float dj = d * static_cast<float>(sc[j]);
            for (int l = 0; l < 16; ++l) {
                int32_t v = 0;
                if (dj != 0.0f) {
                    const float t = std::clamp(x[16 * j + l] / dj, -33.0f, 32.0f);
                    v = clamp_i32(round_nearest_even(t), -32, 31);
                }
                q[16 * j + l] = static_cast<uint8_t>(v + 32);
            }
        }
        for (int e = 0; e < qk_k; ++e) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t & low_byte = b[q6_k_off_ql + 64 * h + l + 32 * (k & 1)];
            low_byte |= static_cast<uint8_t>(k < 2 ? (q[e] & 0x0f) : ((q[e] & 0x0f) << 4));
            b[q6_k_off_qh + 32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
        }
    }
}

// Per super-block, exactly in int32: isum = sum_j scale_j * sum((q_w - 32) * q_x) over
// sub-block j. Then sum += (d_w * d_x) * isum.
float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q6_k_block_bytes;
        const uint8_t * x = x_row + ib * q8_k_block_bytes;
        int8_t q[qk_k];
        unpack_values(w, q);
        const uint8_t * q8 = x + q8_k_off_qs;
        int32_t isum = 0;
        for (int j = 0; j < n_sub; ++j) {
            int32_t sub = 0;
            for (int l = 0; l < 16; ++l) {
                sub += q[16 * j + l] * static_cast<int8_t>(q8[16 * j + l]);
            }
            isum += sub_scale(w, j) * sub;
        }
        const float d = f16_to_f32(load_u16_le(w + q6_k_off_d)) * bits_to_float(load_u32_le(x + q8_k_off_d));
        sum += d * static_cast<float>(isum);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
