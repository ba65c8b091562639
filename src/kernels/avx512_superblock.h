// AVX-512 products of 256-value super-blocks with Q8_K activations, for the formats
// whose reference (quants_common.h) is
//   isum = sum_j sc_j * sum(v * q_x over sub-block j)          exactly in int32
//   imin = sum_j m_j * (sum of q_x over sub-block j, bsums)    (formats with mins)
//   sum += (d_w * d_x) * isum [- (dmin_w * d_x) * imin]        in super-block order
// (internal to kernels, AVX-512 files only, see avx512_util.h).
//
// A format W provides:
//   block_bytes, off_d, off_dmin (formats with mins), n_sub (8 or 16 sub-blocks)
//   has_min       the float step subtracts (dmin_w * d_x) * imin
//   bias_shift    values are codes - (1 << bias_shift) (codes unsigned; -1: no bias)
//   void codes(wb, uint8_t out[256])   the unsigned codes in value order
//   void scales(wb, int32_t sc[n_sub], uint32_t pair[8])
//       the sub-block scales, and per bsums pair k (bsums 2k, 2k + 1) the two int16
//       multipliers of those bsums in one dword: the mins m_k, m_k (formats with mins,
//       sub-blocks of 32) or the scales sc_2k, sc_2k+1 (formats with a bias, sub-blocks
//       of 16)
//   rest          the AVX2 tile of the format, for rows decode leaves (avx512_util.h)
//   pair_min_tokens  the fewest tokens of a batched decode step that go to run_pairs
//                 (two rows per vector, avx512_util.h), 0 for none: where it beats the
//                 decode tile on BM_matmul
//   scale_bytes   optional, for run_pairs: void scale_bytes(wb, uint64_t & sc8,
//                 uint64_t & m8), for formats of 8 sub-blocks: the 8 sub-block scales
//                 and the 8 bsums multipliers (the mins, or with a bias the scales
//                 again) as bytes, each scale_offset above its value, so that a pair of
//                 rows' multipliers come from a few vector instructions, not scalar
//                 unpacking
//   scale_offset  with scale_bytes (optional, 0 if absent): what the bytes exceed the
//                 multipliers by (IQ4_XS's stored 6-bit scales are sc_j + 32)
//   prescaled     optional, true: codes() gives code * sc_j (each still a byte) and
//                 scales() gives sc_j = 1, so no product is multiplied by a scale
// and for decode (rows16 below):
//   struct decode_x; void x_decode(xb, decode_x &)   a token's activation block,
//                 rearranged once for 16 rows (in the order the format's codes come)
//   void row_decode<NT>(wb, const decode_x[NT], __m512i out[NT])   one row's integer
//                 sums per token: with mins, isum partials in lanes 0-7 and imin
//                 partials in lanes 8-15; without, 16 isum partials
//   split_mins_from  optional (formats with 8 mins of 6 bits: Q4_K, Q5_K): the hooks
//                 are x_decode<NT>(xb, xd) and row_decode<NT>(wb, xd, out, uint64_t &
//                 m8), m8 the row's 8 mins as bytes, and from this many tokens on, out
//                 holds 16 isum partials and rows16 forms imin for its 16 rows at once
//                 (k4_decode_x, k4_mins16)
//   off_scale     where in a block the 4 bytes holding d (and dmin) start
//   void scales16(words, d, dmin)   16 such dwords (one per row) to d_w and dmin_w
//
// tokens16: per sub-block, vpdpbusd of the broadcast codes (u8) with the rearranged
// activations (s8) gives the exact sub-block sum of every token; it is multiplied by
// sc_j (vpmulld, exact: |sc_j * sum| <= 32 * 255 * 128 * 128 < 2^31) and added, unless
// the format's codes come prescaled (W::prescaled, Q2_K). The bsums terms go through
// vpdpwssd (int16 pairs). The float step runs one output per lane.
#pragma once

#include "kernels/avx512_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::avx512 {
namespace {

// Pieces of the formats' decode hooks (row_decode, x_decode, scales16).

// 32 bytes at p0, then 32 at p1.
inline __m512i join_256(const uint8_t * p0, const uint8_t * p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(loadu_256(p0)), loadu_256(p1), 1);
}

// A row's 16 isum partials folded into lanes 0-7, its 8 imin partials in lanes 8-15.
inline __m512i isum_imin(__m512i isum, __m256i imin) {
    const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(folded), imin, 1);
}

// For vpshufb: every int16 lane of 128-bit lane i takes int16 w_i (< 8) of that lane.
inline __m512i pick_words(int w0, int w1, int w2, int w3) {
    const auto d = [](int w) { return static_cast<int32_t>((static_cast<uint32_t>(2 * w) | static_cast<uint32_t>(2 * w + 1) << 8) * 0x10001u); };
    return _mm512_setr_epi32(d(w0), d(w0), d(w0), d(w0), d(w1), d(w1), d(w1), d(w1), d(w2), d(w2), d(w2), d(w2), d(w3), d(w3),
                             d(w3), d(w3));
}

