// AMX tiles for Q4_K and Q5_K weights with Q8_K activations, whose reference
// (quants_common.h, dot_min_scale_q8_k) is, per super-block in order:
//   isum = sum_j sc_j * dot(q_j, x_j),  imin = sum_j m_j * bsum32_j(x)   exact in int32
//   sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin.
// The B tiles hold w = q * sc_j (q < 32, sc_j < 64: w < 2^11) as the byte planes lo and hi
// (amx_util.h), four K = 64 chunks per super-block, so tdpbsud into two C tiles gives
// isum = C_lo + 256 * C_hi for 16 tokens x 16 rows. imin is 4 vpdpwssd per token (the
// mins of 16 rows against the token's sub-block sums); the float step is the
// reference's, one output per lane.
#include "kernels/amx_kernels.h"
#include "kernels/amx_util.h"
#include "kernels/blocks.h"

#include <type_traits>

namespace skippy::kernels::amx {
namespace {

constexpr size_t xbb = q8_k_block_bytes;
constexpr size_t sb_tiles_bytes = 4 * 2 * 1024;  // 4 chunks x (lo, hi) of 16 rows

struct q4_k_format {
    static constexpr size_t block_bytes = q4_k_block_bytes;
    static constexpr size_t off_qs = q4_k_off_qs;
    static constexpr bool has_qh = false;
};

struct q5_k_format {
    static constexpr size_t block_bytes = q5_k_block_bytes;
    static constexpr size_t off_qs = q5_k_off_qs;
    static constexpr bool has_qh = true;
    static constexpr size_t off_qh = q5_k_off_qh;
};

mul_tile_fn g_prev_q4_k = nullptr;
mul_tile_fn g_prev_q5_k = nullptr;

thread_local scratch t_scratch;

// Per super-block of 16 weight rows: d_w, dmin_w (16 floats each) and the mins as four
// vectors of int16 pairs (m_2p, m_2p+1) per row.
struct sb_scales {
    __m512  d, dmin;
    __m512i m[4];
};

inline __m512i byte_of(__m512i v, int i) { return _mm512_and_si512(_mm512_srli_epi32(v, 8 * i), _mm512_set1_epi32(0xff)); }
inline __m512i both_words(__m512i s) { return _mm512_or_si512(s, _mm512_slli_epi32(s, 16)); }

// The B bytes of one K = 64 chunk's B row from its codes q (< 32) and the 16 rows'
// scales s (as both_words): w = q * s, split into lo and hi.
inline void scaled_rows(__m512i q, __m512i s, uint8_t * lo_out, uint8_t * hi_out) {
    const __m512i we = _mm512_mullo_epi16(_mm512_and_si512(q, _mm512_set1_epi16(0x00ff)), s);
    const __m512i wo = _mm512_mullo_epi16(_mm512_srli_epi16(q, 8), s);
    __m512i lo, hi;
    split_products(we, wo, lo, hi);
    _mm512_store_si512(lo_out, lo);
    _mm512_store_si512(hi_out, hi);
}

template <typename W>
void prepare_weights(const uint8_t * w, size_t w_row_bytes, int64_t nsb, uint8_t * bt, sb_scales * scales) {
    const __m512i offs = row_offsets(w_row_bytes);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t * b0 = w + static_cast<size_t>(sb) * W::block_bytes;
        const __m512i ud = gather_rows(b0, offs);
        const __m512i u0 = gather_rows(b0 + 4, offs);
        const __m512i u1 = gather_rows(b0 + 8, offs);
        const __m512i u2 = gather_rows(b0 + 12, offs);
        sb_scales & s = scales[sb];
        s.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(ud));
        s.dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(ud, 16)));
        const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f);
        const __m512i sc_lo4 = _mm512_and_si512(u0, m6);
        const __m512i m_lo4 = _mm512_and_si512(u1, m6);
        const __m512i sc_hi4 = _mm512_or_si512(_mm512_and_si512(u2, _mm512_set1_epi32(0x0f0f0f0f)),
                                               _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), _mm512_set1_epi32(0x03030303)), 4));
        const __m512i m_hi4 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), _mm512_set1_epi32(0x0f0f0f0f)),
                                              _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), _mm512_set1_epi32(0x03030303)), 4));
        s.m[0] = _mm512_or_si512(byte_of(m_lo4, 0), _mm512_slli_epi32(byte_of(m_lo4, 1), 16));
        s.m[1] = _mm512_or_si512(byte_of(m_lo4, 2), _mm512_slli_epi32(byte_of(m_lo4, 3), 16));
        s.m[2] = _mm512_or_si512(byte_of(m_hi4, 0), _mm512_slli_epi32(byte_of(m_hi4, 1), 16));
        s.m[3] = _mm512_or_si512(byte_of(m_hi4, 2), _mm512_slli_epi32(byte_of(m_hi4, 3), 16));
        __m512i sc[8];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            sc[j] = both_words(byte_of(sc_lo4, j));
            sc[4 + j] = both_words(byte_of(sc_hi4, j));
        }

        __m512i h[16];
        if constexpr (W::has_qh) {
            #pragma GCC unroll 16
            for (int n = 0; n < 16; ++n) {
                const uint8_t * p = b0 + static_cast<size_t>(n) * w_row_bytes + W::off_qh;
                h[n] = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
                h[n] = _mm512_inserti64x4(h[n], _mm256_setzero_si256(), 1);
            }
            transpose16(h);  // h[kr] (kr < 8): qh[4kr .. 4kr + 3] of the 16 rows
        }
        uint8_t * out = bt + static_cast<size_t>(sb) * sb_tiles_bytes;
        #pragma GCC unroll 1
        for (int g = 0; g < 4; g += 2) {
            __m512i r[16];
            #pragma GCC unroll 16
            for (int n = 0; n < 16; ++n) {
                r[n] = _mm512_loadu_si512(b0 + static_cast<size_t>(n) * w_row_bytes + W::off_qs + 32 * g);
            }
            transpose16(r);  // r[8 * half + kr]: chunk g + half, bytes 4kr .. 4kr + 3 of its 32
            #pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                const int c = g + half;
                uint8_t * lo = out + static_cast<size_t>(c) * 2048;
                uint8_t * hi = lo + 1024;
                #pragma GCC unroll 8
                for (int kr = 0; kr < 8; ++kr) {
                    const __m512i p = r[8 * half + kr];
                    __m512i q_low = _mm512_and_si512(p, low4);                         // values 64c + 4kr + i
                    __m512i q_high = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);  // values 64c + 32 + 4kr + i
                    if constexpr (W::has_qh) {
                        const __m512i one = _mm512_set1_epi8(1);
                        const __m512i bl = _mm512_and_si512(_mm512_srl_epi16(h[kr], _mm_cvtsi32_si128(2 * c)), one);
                        const __m512i bh = _mm512_and_si512(_mm512_srl_epi16(h[kr], _mm_cvtsi32_si128(2 * c + 1)), one);
                        q_low = _mm512_or_si512(q_low, _mm512_slli_epi16(bl, 4));
                        q_high = _mm512_or_si512(q_high, _mm512_slli_epi16(bh, 4));
                    }
                    scaled_rows(q_low, sc[2 * c], lo + 64 * kr, hi + 64 * kr);
                    scaled_rows(q_high, sc[2 * c + 1], lo + 64 * (8 + kr), hi + 64 * (8 + kr));
                }
            }
        }
    }
}

