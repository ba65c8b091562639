// Q4_K: super-blocks of 256 4-bit values in 8 sub-blocks of 32, each sub-block with a
// 6-bit scale and a 6-bit min (layout in blocks.h).
#include "kernels/blocks.h"
#include "kernels/quants_scalar.h"
#include "kernels/rounding.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <algorithm>
#include <cstring>

namespace skippy::kernels::scalar {
namespace {

constexpr int n_sub = 8;  // sub-blocks of 32 values

// The 6-bit scale and min of sub-block j from the 12 packed bytes.
void unpack_scale_min(const uint8_t * s, int j, int32_t & sc, int32_t & m) {
    if (j < 4) {
        sc = s[j] & 63;
        m  = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m  = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Inverse of unpack_scale_min for all 8 sub-blocks. REQUIRES: sc[j], m[j] in [0, 63].
void pack_scales_mins(const uint8_t * sc, const uint8_t * m, uint8_t * s) {
    std::memset(s, 0, 12);
    for (int j = 0; j < n_sub; ++j) {
        if (j < 4) {
            s[j] |= sc[j];
            s[j + 4] |= m[j];
        } else {
            s[j + 4] = static_cast<uint8_t>((sc[j] & 0x0f) | ((m[j] & 0x0f) << 4));
            s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
            s[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
        }
    }
}

// The 256 4-bit values of a block, in value order.
void unpack_values(const uint8_t * qs, uint8_t * q) {
    for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
            q[64 * g + l]      = qs[32 * g + l] & 0x0f;
            q[64 * g + 32 + l] = qs[32 * g + l] >> 4;
        }
    }
}

}  // namespace

void to_float_q4_k(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * b = src + ib * q4_k_block_bytes;
        const float d = f16_to_f32(load_u16_le(b + q4_k_off_d));
        const float dmin = f16_to_f32(load_u16_le(b + q4_k_off_dmin));
        uint8_t q[qk_k];
        unpack_values(b + q4_k_off_qs, q);
        float * y = dst + ib * qk_k;
        for (int j = 0; j < n_sub; ++j) {
            int32_t sc = 0, m = 0;
            unpack_scale_min(b + q4_k_off_scales, j, sc, m);
            const float dj = d * static_cast<float>(sc);
            const float mj = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) {
                y[32 * j + l] = dj * static_cast<float>(q[32 * j + l]) - mj;
            }
        }
    }
}

// A plain (non-iterative) encoder. Each sub-block j must cover [lo_j, hi_j] with
// lo_j = min(0, its smallest value): the format's offset -dmin * m_j is never
// positive. Mins are encoded first, rounded up (dmin * m_j >= -lo_j); then each
// sub-block's step is what the stored min leaves to cover, (hi_j + dmin * m_j) / 15,
// also rounded up to a multiple of d. Nothing is clipped, so every value lands within
// half a step of its code: |error| <= (d * sc_j) / 2.
void from_float_q4_k(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const float * x = src + ib * qk_k;
        uint8_t * b = dst + ib * q4_k_block_bytes;

        float lo[n_sub], hi[n_sub];
        float max_neg_lo = 0.0f;
        for (int j = 0; j < n_sub; ++j) {
            lo[j] = 0.0f;
            hi[j] = x[32 * j];
            for (int l = 0; l < 32; ++l) {
                lo[j] = std::min(lo[j], x[32 * j + l]);
                hi[j] = std::max(hi[j], x[32 * j + l]);
            }
            max_neg_lo = std::max(max_neg_lo, -lo[j]);
        }

        const f16_bits dmin_bits = f32_to_f16_not_below(max_neg_lo / 63.0f);
        const float dmin = f16_to_f32(dmin_bits);
        uint8_t lm[n_sub];
        float min_j[n_sub], step[n_sub];
        float max_step = 0.0f;
        for (int j = 0; j < n_sub; ++j) {
            lm[j] = static_cast<uint8_t>(dmin > 0.0f ? ceil_clamped(-lo[j] / dmin, 63) : 0);
            min_j[j] = dmin * static_cast<float>(lm[j]);
            step[j] = std::max(0.0f, (hi[j] + min_j[j]) / 15.0f);
            max_step = std::max(max_step, step[j]);
        }

        const f16_bits d_bits = f32_to_f16_not_below(max_step / 63.0f);
        const float d = f16_to_f32(d_bits);
        uint8_t ls[n_sub];
        for (int j = 0; j < n_sub; ++j) {
            ls[j] = static_cast<uint8_t>(d > 0.0f ? ceil_clamped(step[j] / d, 63) : 0);
        }
        store_u16_le(b + q4_k_off_d, d_bits);
        store_u16_le(b + q4_k_off_dmin, dmin_bits);
        pack_scales_mins(ls, lm, b + q4_k_off_scales);

        uint8_t q[qk_k];
        for (int j = 0; j < n_sub; ++j) {
            // The same products dequantization forms, so codes are chosen against the
            // exact values they decode to.
            const float dj = d * static_cast<float>(ls[j]);
            for (int l = 0; l < 32; ++l) {
                int32_t v = 0;
                if (dj > 0.0f) {
                    // Clamp before rounding: round_nearest_even is exact only for small values.
                    const float t = std::clamp((x[32 * j + l] + min_j[j]) / dj, -1.0f, 16.0f);
                    v = clamp_i32(round_nearest_even(t), 0, 15);
                }
                q[32 * j + l] = static_cast<uint8_t>(v);
            }
        }
        uint8_t * qs = b + q4_k_off_qs;
        for (int g = 0; g < 4; ++g) {
            for (int l = 0; l < 32; ++l) {
                qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
            }
        }
    }
}

// Per super-block, exactly in int32: isum = sum_j sc_j * sum(q_w * q_x) over sub-block
// j, imin = sum_j m_j * (sum of q_x over sub-block j, from bsums). Then
//   sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin.
float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * q4_k_block_bytes;
        const uint8_t * x = x_row + ib * q8_k_block_bytes;
        uint8_t q[qk_k];
        unpack_values(w + q4_k_off_qs, q);
        const uint8_t * q8 = x + q8_k_off_qs;
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < n_sub; ++j) {
            int32_t sc = 0, m = 0;
            unpack_scale_min(w + q4_k_off_scales, j, sc, m);
            int32_t sub = 0;
            for (int l = 0; l < 32; ++l) {
                sub += q[32 * j + l] * static_cast<int8_t>(q8[32 * j + l]);
            }
            isum += sc * sub;
            const int32_t bsum = static_cast<int16_t>(load_u16_le(x + q8_k_off_bsums + 4 * j)) +
                                 static_cast<int16_t>(load_u16_le(x + q8_k_off_bsums + 4 * j + 2));
            imin += m * bsum;
        }
        const float dx = bits_to_float(load_u32_le(x + q8_k_off_d));
        const float d = f16_to_f32(load_u16_le(w + q4_k_off_d)) * dx;
        const float dmin = f16_to_f32(load_u16_le(w + q4_k_off_dmin)) * dx;
        sum += d * static_cast<float>(isum) - dmin * static_cast<float>(imin);
    }
    return sum;
}

}  // namespace skippy::kernels::scalar
