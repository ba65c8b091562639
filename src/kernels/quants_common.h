// Pieces the scalar block formats share (internal to kernels; scalar files only, see
// avx2_util.h's linkage rule): nibble packing, the 6-bit scale packing of Q4_K and
// Q5_K, and the two plain super-block encoders the K-quants and IQ4_XS use.
#pragma once

#include "kernels/blocks.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace skippy::kernels::scalar {

// The 32 codes of a 32-value block from 16 bytes: value j < 16 is the low nibble of
// qs[j], value j + 16 its high nibble.
inline void unpack_nibbles_32(const uint8_t * qs, uint8_t * q) {
    for (int j = 0; j < 16; ++j) {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
    }
}

// Inverse of unpack_nibbles_32. REQUIRES: q[j] < 16.
inline void pack_nibbles_32(const uint8_t * q, uint8_t * qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

// The 32 5-bit codes of a Q5_0/Q5_1 block: nibbles as unpack_nibbles_32, and bit j of
// qh (a little-endian u32) as bit 4 of code j.
inline void unpack_q5_codes(const uint8_t * qh, const uint8_t * qs, uint8_t * q) {
    unpack_nibbles_32(qs, q);
    const uint32_t h = static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
                       static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(q[j] | ((h >> j) & 1u) << 4);
}

// Inverse of unpack_q5_codes. REQUIRES: q[j] < 32.
inline void pack_q5_codes(const uint8_t * q, uint8_t * qh, uint8_t * qs) {
    uint8_t low[32];
    uint32_t h = 0;
    for (int j = 0; j < 32; ++j) {
        low[j] = q[j] & 0x0f;
        h |= static_cast<uint32_t>(q[j] >> 4) << j;
    }
    pack_nibbles_32(low, qs);
    for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(h >> (8 * i));
}

// v truncated toward zero, as C's cast of a float in [0, hi] to an integer type (what
// ggml's reference quantizers do after adding 0.5), clamped to [0, hi]; NaN gives 0.
inline uint8_t truncate_code(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= static_cast<float>(hi)) return static_cast<uint8_t>(hi);
    return static_cast<uint8_t>(v);
}

// The 256 4-bit codes of a Q4_K/Q5_K super-block from its 128 bytes, in value order:
// values 64g + l (l < 32) are the low nibbles of qs[32g + l], values 64g + 32 + l the
// high nibbles.
inline void unpack_nibbles_k(const uint8_t * qs, uint8_t * q) {
    for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
            q[64 * g + l] = qs[32 * g + l] & 0x0f;
            q[64 * g + 32 + l] = qs[32 * g + l] >> 4;
        }
    }
}

// Inverse of unpack_nibbles_k (the low 4 bits of each code).
inline void pack_nibbles_k(const uint8_t * q, uint8_t * qs) {
    for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
            qs[32 * g + l] = static_cast<uint8_t>((q[64 * g + l] & 0x0f) | (q[64 * g + 32 + l] & 0x0f) << 4);
        }
    }
}

// The 256 2-bit codes of a Q2_K/Q3_K super-block from its 64 bytes, in value order:
// value 128h + 32k + l (k < 4, l < 32) is (qs[32h + l] >> 2k) & 3.
inline void unpack_crumbs_k(const uint8_t * qs, uint8_t * q) {
    for (int i = 0; i < 256; ++i) q[i] = (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

// Inverse of unpack_crumbs_k (the low 2 bits of each code).
inline void pack_crumbs_k(const uint8_t * q, uint8_t * qs) {
    std::memset(qs, 0, 64);
    for (int i = 0; i < 256; ++i) qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((q[i] & 3) << (2 * ((i % 128) / 32)));
}

// Exact sums of products of n codes (unsigned, or signed values) with int8 activations.
inline int32_t dot_codes(const uint8_t * q, const uint8_t * x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; ++i) s += q[i] * static_cast<int8_t>(x[i]);
    return s;
}
inline int32_t dot_values(const int8_t * v, const uint8_t * x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; ++i) s += v[i] * static_cast<int8_t>(x[i]);
    return s;
}

