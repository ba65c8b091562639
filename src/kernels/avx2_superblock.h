// AVX2 products of 256-value super-blocks with Q8_K activations, for the formats whose
// reference (quants_common.h) is
//   isum = sum_j sc_j * sum(v * q_x over sub-block j)          exactly in int32
//   imin = sum_j m_j * (sum of q_x over sub-block j, bsums)    (formats with mins)
//   sum += (d_w * d_x) * isum [- (dmin_w * d_x) * imin]        in super-block order
// (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; internal to kernels, AVX2 files only, see
// avx2_util.h).
//
// A format W provides:
//   block_bytes, off_d, off_dmin (formats with mins)
//   has_min     the float step subtracts (dmin_w * d_x) * imin
//   has_bias    isum starts from madd(bsums, bias): the part of a constant offset of
//               the codes (Q3_K's values are codes 0..7 minus 4, Q6_K's 0..63 minus 32)
//   is_signed   values are signed (taken |w| times x with w's sign; |w| <= 127, and
//               Q8_K codes are never -128); otherwise unsigned codes, |code * x| pairs
//               within int16
//   n_groups, per_group   the 8 vectors of 32 values come out per_group at a time
//   struct scales;  scales load_scales(wb)
//   void group(wb, g, q[per_group])   value vectors g * per_group + k, in value order
//   __m256i scale_vec(s, v)     16 int16 multipliers for the pair sums of vector v
//   __m256i bias(s)             16 int16 per 16 values, for madd with bsums (has_bias)
//   __m256i mins(s)             16 int16 per 16 values, for madd with bsums (has_min)
// and optionally, for the decode tile (rows8), forms that take the activation side
// once per block for all eight rows:
//   __m256i x_bias(xb), x_bias_scales(s)   bias term = madd(x_bias(xb), x_bias_scales(s))
//   __m256i x_mins(s)           the mins in scales16_even_odd's order, for madd with
//                               bsums_even_odd(xb)
//   void x_lanes(xb, xl[8])     the activation's 8 vectors rearranged once per block
//   void group_lanes(wb, g, q)  the values in that arrangement (saving the format's
//                               own cross-lane shuffles in every row)
//   __m256i scale_lanes(s, v)   the multipliers of vector v in that arrangement
// maddubs forms the pair sums, madd applies the sub-block scales while widening to
// int32; all integer sums are exact, so their order is free. The float step runs one
// output per lane (avx2_util.h), so results equal the reference's bit for bit.
#pragma once

#include "kernels/avx2_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx2 {
namespace {

template <typename W>
inline __m256i pair_sums(__m256i q, __m256i x) {
    if constexpr (W::is_signed) {
        return _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    } else {
        return _mm256_maddubs_epi16(q, x);
    }
}

// Sub-blocks of 16 values: the 16 int8 scales of a super-block widened once to int16,
// the even sub-blocks in the low 128-bit lane and the odd ones in the high lane, so
// that scales_of_16 is one in-lane shuffle per value vector.
inline __m256i scales16_even_odd(__m128i s) {
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}

// 16 int16 multipliers for the pair sums of value vector v: lanes 0-7 the scale of
// sub-block 2v, lanes 8-15 that of sub-block 2v + 1 (eo from scales16_even_odd).
inline __m256i scales_of_16(__m256i eo, int v) {
    return _mm256_shuffle_epi8(eo, _mm256_set1_epi16(static_cast<int16_t>((2 * v + 1) << 8 | 2 * v)));
}

// The 16 bsums of a Q8_K block (int16, one per 16 values) in scales16_even_odd's
// order, to be multiplied by such scales.
inline __m256i bsums_even_odd(const uint8_t * xb) {
    const __m256i bs = loadu_256(xb + q8_k_off_bsums);
    const __m256i lanes = _mm256_shuffle_epi8(bs, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                                                    0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    return _mm256_permute4x64_epi64(lanes, 0xd8);  // quadwords 0, 2, 1, 3
}

// For sub-blocks of 32 values: 8 int8 scales (the low bytes of s) as 32-bit units
// (sc_j, sc_j) of int16, so unit v broadcast is vector v's multiplier.
inline __m256i scale_units_of_8(__m128i s) { return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s)); }
inline __m256i scales_of_32(__m256i units, int v) { return _mm256_permutevar8x32_epi32(units, _mm256_set1_epi32(v)); }