// Bytes with bit b0 (low 256 bits) or b1 (high 256 bits) set, for vptestmb.
inline __m512i bit_pair(int b0, int b1) {
    return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << b0)), _mm256_set1_epi8(static_cast<char>(1 << b1)), 1);
}

// Two f16 fields per dword (d in the low half, dmin in the high half), converted.
inline void f16_pairs(__m512i words, __m512 & d, __m512 & dmin) {
    d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
    dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
}

// Q4_K / Q5_K: the 6-bit scales and mins (blocks.h) as 8 bytes each.
inline void unpack_k4_scales(const uint8_t * s, uint64_t & sc8, uint64_t & m8) {
    const uint32_t u0 = load_u32(s), u1 = load_u32(s + 4), u2 = load_u32(s + 8);
    sc8 = (u0 & 0x3f3f3f3fu) | static_cast<uint64_t>((u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4)) << 32;
    m8 = (u1 & 0x3f3f3f3fu) | static_cast<uint64_t>(((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4)) << 32;
}

// A token's activation block for the decode hooks of the formats with mins (Q2_K,
// Q4_K, Q5_K): its codes in the format's order, and its bsums.
struct min_decode_x {
    __m512i q[4];
    __m256i bsums;
};

// acc plus the products of a row's codes c[v] with a token's activation q[v]: maddubs
// pair sums, times the int16 multipliers mult[v] (each lane's sub-block scale) by
// vpdpwssd.
[[gnu::always_inline]] inline __m512i scaled_products(__m512i acc, const __m512i c[4], const __m512i mult[4], const __m512i q[4]) {
    #pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(c[v], q[v]), mult[v]);
    return acc;
}

// The formats of 16 sub-blocks of 16 values whose values are codes minus a constant
// (Q3_K: 3-bit codes - 4, Q6_K: 6-bit codes - 32; scales per sub-block, no mins). The
// codes come out of 64-byte loads as 4 vectors whose 128-bit lanes are sub-blocks; a
// 4 x 4 dword transpose in every 128-bit lane (transpose_dwords4) of the codes and of
// the activation, both in that order, puts one sub-block in each dword lane of all four
// vectors: dword 4b + a of every turned vector holds values of the sub-block in lane b
// of vector a. Four vpdpbusd then leave each sub-block's sum of code * x in a lane of
// its own, started at -bias * bsum (bias_t), and one vpmulld by the lanes' scales
// finishes the row: 5 multiplies per row and token, where vpmaddubsw pairs times each
// lane's scale (vpdpwssd) took 9. The integer sums are the same, so are the bits.
// BM_matmul, one thread, Zen 4, 3 interleaved rounds, Q6_K: 4 tokens 1024x2816 0.178-0.180
// ms against 0.194-0.216, 2816x1024 0.152-0.160 against 0.170-0.179; 8 tokens 5-10%
// faster; one token within noise (BM_decode_tile, 3 tokens: 10.0-10.4 us against
// 11.7-12.3).
struct sub16_decode_x {
    __m512i qt[4];   // the activation, turned
    __m512i bias_t;  // dword 4b + a: -bias * bsum of the sub-block in lane b of vector a
};

// A 4 x 4 transpose of dwords in every 128-bit lane: dword a of lane b of out[v] is
// dword v of lane b of in[a].
[[gnu::always_inline]] inline void transpose_dwords4(const __m512i in[4], __m512i out[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]), t1 = _mm512_unpackhi_epi32(in[0], in[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]), t3 = _mm512_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// q: the token's values in the codes' order; lane_sub: for vpermd, the sub-block of
// each turned dword (a format's order); bias_shift: log2 of the constant.
[[gnu::always_inline]] inline void sub16_x_decode(const uint8_t * xb, const __m512i q[4], __m512i lane_sub, int bias_shift,
                                                  sub16_decode_x & xd) {
    transpose_dwords4(q, xd.qt);
    const __m512i bsums = _mm512_permutexvar_epi32(lane_sub, _mm512_cvtepi16_epi32(loadu_256(xb + q8_k_off_bsums)));
    xd.bias_t = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_sll_epi32(bsums, _mm_cvtsi32_si128(bias_shift)));
}

// c: a row's codes in the format's order; sc: its scales as int32 in the turned order.
// |sum| per lane <= 16 * 32 * 128 (Q6_K), times |sc| <= 128: well within int32.
template <int NT>
[[gnu::always_inline]] inline void sub16_row_sums(const __m512i c[4], __m512i sc, const sub16_decode_x * xd, __m512i * out) {
    __m512i ct[4];
    transpose_dwords4(c, ct);
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
        __m512i acc = xd[i].bias_t;
        #pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc = _mm512_dpbusd_epi32(acc, ct[v], xd[i].qt[v]);
        out[i] = _mm512_mullo_epi32(acc, sc);
    }
}

// d_w of 16 rows from the dwords that end with it (a d that is its block's last field,
// so that nothing past the block is read).
inline void f16_ending_scales(__m512i words, __m512 & d, __m512 & dmin) {
    d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
    dmin = d;
}

