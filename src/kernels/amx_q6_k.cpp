// AMX tiles for Q6_K weights with Q8_K activations, whose reference (quants_common.h,
// dot_signed_scale_q8_k) is, per super-block in order:
//   isum = sum_j sc_j * dot(v_j, x_j)   exactly in int32 (v = q - 32, 16 sub-blocks of 16)
//   sum += (d_w * d_x) * isum.
// The B tiles hold w = v * sc_j (|w| <= 4096) as the byte planes lo (unsigned) and hi
// (signed) of amx_util.h, four K = 64 chunks per super-block: tdpbsud accumulates x * lo
// and tdpbssd x * hi, isum = C_lo + 256 * C_hi. The offset -32 is inside w, so no bsums
// are needed.
#include "kernels/amx_kernels.h"
#include "kernels/amx_util.h"
#include "kernels/blocks.h"

#include <type_traits>

namespace skippy::kernels::amx {
namespace {

constexpr size_t xbb = q8_k_block_bytes;
constexpr size_t wbb = q6_k_block_bytes;
constexpr size_t sb_tiles_bytes = 4 * 2 * 1024;

mul_tile_fn g_prev_q6_k = nullptr;

thread_local scratch t_scratch;

// The 256 values (q - 32, int8) of one super-block in value order (blocks.h).
inline void unpack_values(const uint8_t * wb, uint8_t * out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    const __m256i off = _mm256_set1_epi8(32);
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb + q6_k_off_ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb + q6_k_off_ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb + q6_k_off_qh + 32 * h));
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
        uint8_t * o = out + 128 * h;
        _mm256_store_si256(reinterpret_cast<__m256i *>(o), _mm256_sub_epi8(q0, off));
        _mm256_store_si256(reinterpret_cast<__m256i *>(o + 32), _mm256_sub_epi8(q1, off));
        _mm256_store_si256(reinterpret_cast<__m256i *>(o + 64), _mm256_sub_epi8(q2, off));
        _mm256_store_si256(reinterpret_cast<__m256i *>(o + 96), _mm256_sub_epi8(q3, off));
    }
}

// B tiles of all super-blocks of 16 rows (sb * 8 KB + chunk * 2 KB + {0: lo, 1 KB: hi})
// and d_w per super-block (16 floats). values: scratch of 16 * 256 bytes.
void prepare_weights(const uint8_t * w, size_t w_row_bytes, int64_t nsb, uint8_t * bt, float * dw,
                     uint8_t * values) {
    const __m512i offs = row_offsets(w_row_bytes);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t * b0 = w + static_cast<size_t>(sb) * wbb;
        // Scales: u[k] holds bytes 4k .. 4k + 3 of the 16 rows' scales; sc[j] is scale j
        // sign-extended, in both 16-bit words of each row's lane.
        __m512i sc[16];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i u = gather_rows(b0 + q6_k_off_scales + 4 * k, offs);
            #pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                const __m512i s = _mm512_srai_epi32(_mm512_slli_epi32(u, 24 - 8 * i), 24);
                const __m512i s16 = _mm512_and_si512(s, _mm512_set1_epi32(0xffff));
                sc[4 * k + i] = _mm512_or_si512(s16, _mm512_slli_epi32(s16, 16));
            }
        }
        // d is the last field of the block: read the u32 that ends with it (never past the row).
        const __m512i ud = _mm512_srli_epi32(gather_rows(b0 + q6_k_off_d - 2, offs), 16);
        _mm512_store_ps(dw + 16 * sb, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(ud)));
        for (int n = 0; n < 16; ++n) unpack_values(b0 + static_cast<size_t>(n) * w_row_bytes, values + 256 * n);
        uint8_t * out = bt + static_cast<size_t>(sb) * sb_tiles_bytes;
        #pragma GCC unroll 1
        for (int c = 0; c < 4; ++c) {
            __m512i r[16];
            #pragma GCC unroll 16
            for (int n = 0; n < 16; ++n) r[n] = _mm512_load_si512(values + 256 * n + 64 * c);
            transpose16(r);  // r[kr]: values 64c + 4kr .. 64c + 4kr + 3 of the 16 rows
            uint8_t * lo = out + static_cast<size_t>(c) * 2048;
            uint8_t * hi = lo + 1024;
            #pragma GCC unroll 16
            for (int kr = 0; kr < 16; ++kr) {
                const __m512i s = sc[4 * c + kr / 4];
                const __m512i ve = _mm512_srai_epi16(_mm512_slli_epi16(r[kr], 8), 8);
                const __m512i vo = _mm512_srai_epi16(r[kr], 8);
                __m512i l, h;
                split_products(_mm512_mullo_epi16(ve, s), _mm512_mullo_epi16(vo, s), l, h);
                _mm512_store_si512(lo + 64 * kr, l);
                _mm512_store_si512(hi + 64 * kr, h);
            }
        }
    }
}