// The value of largest magnitude among x[0, n) (the first of equal magnitudes; NaNs
// never win); 0 when all are zero.
inline float max_by_magnitude(const float * x, int64_t n) {
    float amax = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

// The dot product of a row of 32-value weight blocks with a Q8_0 activation row: per
// block, sumi = the exact int32 sum of value_w * q_x, then sum += sumi * (d_w * d_x) in
// block order. decode(wb, v) writes the block's 32 values in order and returns d_w.
template <typename Decode>
float dot_blocks_q8_0(const uint8_t * w_row, size_t w_block_bytes, const uint8_t * x_row, int64_t n, Decode decode) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const uint8_t * xb = x_row + ib * q8_0_block_bytes;
        int8_t v[32];
        const float dw = decode(w_row + ib * static_cast<int64_t>(w_block_bytes), v);
        const float d = dw * f16_to_f32(load_u16_le(xb));
        sum += static_cast<float>(dot_values(v, xb + 2, 32)) * d;
    }
    return sum;
}

// The 6-bit scale and min of sub-block j (< 8) from the 12 packed bytes of Q4_K/Q5_K:
//   j < 4:  sc = s[j] & 63,                       m = s[j + 4] & 63
//   j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
//           m  = (s[j + 4] >> 4) | (s[j] >> 6) << 4
inline void unpack_scale_min_k4(const uint8_t * s, int j, int32_t & sc, int32_t & m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Inverse of unpack_scale_min_k4 for all 8 sub-blocks. REQUIRES: sc[j], m[j] < 64.
inline void pack_scales_mins_k4(const uint8_t * sc, const uint8_t * m, uint8_t * s) {
    std::memset(s, 0, 12);
    for (int j = 0; j < 8; ++j) {
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

// A Q8_K block's scale, and the sum of its codes over sub-block j of sub_len (16 or 32)
// values, from bsums.
inline float q8_k_scale(const uint8_t * xb) { return bits_to_float(load_u32_le(xb + q8_k_off_d)); }
inline int32_t q8_k_sub_sum(const uint8_t * xb, int j, int sub_len) {
    int32_t s = 0;
    for (int g = j * sub_len / 16; g < (j + 1) * sub_len / 16; ++g) {
        s += static_cast<int16_t>(load_u16_le(xb + q8_k_off_bsums + 2 * g));
    }
    return s;
}

// y = (d * sc_j) * q - dmin * m_j over n_sub sub-blocks of 256 / n_sub codes: the
// float operations of ggml's dequantize_row_q{2,4,5}_K.
inline void decode_min_scale(float d, float dmin, const int32_t * sc, const int32_t * m, int n_sub, const uint8_t * q,
                             float * y) {
    const int sub_len = 256 / n_sub;
    for (int j = 0; j < n_sub; ++j) {
        const float dj = d * static_cast<float>(sc[j]);
        const float mj = dmin * static_cast<float>(m[j]);
        for (int l = 0; l < sub_len; ++l) y[sub_len * j + l] = dj * static_cast<float>(q[sub_len * j + l]) - mj;
    }
}

// y = (d * sc_j) * v over n_sub sub-blocks of 256 / n_sub values: the float
// operations of ggml's dequantize_row_q{3,6}_K and iq4_xs.
inline void decode_signed_scale(float d, const int32_t * sc, int n_sub, const int8_t * v, float * y) {
    const int sub_len = 256 / n_sub;
    for (int j = 0; j < n_sub; ++j) {
        const float dj = d * static_cast<float>(sc[j]);
        for (int l = 0; l < sub_len; ++l) y[sub_len * j + l] = dj * static_cast<float>(v[sub_len * j + l]);
    }
}

// The dot product of a min-scale super-block (codes q, scales sc, mins m) with a Q8_K
// block, exactly in int32:
//   isum = sum_j sc_j * sum(q * q_x over sub-block j),  imin = sum_j m_j * (sum of q_x
//   over sub-block j, from bsums);
// then the float step (d_w * d_x) * isum - (dmin_w * d_x) * imin.
inline float dot_min_scale_q8_k(float dw, float dminw, const int32_t * sc, const int32_t * m, int n_sub,
                                const uint8_t * q, const uint8_t * xb) {
    const int sub_len = 256 / n_sub;
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < n_sub; ++j) {
        isum += sc[j] * dot_codes(q + sub_len * j, xb + q8_k_off_qs + sub_len * j, sub_len);
        imin += m[j] * q8_k_sub_sum(xb, j, sub_len);
    }
    const float dx = q8_k_scale(xb);
    return (dw * dx) * static_cast<float>(isum) - (dminw * dx) * static_cast<float>(imin);
}

// The dot product of a signed-scale super-block (values v, scales sc) with a Q8_K block:
// isum = sum_j sc_j * sum(v * q_x over sub-block j) exactly, then (d_w * d_x) * isum.
inline float dot_signed_scale_q8_k(float dw, const int32_t * sc, int n_sub, const int8_t * v, const uint8_t * xb) {
    const int sub_len = 256 / n_sub;
    int32_t isum = 0;
    for (int j = 0; j < n_sub; ++j) isum += sc[j] * dot_values(v + sub_len * j, xb + q8_k_off_qs + sub_len * j, sub_len);
    return (dw * q8_k_scale(xb)) * static_cast<float>(isum);
}

// Super-blocks of 256 values in n_sub sub-blocks, each x = (d * sc_j) * q - dmin * m_j
// with q in [0, q_max] and unsigned sc_j, m_j <= scale_max (Q2_K, Q4_K, Q5_K).
struct min_scale_format {
    int n_sub;      // sub-blocks per super-block (sub_len = 256 / n_sub)
    int q_max;      // largest code
    int scale_max;  // largest sub-block scale and min
};

struct min_scale_block {
    f16_bits d = 0, dmin = 0;
    uint8_t  sc[16] = {}, m[16] = {};
    uint8_t  q[256] = {};  // codes in value order
};

// A plain (non-iterative) encoder. Each sub-block j must cover [lo_j, hi_j] with
// lo_j = min(0, its smallest value): the format's offset -dmin * m_j is never
// positive. Mins are encoded first, rounded up (dmin * m_j >= -lo_j); then each
// sub-block's step is what the stored min leaves to cover, (hi_j + dmin * m_j) / q_max,
// also rounded up to a multiple of d. Nothing is clipped, so every value lands within
// half a step of its code: |error| <= (d * sc_j) / 2.
void encode_min_scale(const float * x, const min_scale_format & f, min_scale_block & out);

// Super-blocks of 256 values in n_sub sub-blocks, each x = (d * sc_j) * level[q] with a
// signed sc_j in [scale_lo, scale_hi] (Q3_K, Q6_K, IQ4_XS). The levels ascend and the
// first has the largest magnitude (-32 of Q6_K's [-32, 31], -127 of IQ4's table).
struct signed_scale_format {
    int            n_sub;
    int            scale_lo, scale_hi;  // e.g. -128, 127
    const int8_t * levels;              // n_levels ascending values
    int            n_levels;
    bool           linear;              // levels are consecutive integers
};

struct signed_scale_block {
    f16_bits d = 0;
    int8_t   sc[16] = {};
    uint8_t  q[256] = {};  // level indices in value order
};

// A plain (non-iterative) encoder: each sub-block's value of largest magnitude maps
// to levels[0] (the end of the range with more room), so its ideal step is that value
// / levels[0]. Sub-block scales are multiples of d (the largest maps to scale_lo),
// rounded away from zero so the stored step is never smaller than the ideal one and
// nothing is clipped on the levels[0] side. Every value then takes the level nearest
// to it against the stored step (ties to even on linear levels, to the lower level
// on a table): |error| <= half the gap between neighbouring levels, except beyond the
// last level (|error| <= one gap for linear levels) and, when a positive scale would
// need -scale_lo (stored as scale_hi), the sub-block's extreme value.
void encode_signed_scale(const float * x, const signed_scale_format & f, signed_scale_block & out);

// The index of the level nearest to t (ties to the lower level; NaN gives the level
// nearest to 0). REQUIRES: levels ascend.
int nearest_level(const int8_t * levels, int n_levels, float t);

}  // namespace skippy::kernels::scalar