// Decode hooks of Q4_K and Q5_K. The activation in the order one 64-byte load of qs
// gives the nibbles: q[2h] = values [128h, 128h + 32) and [128h + 64, 128h + 96) (low
// nibbles), q[2h + 1] = the 32 values after each (high nibbles); so the 128-bit lanes
// of q[2h + g] belong to sub-blocks 4h + g (twice) and 4h + g + 2 (twice).
//
// That order serves one token (k4_row_decode). From two tokens on, a batched decode
// step takes k4_dot_row_decode's order (dq, below) and the mins' term imin = sum_j m_j
// * s_j (s_j: the token's sum over sub-block j, bsums 2j and 2j + 1 added) is formed for
// 16 rows at once, not per row: sub_sums holds the s_j as int16 pairs (dword k = s_2k,
// s_2k+1; |s_j| <= 32 * 128 < 2^15), and each row leaves its 8 mins as bytes
// (k4_mins16). Per row and token a vpmaddwd of the mins with the bsums and the fold of
// isum into half the vector are gone. BM_matmul, one thread, Zen 4, 2816x1024, the
// build before and after interleaved: Q4_K 4 tokens 0.171-0.172 ms against
// 0.176-0.201, 6 tokens 0.221-0.234 against 0.271-0.276; Q5_K 4 tokens 0.186-0.202
// against 0.212-0.220. One token keeps the per-row imin: there the 16 rows' extra work
// cost more than it saved where rows are short (Q4_K 2816x1024 0.088-0.089 ms against
// 0.073-0.078; 1024x2816 gained, 0.074-0.077 against 0.083-0.085).
constexpr int k4_split_mins_from = 2;

struct k4_decode_x {
    __m512i q[4];
    __m512i dq[4];  // k4_dot_row_decode's order
    __m256i bsums;
    alignas(16) int32_t sub_sums[4];
};

// Qword indices for vpermq: vector v of k4_dot_row_decode's order takes, in qword Q,
// the 8 values [8v, 8v + 8) of sub-block Q: activation qword 4Q + v (Q < 4 from the
// first 128 bytes, the rest from the next, same index), and of the codes the nibbles
// of qs qword 4 (Q / 2) + v (low nibbles for even Q, high for odd).
struct k4_dot_index {
    alignas(64) int64_t x[4][8];
    alignas(64) int64_t codes[4][8];
};
inline constexpr k4_dot_index k_k4_dot_index = [] {
    k4_dot_index t{};
    for (int v = 0; v < 4; ++v) {
        for (int q = 0; q < 8; ++q) {
            t.x[v][q] = q < 4 ? 4 * q + v : 0;
            t.codes[v][q] = 4 * (q / 2) + v;
        }
    }
    return t;
}();

// What each form reads: one token q and bsums, more tokens dq and sub_sums.
template <int NT>
[[gnu::always_inline]] inline void k4_x_decode(const uint8_t * xb, k4_decode_x & xd) {
    const uint8_t * q = xb + q8_k_off_qs;
    xd.bsums = loadu_256(xb + q8_k_off_bsums);
    if constexpr (NT < k4_split_mins_from) {
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            xd.q[2 * h] = join_256(q + 128 * h, q + 128 * h + 64);
            xd.q[2 * h + 1] = join_256(q + 128 * h + 32, q + 128 * h + 96);
        }
    } else {
        const __m512i x0 = loadu_512(q), x1 = loadu_512(q + 64), x2 = loadu_512(q + 128), x3 = loadu_512(q + 192);
        #pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            const __m512i index = _mm512_load_si512(k_k4_dot_index.x[v]);
            const __m512i hi = _mm512_permutex2var_epi64(x2, index, x3);
            xd.dq[v] = _mm512_inserti64x4(_mm512_permutex2var_epi64(x0, index, x1), _mm512_castsi512_si256(hi), 1);
        }
        const __m256i s = _mm256_madd_epi16(xd.bsums, _mm256_set1_epi16(1));
        _mm_store_si128(reinterpret_cast<__m128i *>(xd.sub_sums),
                        _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
    }
}

// Below k4_split_mins_from tokens: codes (pairs within 2 * 31 * 128) and multipliers
// (each lane's sub-block scale) for scaled_products, and out as min_decode_x's [isum |
// imin], the mins duplicated per 16 values; m8 gets the row's mins. With High (Q5_K),
// the fifth bits from qh (broadcast to both halves) are added where vptestmb finds
// them: vector 2h + g's halves take bits 4h + g and 4h + g + 2.
template <int NT, bool High>
    requires(NT < k4_split_mins_from)
[[gnu::always_inline]] inline void k4_row_decode(const uint8_t * scales, const uint8_t * qs, const uint8_t * qh,
                                                 const k4_decode_x * xd, __m512i * out, uint64_t & m8) {
    uint64_t sc8;
    unpack_k4_scales(scales, sc8, m8);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc8))));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i c[4], mult[4];
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m512i q = loadu_512(qs + 64 * h);
        c[2 * h] = _mm512_and_si512(q, low4);
        c[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        #pragma GCC unroll 2
        for (int g = 0; g < 2; ++g) {
            const int j = 4 * h + g;
            if constexpr (High) {
                const __mmask64 high = _mm512_test_epi8_mask(_mm512_broadcast_i64x4(loadu_256(qh)), bit_pair(j, j + 2));
                c[2 * h + g] = _mm512_mask_add_epi8(c[2 * h + g], high, c[2 * h + g], _mm512_set1_epi8(0x10));
            }
            mult[2 * h + g] = _mm512_shuffle_epi8(sc, pick_words(j, j, j + 2, j + 2));
        }
    }
    const __m128i m8v = _mm_cvtsi64_si128(static_cast<int64_t>(m8));
    const __m256i m = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8v, m8v));
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
        out[i] = isum_imin(scaled_products(_mm512_setzero_si512(), c, mult, xd[i].q), _mm256_madd_epi16(xd[i].bsums, m));
    }
}