template <typename W>
void mul_tile_k4(mul_tile_fn prev, const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq,
                 size_t xq_row_bytes, int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t n_row_tiles = n_rows / k_tile;
    if (n_tokens < k_min_tokens_short_tiles || n_row_tiles == 0) {
        prev(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
        return;
    }
    const int64_t nsb = n / qk_k;
    const int64_t n_token_tiles = (n_tokens + k_tile - 1) / k_tile;
    const int64_t n_tail = n_tokens % k_tile;

    carver layout;
    const size_t at_bt = layout.take(static_cast<size_t>(nsb) * sb_tiles_bytes);
    const size_t at_sc = layout.take(static_cast<size_t>(nsb) * sizeof(sb_scales));
    const size_t at_dx = layout.take(static_cast<size_t>(n_token_tiles * nsb) * 16 * sizeof(float));
    const size_t at_bs = layout.take(static_cast<size_t>(n_token_tiles * nsb) * 16 * 4 * sizeof(int32_t));
    const size_t at_tail = layout.take(n_tail > 0 ? k_tile * xq_row_bytes : 0);
    const size_t at_c = layout.take(4 * 1024);
    uint8_t * base = t_scratch.get(layout.offset);
    uint8_t * bt = base + at_bt;
    sb_scales * scales = reinterpret_cast<sb_scales *>(base + at_sc);
    float * dx = reinterpret_cast<float *>(base + at_dx);
    int32_t * bs = reinterpret_cast<int32_t *>(base + at_bs);
    uint8_t * tail = base + at_tail;
    uint8_t * cbuf = base + at_c;

    // Per token tile and super-block, 16 tokens side by side: d_x, and the sub-block sums
    // of 32 codes as int16 pairs (bsum32_2p, bsum32_2p+1), p < 4. Missing tokens of the
    // last tile are zero.
    for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
        for (int64_t sb = 0; sb < nsb; ++sb) {
            float * d = dx + (tt * nsb + sb) * 16;
            int32_t * s = bs + (tt * nsb + sb) * 64;
            for (int64_t t = 0; t < 16; ++t) {
                const int64_t tok = tt * k_tile + t;
                if (tok >= n_tokens) {
                    d[t] = 0.0f;
                    for (int p = 0; p < 4; ++p) s[4 * t + p] = 0;
                    continue;
                }
                const uint8_t * xb = xq + static_cast<size_t>(tok) * xq_row_bytes + static_cast<size_t>(sb) * xbb;
                d[t] = load_f32(xb + q8_k_off_d);
                // bsum32_j = bsums[2j] + bsums[2j + 1] (|.| <= 32 * 128: int16), in order.
                const __m256i b16 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb + q8_k_off_bsums));
                const __m256i s32 = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
                _mm_store_si128(reinterpret_cast<__m128i *>(s + 4 * t), _mm256_cvtepi32_epi16(s32));
            }
        }
    }
    if (n_tail > 0) {
        std::memset(tail, 0, k_tile * xq_row_bytes);
        std::memcpy(tail, xq + static_cast<size_t>(n_tokens - n_tail) * xq_row_bytes, static_cast<size_t>(n_tail) * xq_row_bytes);
    }

    // One tile of at most 8 tokens (a batched decode step of a few lanes): A and C get 4
    // or 8 rows, so the products and the float step do a quarter or half the work of a
    // padded tile.
    const int tile_tokens = n_tokens <= 4 ? 4 : (n_tokens <= 8 ? 8 : 16);
    tile_config cfg;
    for (int i = 0; i < 8; ++i) set_tile(cfg, i, 16, 64);  // 0, 1: C lo, hi; 2-4 and 5-7: A, B lo, B hi
    for (int i : {0, 1, 2, 5}) set_tile(cfg, i, tile_tokens, 64);
    _tile_loadconfig(&cfg);

    for (int64_t rt = 0; rt < n_row_tiles; ++rt) {
        const int64_t r0 = rt * k_tile;
        prepare_weights<W>(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, nsb, bt, scales);
        for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
            const int64_t t0 = tt * k_tile;
            const bool partial = tt == n_token_tiles - 1 && n_tail > 0;
            const uint8_t * a = (partial ? tail : xq + static_cast<size_t>(t0) * xq_row_bytes) + q8_k_off_qs;
            __m512 acc[16];
            #pragma GCC unroll 16
            for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
            // The products of super-block sb for this token tile into C tiles 0 (lo) and 1 (hi).
            const auto issue = [&](int64_t sb) {
                const uint8_t * as = a + static_cast<size_t>(sb) * xbb;
                const uint8_t * bt_sb = bt + static_cast<size_t>(sb) * sb_tiles_bytes;
                _tile_zero(0);
                _tile_zero(1);
                _tile_loadd(2, as, xq_row_bytes);
                _tile_loadd(3, bt_sb, 64);
                _tile_loadd(4, bt_sb + 1024, 64);
                _tile_dpbsud(0, 2, 3);
                _tile_dpbsud(1, 2, 4);
                _tile_loadd(5, as + 64, xq_row_bytes);
                _tile_loadd(6, bt_sb + 2048, 64);
                _tile_loadd(7, bt_sb + 3072, 64);
                _tile_dpbsud(0, 5, 6);
                _tile_dpbsud(1, 5, 7);
                _tile_loadd(2, as + 128, xq_row_bytes);
                _tile_loadd(3, bt_sb + 4096, 64);
                _tile_loadd(4, bt_sb + 5120, 64);
                _tile_dpbsud(0, 2, 3);
                _tile_dpbsud(1, 2, 4);
                _tile_loadd(5, as + 192, xq_row_bytes);
                _tile_loadd(6, bt_sb + 6144, 64);
                _tile_loadd(7, bt_sb + 7168, 64);
                _tile_dpbsud(0, 5, 6);
                _tile_dpbsud(1, 5, 7);
            };
            // C of sb is stored before sb + 1's products are issued, and sb's float step
            // runs beside them.
            issue(0);
            for (int64_t sb = 0; sb < nsb; ++sb) {
                uint8_t * c_lo = cbuf + (sb & 1) * 2048;
                uint8_t * c_hi = c_lo + 1024;
                _tile_stored(0, c_lo, 64);
                _tile_stored(1, c_hi, 64);
                if (sb + 1 < nsb) issue(sb + 1);

                const sb_scales & s = scales[sb];
                const float * dxs = dx + (tt * nsb + sb) * 16;
                const int32_t * bss = bs + (tt * nsb + sb) * 64;
                const auto float_step = [&](auto n_tile_tokens) {
                    constexpr int nt = decltype(n_tile_tokens)::value;
                    #pragma GCC unroll 16
                    for (int t = 0; t < nt; ++t) {
                        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c_lo + 64 * t),
                                                              _mm512_slli_epi32(_mm512_load_si512(c_hi + 64 * t), 8));
                        __m512i imin = _mm512_dpwssd_epi32(_mm512_setzero_si512(), s.m[0], _mm512_set1_epi32(bss[4 * t]));
                        imin = _mm512_dpwssd_epi32(imin, s.m[1], _mm512_set1_epi32(bss[4 * t + 1]));
                        imin = _mm512_dpwssd_epi32(imin, s.m[2], _mm512_set1_epi32(bss[4 * t + 2]));
                        imin = _mm512_dpwssd_epi32(imin, s.m[3], _mm512_set1_epi32(bss[4 * t + 3]));
                        const __m512 dxt = _mm512_set1_ps(dxs[t]);
                        // Reference: (d_w * d_x) * isum - (dmin_w * d_x) * imin, then sum += .
                        const __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(s.d, dxt), _mm512_cvtepi32_ps(isum));
                        const __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(s.dmin, dxt), _mm512_cvtepi32_ps(imin));
                        acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(t1, t2));
                    }
                };
                if (tile_tokens == 4) {
                    float_step(std::integral_constant<int, 4>{});
                } else if (tile_tokens == 8) {
                    float_step(std::integral_constant<int, 8>{});
                } else {
                    float_step(std::integral_constant<int, 16>{});
                }
            }
            const int64_t n_valid = partial ? n_tail : k_tile;
            float * yt = y + t0 * y_stride + r0;
            #pragma GCC unroll 16
            for (int t = 0; t < 16; ++t) {
                if (t < n_valid) _mm512_storeu_ps(yt + t * y_stride, acc[t]);
            }
        }
    }
    _tile_release();
    const int64_t done = n_row_tiles * k_tile;
    if (done < n_rows) {
        prev(w + static_cast<size_t>(done) * w_row_bytes, w_row_bytes, n_rows - done, xq, xq_row_bytes, n_tokens, n, y + done,
             y_stride);
    }
}

void mul_tile_q4_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_k4<q4_k_format>(g_prev_q4_k, w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

void mul_tile_q5_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_k4<q5_k_format>(g_prev_q5_k, w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace

void install_q4_k(type_kernels & k) {
    g_prev_q4_k = k.mul_tile;
    if (g_prev_q4_k != nullptr) k.mul_tile = mul_tile_q4_k;
}

void install_q5_k(type_kernels & k) {
    g_prev_q5_k = k.mul_tile;
    if (g_prev_q5_k != nullptr) k.mul_tile = mul_tile_q5_k;
}

}  // namespace skippy::kernels::amx