// The eight 6-bit scales and mins of a Q4_K / Q5_K super-block (blocks.h), four bytes
// at a time: the scales as scale_units_of_8, the mins duplicated pairwise as 16 int16
// (m0, m0, m1, m1, ...) since bsums cover 16 values.
struct k4_scales {
    __m256i sc_units;
    __m256i m;
};

inline k4_scales unpack_scales_k4(const uint8_t * s) {
    uint32_t u0, u1, u2;
    std::memcpy(&u0, s, 4);
    std::memcpy(&u1, s + 4, 4);
    std::memcpy(&u2, s + 8, 4);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu;
    const uint32_t m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    const __m128i sc8 = _mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | static_cast<uint64_t>(sc_hi) << 32));
    const __m128i m8 = _mm_cvtsi64_si128(static_cast<int64_t>(m_lo | static_cast<uint64_t>(m_hi) << 32));
    return {scale_units_of_8(sc8), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8))};
}

template <typename W>
struct superblock_kernel {
    static constexpr int64_t block_elems = qk_k;
    static constexpr int64_t chunk_blocks = 64;
    static constexpr size_t wbb = W::block_bytes;
    // rows8 fetches the next 8 rows' block (8 * wbb bytes) per block: Q5_K's 22 lines
    // and Q6_K's 27 go to L2 (prefetch_span). BM_matvec, one thread, this path on a
    // Sapphire Rapids VM, mean GB/s of 3 shapes, L1 -> L2: Q6_K 7.3 -> 11.8, Q5_K 9.5 ->
    // 10.7; IQ4_XS (17 lines) 10.2 -> 11.0 but Q4_K (18) 12.2 -> 11.6, so the line falls
    // above both; Q2_K and Q3_K (11, 14) 11.4 -> 7.9 and 9.5 -> 7.6.
    static constexpr prefetch_level next_rows_level = 8 * wbb > 20 * 64 ? prefetch_level::l2 : prefetch_level::l1;
    static constexpr size_t xbb = q8_k_block_bytes;
    using scales = typename W::scales;

    // The bias term of isum for one row. A format may provide the activation side once
    // per block instead (x_bias(xb), shared by the eight rows of rows8, with
    // x_bias_scales(s) its per-row multipliers); the integer sum is the same.
    static constexpr bool has_x_bias = requires(const uint8_t * p, const scales & sc) {
        W::x_bias(p);
        W::x_bias_scales(sc);
    };
    static __m256i bias_sum(const uint8_t * xb, const __m256i * xbias, const scales & s) {
        if constexpr (has_x_bias) {
            if (xbias != nullptr) return _mm256_madd_epi16(*xbias, W::x_bias_scales(s));
        }
        return _mm256_madd_epi16(loadu_256(xb + q8_k_off_bsums), W::bias(s));
    }