// Q4_K's and Q5_K's row sums from k4_split_mins_from tokens on (16 isum partials; m8
// gets the row's mins for k4_mins16), with vpdpbusd: the codes and the
// activation in an order where qword Q of every vector holds values of sub-block Q
// (k4_dot_index), so that vpdpbusd adds into lanes that each stay within one sub-block,
// and a vpmaddwd by the lanes' scales (int16, high halves 0) gives the scaled partials.
// Q4_K's four vpdpbusd go into one vector (16 products, |sum| <= 16 * 15 * 128 < 2^15),
// 5 multiplies per row and token where vpmaddubsw and vpdpwssd take 8; Q5_K's codes
// (up to 31) go two vectors into one (8 products, <= 8 * 31 * 128), 6 multiplies.
// High: the fifth bits, bit Q of qh[i] for value i of sub-block Q, so qword v of qh
// broadcast and tested against bit Q in qword Q. BM_matmul, one thread, Zen 4, against
// vpmaddubsw and vpdpwssd (4 interleaved rounds): 4 tokens Q4_K 2816x1024 0.139-0.145
// ms against 0.162-0.167, 1024x2816 0.153-0.161 against 0.168-0.171; Q5_K 0.165-0.180
// against 0.184-0.191; 6 tokens even or a little faster; one token keeps k4_row_decode.
template <int NT, bool High>
    requires(NT >= k4_split_mins_from)
[[gnu::always_inline]] inline void k4_dot_row_decode(const uint8_t * scales, const uint8_t * qs, const uint8_t * qh,
                                                     const k4_decode_x * xd, __m512i * out, uint64_t & m8) {
    uint64_t sc8;
    unpack_k4_scales(scales, sc8, m8);
    const __m128i sc8v = _mm_cvtsi64_si128(static_cast<int64_t>(sc8));
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc8v, sc8v));  // sc_Q in dwords 2Q, 2Q + 1
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i z0 = loadu_512(qs), z1 = loadu_512(qs + 64);
    __m512i c[4];
    #pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
        const __m512i t = _mm512_permutex2var_epi64(z0, _mm512_load_si512(k_k4_dot_index.codes[v]), z1);
        c[v] = _mm512_and_si512(_mm512_mask_srli_epi64(t, 0xaa, t, 4), low4);
        if constexpr (High) {
            const __m512i bit_q = _mm512_set_epi64(static_cast<int64_t>(0x8080808080808080ull), 0x4040404040404040, 0x2020202020202020,
                                                   0x1010101010101010, 0x0808080808080808, 0x0404040404040404, 0x0202020202020202,
                                                   0x0101010101010101);
            const __mmask64 high = _mm512_test_epi8_mask(_mm512_set1_epi64(static_cast<int64_t>(load_u64(qh + 8 * v))), bit_q);
            c[v] = _mm512_mask_add_epi8(c[v], high, c[v], _mm512_set1_epi8(0x10));
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
        if constexpr (High) {
            const __m512i a0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], xd[i].dq[0]), c[1], xd[i].dq[1]);
            const __m512i a1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c[2], xd[i].dq[2]), c[3], xd[i].dq[3]);
            out[i] = _mm512_dpwssd_epi32(_mm512_madd_epi16(a0, sc), a1, sc);
        } else {
            __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], xd[i].dq[0]);
            #pragma GCC unroll 3
            for (int v = 1; v < 4; ++v) a = _mm512_dpbusd_epi32(a, c[v], xd[i].dq[v]);
            out[i] = _mm512_madd_epi16(a, sc);
        }
    }
}

// 16 rows' 8 bytes each (a row's mins), collected as the rows come, in the order of
// for_row_pairs, into two vectors of 8 rows: in registers, since scalar stores read
// back as one vector wait for store forwarding (as dword_collector16's comment says).
struct qword_collector16 {
    __m128i pair[2];
    __m256i quad[2];
    __m512i half[2];  // rows 0-7, rows 8-15

    void add_pair(int k, uint64_t a, uint64_t b) {
        pair[k] = _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(a)), _mm_cvtsi64_si128(static_cast<int64_t>(b)));
    }
    void add_quad(int q) { quad[q] = _mm256_inserti128_si256(_mm256_castsi128_si256(pair[0]), pair[1], 1); }
    void add_half(int h) { half[h] = _mm512_inserti64x4(_mm512_castsi256_si512(quad[0]), quad[1], 1); }
};

