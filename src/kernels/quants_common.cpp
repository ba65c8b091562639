// The plain super-block encoders shared by the K-quants and IQ4_XS.
#include "kernels/quants_common.h"

#include "kernels/rounding.h"

#include <algorithm>
#include <cmath>

namespace skippy::kernels::scalar {

void encode_min_scale(const float * x, const min_scale_format & f, min_scale_block & out) {
    const int sub_len = 256 / f.n_sub;
    const float q_max = static_cast<float>(f.q_max);
    const float scale_max = static_cast<float>(f.scale_max);
    float lo[16], hi[16];
    float max_neg_lo = 0.0f;
    for (int j = 0; j < f.n_sub; ++j) {
        lo[j] = 0.0f;
        hi[j] = x[sub_len * j];
        for (int l = 0; l < sub_len; ++l) {
            lo[j] = std::min(lo[j], x[sub_len * j + l]);
            hi[j] = std::max(hi[j], x[sub_len * j + l]);
        }
        max_neg_lo = std::max(max_neg_lo, -lo[j]);
    }

    out.dmin = f32_to_f16_not_below(max_neg_lo / scale_max);
    const float dmin = f16_to_f32(out.dmin);
    float min_j[16], step[16];
    float max_step = 0.0f;
    for (int j = 0; j < f.n_sub; ++j) {
        out.m[j] = static_cast<uint8_t>(dmin > 0.0f ? ceil_clamped(-lo[j] / dmin, f.scale_max) : 0);
        min_j[j] = dmin * static_cast<float>(out.m[j]);
        step[j] = std::max(0.0f, (hi[j] + min_j[j]) / q_max);
        max_step = std::max(max_step, step[j]);
    }

    out.d = f32_to_f16_not_below(max_step / scale_max);
    const float d = f16_to_f32(out.d);
    for (int j = 0; j < f.n_sub; ++j) {
        out.sc[j] = static_cast<uint8_t>(d > 0.0f ? ceil_clamped(step[j] / d, f.scale_max) : 0);
        // The same products dequantization forms, so codes are chosen against the
        // exact values they decode to.
        const float dj = d * static_cast<float>(out.sc[j]);
        for (int l = 0; l < sub_len; ++l) {
            int32_t v = 0;
            if (dj > 0.0f) {
                // Clamp before rounding: round_nearest_even is exact only for small values.
                const float t = std::clamp((x[sub_len * j + l] + min_j[j]) / dj, -1.0f, q_max + 1.0f);
                v = clamp_i32(round_nearest_even(t), 0, f.q_max);
            }
            out.q[sub_len * j + l] = static_cast<uint8_t>(v);
        }
    }
}

int nearest_level(const int8_t * levels, int n_levels, float t) {
    if (std::isnan(t)) t = 0.0f;
    int best = 0;
    float best_err = std::fabs(t - static_cast<float>(levels[0]));
    for (int i = 1; i < n_levels; ++i) {
        const float err = std::fabs(t - static_cast<float>(levels[i]));
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void encode_signed_scale(const float * x, const signed_scale_format & f, signed_scale_block & out) {
    const int sub_len = 256 / f.n_sub;
    const float level0 = static_cast<float>(f.levels[0]);
    float scale[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int j = 0; j < f.n_sub; ++j) {
        scale[j] = max_by_magnitude(x + sub_len * j, sub_len) / level0;
        if (std::fabs(scale[j]) > max_abs_scale) {
            max_abs_scale = std::fabs(scale[j]);
            max_scale = scale[j];
        }
    }
    out = signed_scale_block{};
    if (!(max_abs_scale > 0.0f)) return;  // all zero: d = 0 encodes it exactly, whatever the codes
    const int zero_level = nearest_level(f.levels, f.n_levels, 0.0f);

    // d carries the sign that makes the largest scale scale_lo.
    const f16_bits d_abs_bits = f32_to_f16_not_below(max_abs_scale / static_cast<float>(-f.scale_lo));
    out.d = static_cast<f16_bits>(d_abs_bits | (max_scale > 0.0f ? 0x8000u : 0u));
    const float d = f16_to_f32(out.d);
    const float d_abs = f16_to_f32(d_abs_bits);

    const int q_lo = f.levels[0], q_hi = f.levels[f.n_levels - 1];
    for (int j = 0; j < f.n_sub; ++j) {
        const float t = scale[j] / d;  // in [scale_lo, -scale_lo] up to rounding
        const int32_t magnitude = d_abs > 0.0f ? ceil_clamped(std::fabs(t), -f.scale_lo) : 0;
        out.sc[j] = static_cast<int8_t>(t < 0.0f ? -magnitude : std::min(magnitude, f.scale_hi));
        const float dj = d * static_cast<float>(out.sc[j]);
        for (int l = 0; l < sub_len; ++l) {
            int level = zero_level;
            if (dj != 0.0f) {
                if (f.linear) {
                    const float v = std::clamp(x[sub_len * j + l] / dj, static_cast<float>(q_lo - 1),
                                               static_cast<float>(q_hi + 1));
                    level = clamp_i32(round_nearest_even(v), q_lo, q_hi) - q_lo;
                } else {
                    level = nearest_level(f.levels, f.n_levels, x[sub_len * j + l] / dj);
                }
            }
            out.q[sub_len * j + l] = static_cast<uint8_t>(level);
        }
    }
}

}  // namespace skippy::kernels::scalar