void mul_tile_q6_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t n_row_tiles = n_rows / k_tile;
    if (n_tokens < k_min_tokens || n_row_tiles == 0) {
        g_prev_q6_k(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
        return;
    }
    const int64_t nsb = n / qk_k;
    const int64_t n_token_tiles = (n_tokens + k_tile - 1) / k_tile;
    const int64_t n_tail = n_tokens % k_tile;

    carver layout;
    const size_t at_bt = layout.take(static_cast<size_t>(nsb) * sb_tiles_bytes);
    const size_t at_dw = layout.take(static_cast<size_t>(nsb) * 16 * sizeof(float));
    const size_t at_values = layout.take(16 * 256);
    const size_t at_dx = layout.take(static_cast<size_t>(n_token_tiles * nsb) * 16 * sizeof(float));
    const size_t at_tail = layout.take(n_tail > 0 ? k_tile * xq_row_bytes : 0);
    const size_t at_c = layout.take(4 * 1024);
    uint8_t * base = t_scratch.get(layout.offset);
    uint8_t * bt = base + at_bt;
    float * dw = reinterpret_cast<float *>(base + at_dw);
    uint8_t * values = base + at_values;
    float * dx = reinterpret_cast<float *>(base + at_dx);
    uint8_t * tail = base + at_tail;
    uint8_t * cbuf = base + at_c;

    for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
        for (int64_t sb = 0; sb < nsb; ++sb) {
            float * d = dx + (tt * nsb + sb) * 16;
            for (int64_t t = 0; t < 16; ++t) {
                const int64_t tok = tt * k_tile + t;
                d[t] = tok < n_tokens ? load_f32(xq + static_cast<size_t>(tok) * xq_row_bytes + static_cast<size_t>(sb) * xbb + q8_k_off_d)
                                      : 0.0f;
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
        prepare_weights(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, nsb, bt, dw, values);
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
                _tile_dpbssd(1, 2, 4);
                _tile_loadd(5, as + 64, xq_row_bytes);
                _tile_loadd(6, bt_sb + 2048, 64);
                _tile_loadd(7, bt_sb + 3072, 64);
                _tile_dpbsud(0, 5, 6);
                _tile_dpbssd(1, 5, 7);
                _tile_loadd(2, as + 128, xq_row_bytes);
                _tile_loadd(3, bt_sb + 4096, 64);
                _tile_loadd(4, bt_sb + 5120, 64);
                _tile_dpbsud(0, 2, 3);
                _tile_dpbssd(1, 2, 4);
                _tile_loadd(5, as + 192, xq_row_bytes);
                _tile_loadd(6, bt_sb + 6144, 64);
                _tile_loadd(7, bt_sb + 7168, 64);
                _tile_dpbsud(0, 5, 6);
                _tile_dpbssd(1, 5, 7);
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

                const __m512 dwv = _mm512_load_ps(dw + 16 * sb);
                const float * dxs = dx + (tt * nsb + sb) * 16;
                const auto float_step = [&](auto n_tile_tokens) {
                    constexpr int nt = decltype(n_tile_tokens)::value;
                    #pragma GCC unroll 16
                    for (int t = 0; t < nt; ++t) {
                        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c_lo + 64 * t),
                                                              _mm512_slli_epi32(_mm512_load_si512(c_hi + 64 * t), 8));
                        // Reference: sum += (d_w * d_x) * isum.
                        const __m512 d = _mm512_mul_ps(dwv, _mm512_set1_ps(dxs[t]));
                        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
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
        g_prev_q6_k(w + static_cast<size_t>(done) * w_row_bytes, w_row_bytes, n_rows - done, xq, xq_row_bytes, n_tokens, n,
                    y + done, y_stride);
    }
}

}  // namespace

void install_q6_k(type_kernels & k) {
    g_prev_q6_k = k.mul_tile;
    if (g_prev_q6_k != nullptr) k.mul_tile = mul_tile_q6_k;
}

}  // namespace skippy::kernels::amx