// The mins of 16 rows (qword_collector16's halves) as int16 pairs: v[k] lane r = m_2k,
// m_2k+1 of row r, so that vpdpwssd with a token's sub_sums dword k, broadcast, adds
// the pair's part of every row's imin. Word 4r + k of the 128 bytes is that pair of
// bytes; one vpermt2w gathers two k's words, and the bytes widen to int16.
struct k4_mins_index {
    alignas(64) int16_t words[2][32];  // [k / 2]: words 4r + k (r = 0..15), then 4r + k + 1
};
inline constexpr k4_mins_index k_k4_mins_index = [] {
    k4_mins_index x{};
    for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < 32; ++i) x.words[h][i] = static_cast<int16_t>(4 * (i % 16) + 2 * h + i / 16);
    }
    return x;
}();

[[gnu::always_inline]] inline void k4_mins16(const qword_collector16 & mins, __m512i v[4]) {
    const __m512i lo = mins.half[0], hi = mins.half[1];
    #pragma GCC unroll 2
    for (int k = 0; k < 4; k += 2) {
        const __m512i words = _mm512_permutex2var_epi16(lo, _mm512_load_si512(k_k4_mins_index.words[k / 2]), hi);
        v[k] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(words));
        v[k + 1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(words, 1));
    }
}

// The activation in the order of the crumbs of one 64-byte load of Q2_K / Q3_K's qs:
// q[k] = values [32k, 32k + 32) and [128 + 32k, 160 + 32k) ((qs >> 2k) & 3); the
// 128-bit lanes of q[k] are sub-blocks 2k, 2k + 1, 8 + 2k, 9 + 2k.
[[gnu::always_inline]] inline void crumbs_x_decode(const uint8_t * xb, __m512i q[4]) {
    const uint8_t * x = xb + q8_k_off_qs;
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) q[k] = join_256(x + 32 * k, x + 128 + 32 * k);
}

// Dwords k of a and b (256 bytes each) side by side in out, in the order unpacklo and
// unpackhi leave them: interleaved_offset(k) is where pair k starts.
inline void interleave_dwords(const uint8_t * a, const uint8_t * b, uint8_t * out) {
    #pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
        const __m512i x = _mm512_load_si512(a + 64 * v), y = _mm512_load_si512(b + 64 * v);
        _mm512_store_si512(out + 128 * v, _mm512_unpacklo_epi32(x, y));
        _mm512_store_si512(out + 128 * v + 64, _mm512_unpackhi_epi32(x, y));
    }
}

// Dword k = 16v + 4l + i (128-bit lane l of vector v) went to lane l of the unpacklo
// (i < 2) or unpackhi (i >= 2) result, element i % 2.
constexpr size_t interleaved_offset(int k) {
    const int v = k / 16, l = (k % 16) / 4, i = k % 4;
    return static_cast<size_t>(128 * v + (i < 2 ? 0 : 64) + 16 * l + 8 * (i % 2));
}

// Bytes x_j and y_j (j < 8) as dwords 2j and 2j + 1.
inline __m512i interleave_bytes(uint64_t x, uint64_t y) {
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<int64_t>(x)), _mm_cvtsi64_si128(static_cast<int64_t>(y))));
}

// Dwords 2j and 2j + 1 of pairs in every 64-bit lane: a vector's multipliers when its
// even lanes hold one row and its odd lanes the other (run_pairs), one broadcast load.
[[gnu::always_inline]] inline __m512i row_pair_at(const int32_t * pairs, int j) {
    return _mm512_set1_epi64(static_cast<int64_t>(load_u64(reinterpret_cast<const uint8_t *>(pairs + 2 * j))));
}

template <typename W>
struct superblock_kernel {
    static constexpr int64_t block_elems = qk_k;
    static constexpr int64_t chunk_blocks = 4;  // 18.5 KiB of rearranged activations per group
    static constexpr size_t wbb = W::block_bytes;
    static constexpr size_t xbb = q8_k_block_bytes;
    static constexpr int n_sub = W::n_sub;
    static constexpr int dwords_per_sub = 64 / n_sub;
    // Batched decode steps of this many tokens or more (up to 8) take run_pairs.
    static constexpr int pair_min_tokens = W::pair_min_tokens;
    // W::prescaled (optional): codes() gives each code times its sub-block's scale and
    // every scale is 1, so tokens() adds the sub-block sums without a vpmulld.
    static constexpr bool prescaled = [] {
        if constexpr (requires { W::prescaled; }) {
            return W::prescaled;
        } else {
            return false;
        }
    }();
    static constexpr bool has_scale_bytes = requires(const uint8_t * p, uint64_t & a) { W::scale_bytes(p, a, a); };
    static constexpr int32_t scale_offset = [] {
        if constexpr (requires { W::scale_offset; }) {
            return static_cast<int32_t>(W::scale_offset);
        } else {
            return int32_t{0};
        }
    }();
    static constexpr bool has_split_mins = requires { W::split_mins_from; };
    template <int NT>
    static constexpr bool split_mins = [] {
        if constexpr (has_split_mins) {
            return NT >= W::split_mins_from;
        } else {
            return false;
        }
    }();
    static_assert(!W::has_min || W::bias_shift < 0, "a format has mins or a bias, not both");
    static_assert(W::has_min || W::off_dmin == 0, "off_dmin is for formats with mins");