    // 8 int32 partial sums of isum for one super-block and one token (xbias: see
    // bias_sum).
    static __m256i isum(const uint8_t * wb, const uint8_t * xb, const scales & s, const __m256i * xbias = nullptr) {
        __m256i acc = _mm256_setzero_si256();
        if constexpr (W::has_bias) acc = bias_sum(xb, xbias, s);
        #pragma GCC unroll 8
        for (int g = 0; g < W::n_groups; ++g) {
            __m256i q[W::per_group];
            W::group(wb, g, q);
            #pragma GCC unroll 8
            for (int k = 0; k < W::per_group; ++k) {
                const int v = g * W::per_group + k;
                const __m256i p = pair_sums<W>(q[k], loadu_256(xb + q8_k_off_qs + 32 * v));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, W::scale_vec(s, v)));
            }
        }
        return acc;
    }

    // isum of one row for NT tokens, each group of the row's values unpacked once for
    // all of them; with x_lanes, the activations in the format's lane order (formed once
    // per block for the eight rows of rows8): the same products, summed in another order.
    static constexpr bool has_x_lanes = requires(const uint8_t * p, __m256i * v, const scales & sc) {
        W::x_lanes(p, v);
        W::group_lanes(p, 0, v);
        W::scale_lanes(sc, 0);
    };
    static constexpr int n_vectors = W::n_groups * W::per_group;
    template <int NT>
    static void isum_rows(const uint8_t * wb, const uint8_t * const xb[NT], const __m256i (*xl)[n_vectors], const scales & s,
                          const __m256i * xbias, __m256i out[NT]) {
        #pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) {
            out[t] = W::has_bias ? bias_sum(xb[t], xbias != nullptr ? &xbias[t] : nullptr, s) : _mm256_setzero_si256();
        }
        #pragma GCC unroll 8
        for (int g = 0; g < W::n_groups; ++g) {
            __m256i q[W::per_group];
            if constexpr (has_x_lanes) {
                W::group_lanes(wb, g, q);
            } else {
                W::group(wb, g, q);
            }
            #pragma GCC unroll 8
            for (int k = 0; k < W::per_group; ++k) {
                const int v = g * W::per_group + k;
                __m256i sv;
                if constexpr (has_x_lanes) {
                    sv = W::scale_lanes(s, v);
                } else {
                    sv = W::scale_vec(s, v);
                }
                #pragma GCC unroll 3
                for (int t = 0; t < NT; ++t) {
                    const __m256i xv = has_x_lanes ? xl[t][v] : loadu_256(xb[t] + q8_k_off_qs + 32 * v);
                    out[t] = _mm256_add_epi32(out[t], _mm256_madd_epi16(pair_sums<W>(q[k], xv), sv));
                }
            }
        }
    }

    // imin for one row; with bsums_eo (rows8: bsums_even_odd of the block, formed once)
    // a format that provides x_mins(s), its mins in that order, uses those.
    static constexpr bool has_x_mins = requires(const scales & sc) { W::x_mins(sc); };
    static __m256i imin(const uint8_t * xb, const scales & s, const __m256i * bsums_eo = nullptr) {
        if constexpr (W::has_min) {
            if constexpr (has_x_mins) {
                if (bsums_eo != nullptr) return _mm256_madd_epi16(*bsums_eo, W::x_mins(s));
            }
            return _mm256_madd_epi16(loadu_256(xb + q8_k_off_bsums), W::mins(s));
        } else {
            return _mm256_setzero_si256();
        }
    }

    // Reference float step, one output per lane.
    static __m256 accumulate(__m256 acc, __m256 dw, __m256 dminw, __m256 dx, __m256i is, __m256i im) {
        const __m256 t = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is));
        if constexpr (W::has_min) {
            return _mm256_add_ps(acc, _mm256_sub_ps(t, _mm256_mul_ps(_mm256_mul_ps(dminw, dx), _mm256_cvtepi32_ps(im))));
        } else {
            return _mm256_add_ps(acc, t);
        }
    }

    static float dmin_of(const uint8_t * wb) {
        if constexpr (W::has_min) {
            return f16_at(wb + W::off_dmin);
        } else {
            return 0.0f;
        }
    }

    struct token_group {
        __m256 dx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * const x[8], int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * p[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) p[i] = x[i] + b * xbb + q8_k_off_d;
            g.dx[b - b0] = gather_f32(p);
        }
    }

    // NT (4 or 8) tokens carry the integer work; with 4, lanes 4-7 repeat lanes 0-3
    // (mul_tile_driver drops them), so a group of a few tokens costs about half.
    template <int NT = 8>
    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        static_assert(NT == 4 || NT == 8);
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const size_t xo = static_cast<size_t>(b) * xbb;
            const scales s = W::load_scales(wb);
            __m256i is[8], im[8];
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) {
                is[i] = W::has_bias ? _mm256_madd_epi16(loadu_256(x[i] + xo + q8_k_off_bsums), W::bias(s))
                                    : _mm256_setzero_si256();
            }
            #pragma GCC unroll 8
            for (int gr = 0; gr < W::n_groups; ++gr) {
                __m256i q[W::per_group];
                W::group(wb, gr, q);
                #pragma GCC unroll 8
                for (int k = 0; k < W::per_group; ++k) {
                    const int v = gr * W::per_group + k;
                    const __m256i sv = W::scale_vec(s, v);
                    #pragma GCC unroll 8
                    for (int i = 0; i < NT; ++i) {
                        const __m256i p = pair_sums<W>(q[k], loadu_256(x[i] + xo + q8_k_off_qs + 32 * v));
                        is[i] = _mm256_add_epi32(is[i], _mm256_madd_epi16(p, sv));
                    }
                }
            }
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) im[i] = imin(x[i] + xo, s);
            #pragma GCC unroll 4
            for (int i = NT; i < 8; ++i) {
                is[i] = is[i - NT];
                im[i] = im[i - NT];
            }
            acc = accumulate(acc, _mm256_set1_ps(f16_at(wb + W::off_d)), _mm256_set1_ps(dmin_of(wb)), g.dx[b - b0],
                             reduce8(is), W::has_min ? reduce8(im) : _mm256_setzero_si256());
        }
        return acc;
    }

    // Rows are taken in pairs and their int32 partial sums folded at once (pair_sums,
    // reduce8's first level, built as the rows finish), so that only a few are live:
    // eight accumulators held to the end of the block spill to the stack. NT tokens
    // (1 to 3) share each row's unpacked values.
    template <int NT>
    static void rows8(const uint8_t * const w[8], const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m256 acc[NT]) {
        #pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span<next_rows_level>(next + b * 8 * wbb, 8 * wbb);
            const uint8_t * xb[NT];
            __m256i xbias_v[NT], bsums_eo[NT];
            __m256i xl[has_x_lanes ? NT : 1][n_vectors];
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) {
                xb[t] = x[t] + b * xbb;
                if constexpr (has_x_bias) xbias_v[t] = W::x_bias(xb[t]);
                if constexpr (has_x_mins) bsums_eo[t] = bsums_even_odd(xb[t]);
                if constexpr (has_x_lanes) W::x_lanes(xb[t], xl[t]);
            }
            const __m256i * xbias = has_x_bias ? xbias_v : nullptr;
            __m256i is_pairs[NT][4], im_pairs[NT][4];
            #pragma GCC unroll 4
            for (int i = 0; i < 8; i += 2) {
                const uint8_t * wb0 = w[i] + b * wbb;
                const uint8_t * wb1 = w[i + 1] + b * wbb;
                const scales s0 = W::load_scales(wb0);
                const scales s1 = W::load_scales(wb1);
                __m256i is0[NT], is1[NT];
                isum_rows<NT>(wb0, xb, xl, s0, xbias, is0);
                isum_rows<NT>(wb1, xb, xl, s1, xbias, is1);
                #pragma GCC unroll 3
                for (int t = 0; t < NT; ++t) {
                    is_pairs[t][i / 2] = pair_sums(is0[t], is1[t]);
                    if constexpr (W::has_min) {
                        const __m256i * eo = has_x_mins ? &bsums_eo[t] : nullptr;
                        im_pairs[t][i / 2] = pair_sums(imin(xb[t], s0, eo), imin(xb[t], s1, eo));
                    }
                }
            }
            __m256 dw, dminw;
            row_scales(w, b, dw, dminw);
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) {
                acc[t] = accumulate(acc[t], dw, dminw, _mm256_set1_ps(load_f32(xb[t] + q8_k_off_d)), reduce_pairs(is_pairs[t]),
                                    W::has_min ? reduce_pairs(im_pairs[t]) : _mm256_setzero_si256());
            }
        }
    }

    // d_w (and dmin_w) of block b of the eight rows w.
    static void row_scales(const uint8_t * const w[8], int64_t b, __m256 & dw, __m256 & dminw) {
        const uint8_t * wd[8];
        const uint8_t * wm[8];
        #pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            wd[i] = w[i] + b * wbb + W::off_d;
            wm[i] = W::has_min ? w[i] + b * wbb + W::off_dmin : wd[i];
        }
        if constexpr (W::has_min && W::off_dmin == W::off_d + 2) {
            gather_f16_pairs(wd, dw, dminw);
        } else if constexpr (!W::has_min && W::off_d + 2 == W::block_bytes) {
            // d ends the block: read the 4 bytes that end with it.
            const uint8_t * before[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) before[i] = wd[i] - 2;
            dw = gather_f16_high(before);
            dminw = _mm256_setzero_ps();
        } else {
            dw = gather_f16(wd);
            dminw = W::has_min ? gather_f16(wm) : _mm256_setzero_ps();
        }
    }

    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_k; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            const scales s = W::load_scales(wb);
            const float is = static_cast<float>(hsum_i32(isum(wb, xb, s)));
            const float dx = load_f32(xb + q8_k_off_d);
            const float t = (f16_at(wb + W::off_d) * dx) * is;
            if constexpr (W::has_min) {
                sum += t - (dmin_of(wb) * dx) * static_cast<float>(hsum_i32(imin(xb, s)));
            } else {
                sum += t;
            }
        }
        return sum;
    }
};

}  // namespace
}  // namespace skippy::kernels::avx2