    struct token_group {
        __m512i x[chunk_blocks][64];    // dword k of each token's 256 codes
        __m512i bsums[chunk_blocks][8];  // bsums 2k, 2k + 1 of each token
        __m512  dx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * x0, __m512i offsets, int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * base = x0 + b * xbb;
            #pragma GCC unroll 8
            for (int k = 0; k < 64; ++k) g.x[b - b0][k] = gather_dwords(offsets, base + q8_k_off_qs + 4 * k);
            #pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) g.bsums[b - b0][k] = gather_dwords(offsets, base + q8_k_off_bsums + 4 * k);
            g.dx[b - b0] = gather_f32(offsets, base + q8_k_off_d);
        }
    }

    static float dmin_of(const uint8_t * wb) {
        if constexpr (W::has_min) {
            return f16_at(wb + W::off_dmin);
        } else {
            return 0.0f;
        }
    }

    // R vectors of rows x G token groups at once: each rearranged activation vector is
    // loaded once for R vectors; each row's codes and scales are unpacked once, and each
    // broadcast weight dword serves G groups. Rows (lane_rows) is 1 for the prefill
    // groups (a vector is one row, w[r], and 16 tokens) or 2 for run_pairs (a vector is
    // row w[2r] in its even lanes and w[2r + 1] in its odd ones, lanes 2t and 2t + 1
    // both token t); either way every lane does its (row, token)'s operations in the
    // reference's order.
    template <int R, int G, int Rows = 1>
    static void tokens(const uint8_t * const w[R * Rows], const token_group * const g[G], int64_t b0, int64_t b1, __m512 acc[R][G],
                       prefetch_stream & pf) {
        constexpr int NR = R * Rows;
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t i = b - b0;
            alignas(64) uint8_t codes[NR][qk_k];
            int32_t sc[NR][n_sub];
            uint32_t pair[NR][8];
            constexpr bool byte_pairs = Rows == 2 && has_scale_bytes;
            alignas(64) int32_t sc_pairs[byte_pairs ? R : 1][16];
            alignas(64) int32_t min_pairs[byte_pairs ? R : 1][16];
            #pragma GCC unroll 8
            for (int r = 0; r < NR; ++r) {
                W::codes(w[r] + b * wbb, codes[r]);
                if constexpr (!byte_pairs) W::scales(w[r] + b * wbb, sc[r], pair[r]);
            }
            if constexpr (byte_pairs) {
                // Dwords 2j, 2j + 1: sc_j of the pair's two rows (the lanes' multipliers
                // of sub-block j); the same for the mins, each doubled into both int16
                // halves (bsums pair j's multipliers).
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    uint64_t sc_a, m_a, sc_b, m_b;
                    W::scale_bytes(w[2 * r] + b * wbb, sc_a, m_a);
                    W::scale_bytes(w[2 * r + 1] + b * wbb, sc_b, m_b);
                    __m512i scales = interleave_bytes(sc_a, sc_b), m = interleave_bytes(m_a, m_b), low = m;
                    if constexpr (scale_offset != 0) {
                        const __m512i offset = _mm512_set1_epi32(scale_offset);
                        scales = _mm512_sub_epi32(scales, offset);
                        m = _mm512_sub_epi32(m, offset);
                        low = _mm512_and_si512(m, _mm512_set1_epi32(0xffff));  // a negative m's high bits out of the low half
                    }
                    _mm512_store_si512(sc_pairs[r], scales);
                    _mm512_store_si512(min_pairs[r], _mm512_or_si512(low, _mm512_slli_epi32(m, 16)));  // m in both int16 halves
                }
            }
            // Two rows per vector: their codes interleaved by dword (interleave_dwords),
            // so that one 64-bit broadcast load gives the pair.
            alignas(64) uint8_t paired[Rows == 2 ? R : 1][Rows == 2 ? 2 * qk_k : 64];
            if constexpr (Rows == 2) {
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) interleave_dwords(codes[2 * r], codes[2 * r + 1], paired[r]);
            }
            // The codes are read back as broadcast loads (a load port each), not moved
            // through registers (two shuffles each, on the ports the products need).
            // With two rows per vector only the interleaved copy is read, and the codes
            // may stay in registers on their way there.
            if constexpr (Rows == 2) {
                __asm__("" : "+m"(paired), "+m"(sc_pairs), "+m"(min_pairs));
            } else {
                __asm__("" : "+m"(codes));
            }
            // a: the current sub-block's sums, added to isum times the scale; with
            // prescaled codes, the whole block's (nothing to multiply).
            __m512i isum[R][G], a[R][G];
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) isum[r][q] = a[r][q] = _mm512_setzero_si512();
            }
            #pragma GCC unroll 16
            for (int j = 0; j < n_sub; ++j) {
                // A step per 32 values: 16 sub-blocks of 16 take one every other.
                if (n_sub == 8 || j % 2 == 0) pf.step();
                if constexpr (!prescaled) {
                    #pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        #pragma GCC unroll 2
                        for (int q = 0; q < G; ++q) a[r][q] = _mm512_setzero_si512();
                    }
                }
                #pragma GCC unroll 8
                for (int k = j * dwords_per_sub; k < (j + 1) * dwords_per_sub; ++k) {
                    __m512i x[G];
                    #pragma GCC unroll 2
                    for (int q = 0; q < G; ++q) x[q] = g[q]->x[i][k];
                    #pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        __m512i c;
                        if constexpr (Rows == 2) {
                            c = _mm512_set1_epi64(static_cast<int64_t>(load_u64(paired[r] + interleaved_offset(k))));
                        } else {
                            c = _mm512_set1_epi32(static_cast<int32_t>(load_u32(codes[r] + 4 * k)));
                        }
                        #pragma GCC unroll 2
                        for (int q = 0; q < G; ++q) a[r][q] = _mm512_dpbusd_epi32(a[r][q], c, x[q]);
                    }
                }
                if constexpr (!prescaled) {
                    #pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        const __m512i s = byte_pairs ? row_pair_at(sc_pairs[r], j)
                                                     : lane_rows_i32<Rows>(sc[Rows * r][j], sc[Rows * r + Rows - 1][j]);
                        #pragma GCC unroll 2
                        for (int q = 0; q < G; ++q) isum[r][q] = _mm512_add_epi32(isum[r][q], _mm512_mullo_epi32(a[r][q], s));
                    }
                }
            }
            if constexpr (prescaled) {
                #pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    #pragma GCC unroll 2
                    for (int q = 0; q < G; ++q) isum[r][q] = a[r][q];
                }
            }
            #pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const uint8_t * wa = w[Rows * r] + b * wbb;
                const uint8_t * wz = w[Rows * r + Rows - 1] + b * wbb;
                const __m512 dw = lane_rows_ps<Rows>(f16_at(wa + W::off_d), f16_at(wz + W::off_d));
                const __m512 dmin = lane_rows_ps<Rows>(dmin_of(wa), dmin_of(wz));
                #pragma GCC unroll 2
                for (int q = 0; q < G; ++q) {
                    __m512i bsum_term = _mm512_setzero_si512();
                    #pragma GCC unroll 8
                    for (int k = 0; k < 8; ++k) {
                        const __m512i mult = byte_pairs ? row_pair_at(min_pairs[r], k)
                                                        : lane_rows_i32<Rows>(static_cast<int32_t>(pair[Rows * r][k]),
                                                                              static_cast<int32_t>(pair[Rows * r + Rows - 1][k]));
                        bsum_term = _mm512_dpwssd_epi32(bsum_term, g[q]->bsums[i][k], mult);
                    }
                    const __m512 dx = g[q]->dx[i];
                    if constexpr (W::has_min) {
                        // Reference: sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin.
                        const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r][q]));
                        const __m512 tm = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(bsum_term));
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_sub_ps(t, tm));
                    } else {
                        // isum = sum_j sc_j * (sum(code * x) - (1 << bias_shift) * bsum_j).
                        __m512i is = isum[r][q];
                        if constexpr (W::bias_shift >= 0) is = _mm512_sub_epi32(is, _mm512_slli_epi32(bsum_term, W::bias_shift));
                        acc[r][q] = _mm512_add_ps(acc[r][q], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(is)));
                    }
                }
            }
        }
    }

    static void rest(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                     int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
        W::rest(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
    }

    // Decode (avx512_util.h's decode_tile), for formats with the decode hooks (see the
    // top of this file): per super-block, each token's activation is rearranged once
    // (W::x_decode) for the 16 rows; each row's integer sums come from W::row_decode,
    // and the 16 rows are reduced together (reduce16_pairs). With mins, a row's vector
    // holds isum partials in lanes 0-7 and imin partials in lanes 8-15 (two results per
    // row); without, 16 isum partials (the two halves' results are added).
    template <int NT>
        requires requires { typename W::decode_x; }
    static void rows16(const row_group & rows, const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m512 acc[NT]) {
        constexpr bool apart = split_mins<NT>;
        #pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            // The next rows' block goes a pair of rows' worth (2 blocks) at each pair of
            // rows, not all at the start: BM_matmul (one thread, Zen 4), one token, Q4_K
            // 2816x1024 0.089-0.092 ms against 0.073-0.074, Q6_K 1024x2816 0.131-0.134
            // against 0.110-0.118 (Q5_K and Q6_K 2816x1024 1-3% slower).
            const uint8_t * fetch = next != nullptr ? next + b * 16 * wbb : nullptr;
            int pair_index = 0;
            typename W::decode_x xd[NT];
            qword_collector16 mins;
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) {
                if constexpr (has_split_mins) {
                    W::template x_decode<NT>(x[i] + b * xbb, xd[i]);
                } else {
                    W::x_decode(x[i] + b * xbb, xd[i]);
                }
            }
            const int64_t off = b * static_cast<int64_t>(wbb);
            dword_collector16 scale;
            reduce16_pairs red[NT];
            __m512i halves[NT][2];
            for_row_pairs(
                rows, off,
                [&](int k, const uint8_t * p0, const uint8_t * p1) __attribute__((always_inline)) {
                    if (fetch != nullptr) prefetch_span(fetch + pair_index * 2 * wbb, 2 * wbb);
                    ++pair_index;
                    scale.add_pair(k, p0 + W::off_scale, p1 + W::off_scale);
                    __m512i o0[NT], o1[NT];
                    if constexpr (has_split_mins) {
                        uint64_t m0, m1;
                        W::template row_decode<NT>(p0, xd, o0, m0);
                        W::template row_decode<NT>(p1, xd, o1, m1);
                        if constexpr (apart) mins.add_pair(k, m0, m1);
                    } else {
                        W::template row_decode<NT>(p0, xd, o0);
                        W::template row_decode<NT>(p1, xd, o1);
                    }
                    #pragma GCC unroll 8
                    for (int i = 0; i < NT; ++i) red[i].add_pair(k, o0[i], o1[i]);
                },
                [&](int h, int q) __attribute__((always_inline)) {
                    scale.add_quad(2 * h + q);
                    if constexpr (apart) mins.add_quad(q);
                    #pragma GCC unroll 8
                    for (int i = 0; i < NT; ++i) red[i].add_quad(q);
                },
                [&](int h) __attribute__((always_inline)) {
                    #pragma GCC unroll 8
                    for (int i = 0; i < NT; ++i) halves[i][h] = red[i].half();
                    if constexpr (apart) mins.add_half(h);
                });
            __m512 dw, dmin;
            W::scales16(scale.vec(), dw, dmin);
            __m512i min_pairs[apart ? 4 : 1];
            if constexpr (apart) k4_mins16(mins, min_pairs);
            #pragma GCC unroll 8
            for (int i = 0; i < NT; ++i) {
                __m512i lo, hi;
                reduce16_pairs::finish(halves[i][0], halves[i][1], lo, hi);
                if constexpr (apart) {
                    // lo + hi: the isum partials' two halves; then hi: the rows' imin.
                    lo = _mm512_add_epi32(lo, hi);
                    hi = _mm512_setzero_si512();
                    #pragma GCC unroll 4
                    for (int k = 0; k < 4; ++k) hi = _mm512_dpwssd_epi32(hi, min_pairs[k], _mm512_set1_epi32(xd[i].sub_sums[k]));
                }
                const __m512 dx = _mm512_set1_ps(load_f32(x[i] + b * xbb + q8_k_off_d));
                if constexpr (W::has_min) {
                    // Reference: sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin.
                    const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(lo));
                    const __m512 tm = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(hi));
                    acc[i] = _mm512_add_ps(acc[i], _mm512_sub_ps(t, tm));
                } else {
                    // Reference: sum += (d_w * d_x) * isum.
                    acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi))));
                }
            }
        }
    }

    // One token, 256-bit vectors: vpdpbusd of 32 codes with 32 activation codes, each
    // dword lane within one sub-block, times that sub-block's scale (vpmulld, exact).
    static float vec_dot(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
        float sum = 0.0f;
        for (int64_t ib = 0; ib < n / qk_k; ++ib) {
            const uint8_t * wb = w_row + ib * wbb;
            const uint8_t * xb = x_row + ib * xbb;
            alignas(64) uint8_t codes[qk_k];
            W::codes(wb, codes);
            int32_t sc[n_sub];
            uint32_t pair[8];
            W::scales(wb, sc, pair);
            __m256i acc = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int v = 0; v < 8; ++v) {
                const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), loadu_256(codes + 32 * v), loadu_256(xb + q8_k_off_qs + 32 * v));
                const __m256i mult = n_sub == 8 ? _mm256_set1_epi32(sc[v])
                                                : _mm256_set_m128i(_mm_set1_epi32(sc[(2 * v + 1) % n_sub]), _mm_set1_epi32(sc[(2 * v) % n_sub]));
                acc = _mm256_add_epi32(acc, prescaled ? p : _mm256_mullo_epi32(p, mult));
            }
            const __m256i pairs = _mm256_setr_epi32(static_cast<int32_t>(pair[0]), static_cast<int32_t>(pair[1]),
                                                    static_cast<int32_t>(pair[2]), static_cast<int32_t>(pair[3]),
                                                    static_cast<int32_t>(pair[4]), static_cast<int32_t>(pair[5]),
                                                    static_cast<int32_t>(pair[6]), static_cast<int32_t>(pair[7]));
            const int32_t bsum_term = hsum_i32(_mm256_madd_epi16(loadu_256(xb + q8_k_off_bsums), pairs));
            int32_t isum = hsum_i32(acc);
            const float dx = load_f32(xb + q8_k_off_d);
            const float t_dw = f16_at(wb + W::off_d) * dx;
            if constexpr (W::has_min) {
                sum += t_dw * static_cast<float>(isum) - (dmin_of(wb) * dx) * static_cast<float>(bsum_term);
            } else {
                if constexpr (W::bias_shift >= 0) isum -= bsum_term * (1 << W::bias_shift);
                sum += t_dw * static_cast<float>(isum);
            }
        }
        return sum;
    }
};

}  // namespace
}  // namespace skippy::kernels::avx512
