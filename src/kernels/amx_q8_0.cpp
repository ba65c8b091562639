// AMX tiles for 32-value weight blocks with Q8_0 activations (Q8_0, Q4_0), whose
// reference (quants_common.h, dot_blocks_q8_0) is, per block in order:
//   sumi = exact int32 sum of value_w * q_x;  d = d_w * d_x;  sum += (float)sumi * d.
// One block is K = 32: the A tile is 16 tokens' 32 codes (straight from the activation
// rows), the B tile 8 rows of 16 weight rows x 4 values, tdpbssd gives the 16 x 16 sumi,
// and the epilogue runs the float step for 16 weight rows per vector (amx_util.h).
#include "kernels/amx_kernels.h"
#include "kernels/amx_util.h"
#include "kernels/blocks.h"

namespace skippy::kernels::amx {
namespace {

constexpr size_t xbb = q8_0_block_bytes;
constexpr size_t b_tile_bytes = 8 * 64;  // one block of 16 weight rows

struct q8_0_format {
    static constexpr size_t block_bytes = q8_0_block_bytes;
    static __m256i values(const uint8_t * wb) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb + 2)); }
};

struct q4_0_format {
    static constexpr size_t block_bytes = q4_0_block_bytes;
    // Value j < 16 is the low nibble of qs[j], value j + 16 its high nibble; minus 8.
    static __m256i values(const uint8_t * wb) {
        const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb + 2)));
        const __m256i codes = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
        return _mm256_sub_epi8(codes, _mm256_set1_epi8(8));
    }
};

// What the previous table entry did, for the shapes the tiles leave (fewer than
// k_min_tokens tokens, rows beyond the last group of 16).
mul_tile_fn g_prev_q8_0 = nullptr;
mul_tile_fn g_prev_q4_0 = nullptr;

thread_local scratch t_scratch;

// B tiles and the f32 scales of 16 weight rows, all blocks: bt[b * 512 + kr * 64 + 4n + i]
// = value 4kr + i of block b of row n; dw[16b + n] = d_w.
template <typename W>
void prepare_weights(const uint8_t * w, size_t w_row_bytes, int64_t nb, uint8_t * bt, float * dw) {
    for (int64_t b = 0; b < nb; b += 2) {
        __m512i r[16];
        #pragma GCC unroll 16
        for (int n = 0; n < 16; ++n) {
            const uint8_t * wb = w + static_cast<size_t>(n) * w_row_bytes + static_cast<size_t>(b) * W::block_bytes;
            const __m256i lo = W::values(wb);
            const __m256i hi = b + 1 < nb ? W::values(wb + W::block_bytes) : _mm256_setzero_si256();
            r[n] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        transpose16(r);  // rows 0-7: block b, rows 8-15: block b + 1
        uint8_t * out = bt + static_cast<size_t>(b) * b_tile_bytes;
        #pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) _mm512_store_si512(out + 64 * j, r[j]);
    }
    const __m512i offs = row_offsets(w_row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
        // The u32 at the block's start: d, then the first value bytes (inside the block).
        const __m512i u = gather_rows(w + static_cast<size_t>(b) * W::block_bytes, offs);
        _mm512_store_ps(dw + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u)));
    }
}

// A pass covers 32 weight rows (two row tiles, their B tiles prepared once) x 32 tokens
// (two token tiles), run as four 16 x 16 sub-tiles; their outputs go to a scratch,
// acc[((i * 16 + t) * 2 + j) * 16 + lane] for token tile i and row tile j.
struct pass {
    const uint8_t * a[2];   // A rows of the two token tiles (codes of block 0)
    size_t          a_stride;
    const uint8_t * bt[2];  // B tiles of the two row tiles
    const float *   dw[2];
    const float *   dx[2];  // d_x per block, 16 tokens side by side
    bool            second_tokens, second_rows;
};

// One token tile x one row tile, accumulators in registers. Block b's products go to
// C tile 4 + b % 2 (A 0 + b % 2, B 2 + b % 2); C is stored one block after its product
// was issued and read back one block later still, so the tile unit, the C stores and
// the float step of three consecutive blocks overlap.
// (GCC's tile intrinsics paste the tile number into the instruction's text: literals only.)
inline void issue_even(const uint8_t * a, size_t a_stride, const uint8_t * bt, int64_t b) {
    _tile_loadd(0, a + b * xbb, a_stride);
    _tile_loadd(2, bt + b * b_tile_bytes, 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
}

inline void issue_odd(const uint8_t * a, size_t a_stride, const uint8_t * bt, int64_t b) {
    _tile_loadd(1, a + b * xbb, a_stride);
    _tile_loadd(3, bt + b * b_tile_bytes, 64);
    _tile_zero(5);
    _tile_dpbssd(5, 1, 3);
}

inline void epilogue_regs(const uint8_t * c, const float * dw, const float * dx, __m512 acc[16]) {
    const __m512 dwv = _mm512_load_ps(dw);
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
        const __m512 d = _mm512_mul_ps(dwv, _mm512_set1_ps(dx[t]));
        const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + 64 * t));
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(s, d));
    }
}

void run_subtile(const uint8_t * a, size_t a_stride, const uint8_t * bt, const float * dw, const float * dx, int64_t nb,
                 uint8_t * cbuf, float * out) {
    __m512 acc[16];
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    uint8_t * c0 = cbuf;
    uint8_t * c1 = cbuf + 1024;
    issue_even(a, a_stride, bt, 0);
    // Iteration b: issue b + 1, store b, float step of b - 1.
    for (int64_t b = 0; b < nb; b += 2) {
        if (b + 1 < nb) issue_odd(a, a_stride, bt, b + 1);
        _tile_stored(4, c0, 64);
        if (b > 0) epilogue_regs(c1, dw + 16 * (b - 1), dx + 16 * (b - 1), acc);
        if (b + 1 >= nb) {
            epilogue_regs(c0, dw + 16 * b, dx + 16 * b, acc);
            break;
        }
        if (b + 2 < nb) issue_even(a, a_stride, bt, b + 2);
        _tile_stored(5, c1, 64);
        epilogue_regs(c0, dw + 16 * b, dx + 16 * b, acc);
        if (b + 2 >= nb) epilogue_regs(c1, dw + 16 * (b + 1), dx + 16 * (b + 1), acc);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) _mm512_store_ps(out + 32 * t, acc[t]);
}

void run_pass(const pass & p, int64_t nb, uint8_t * cbuf, float * acc) {
    for (int i = 0; i < 2; ++i) {
        if (i == 1 && !p.second_tokens) break;
        for (int j = 0; j < 2; ++j) {
            if (j == 1 && !p.second_rows) break;
            run_subtile(p.a[i], p.a_stride, p.bt[j], p.dw[j], p.dx[i], nb, cbuf, acc + (i * 16 * 2 + j) * 16);
        }
    }
}

template <typename W>
void mul_tile_block32(mul_tile_fn prev, const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq,
                      size_t xq_row_bytes, int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t n_row_tiles = n_rows / k_tile;
    if (n_tokens < k_min_tokens || n_row_tiles == 0) {
        prev(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
        return;
    }
    const int64_t nb = n / qk_0;
    const int64_t nb2 = (nb + 1) & ~int64_t(1);
    const int64_t n_token_tiles = (n_tokens + k_tile - 1) / k_tile;
    const int64_t n_tail = n_tokens % k_tile;

    carver layout;
    const size_t at_bt = layout.take(2 * static_cast<size_t>(nb2) * b_tile_bytes);
    const size_t at_dw = layout.take(2 * static_cast<size_t>(nb) * 16 * sizeof(float));
    const size_t at_dx = layout.take(static_cast<size_t>(n_token_tiles * nb) * 16 * sizeof(float));
    const size_t at_tail = layout.take(n_tail > 0 ? k_tile * xq_row_bytes : 0);
    const size_t at_c = layout.take(2 * 4096);
    const size_t at_acc = layout.take(32 * 32 * sizeof(float));
    uint8_t * base = t_scratch.get(layout.offset);
    uint8_t * bt = base + at_bt;
    float * dw = reinterpret_cast<float *>(base + at_dw);
    float * dx = reinterpret_cast<float *>(base + at_dx);
    uint8_t * tail = base + at_tail;
    uint8_t * cbuf = base + at_c;
    float * acc = reinterpret_cast<float *>(base + at_acc);

    // Activation scales per token tile and block, 16 tokens side by side; the last tile's
    // missing tokens are zero codes (their outputs are not stored).
    const __m512i x_offs = row_offsets(xq_row_bytes);
    for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
        const int64_t n_valid = n_tokens - tt * k_tile < k_tile ? n_tokens - tt * k_tile : k_tile;
        const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1);
        const uint8_t * x0 = xq + static_cast<size_t>(tt * k_tile) * xq_row_bytes;
        for (int64_t b = 0; b < nb; ++b) {
            const __m512i u = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, x_offs, x0 + static_cast<size_t>(b) * xbb, 1);
            _mm512_store_ps(dx + (tt * nb + b) * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u)));
        }
    }
    if (n_tail > 0) {
        std::memset(tail, 0, k_tile * xq_row_bytes);
        std::memcpy(tail, xq + static_cast<size_t>(n_tokens - n_tail) * xq_row_bytes, static_cast<size_t>(n_tail) * xq_row_bytes);
    }
    const auto token_tile = [&](int64_t tt) {
        const bool partial = tt == n_token_tiles - 1 && n_tail > 0;
        return (partial ? tail : xq + static_cast<size_t>(tt * k_tile) * xq_row_bytes) + 2;
    };

    tile_config cfg;
    set_tile(cfg, 0, 16, 32);  // A, token tiles 0 and 1
    set_tile(cfg, 1, 16, 32);
    set_tile(cfg, 2, 8, 64);   // B, row tiles 0 and 1
    set_tile(cfg, 3, 8, 64);
    for (int i = 4; i < 8; ++i) set_tile(cfg, i, 16, 64);  // C (token tile, row tile): 4 (0, 0), 5 (0, 1), 6 (1, 0), 7 (1, 1)
    _tile_loadconfig(&cfg);

    for (int64_t rt = 0; rt < n_row_tiles; rt += 2) {
        const bool second_rows = rt + 1 < n_row_tiles;
        uint8_t * bt1 = bt + static_cast<size_t>(nb2) * b_tile_bytes;
        float * dw1 = dw + nb * 16;
        prepare_weights<W>(w + static_cast<size_t>(rt * k_tile) * w_row_bytes, w_row_bytes, nb, bt, dw);
        if (second_rows) prepare_weights<W>(w + static_cast<size_t>((rt + 1) * k_tile) * w_row_bytes, w_row_bytes, nb, bt1, dw1);
        for (int64_t tt = 0; tt < n_token_tiles; tt += 2) {
            const bool second_tokens = tt + 1 < n_token_tiles;
            pass p;
            p.a[0] = token_tile(tt);
            p.a[1] = second_tokens ? token_tile(tt + 1) : p.a[0];
            p.a_stride = xq_row_bytes;
            p.bt[0] = bt;
            p.bt[1] = second_rows ? bt1 : bt;
            p.dw[0] = dw;
            p.dw[1] = dw1;
            p.dx[0] = dx + tt * nb * 16;
            p.dx[1] = dx + (second_tokens ? tt + 1 : tt) * nb * 16;
            p.second_tokens = second_tokens;
            p.second_rows = second_rows;
            run_pass(p, nb, cbuf, acc);
            for (int i = 0; i < (second_tokens ? 2 : 1); ++i) {
                const int64_t t0 = (tt + i) * k_tile;
                const int64_t n_valid = n_tokens - t0 < k_tile ? n_tokens - t0 : k_tile;
                for (int j = 0; j < (second_rows ? 2 : 1); ++j) {
                    float * yt = y + t0 * y_stride + (rt + j) * k_tile;
                    for (int64_t t = 0; t < n_valid; ++t) {
                        _mm512_storeu_ps(yt + t * y_stride, _mm512_load_ps(acc + ((i * 16 + t) * 2 + j) * 16));
                    }
                }
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

void mul_tile_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_block32<q8_0_format>(g_prev_q8_0, w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

void mul_tile_q4_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_block32<q4_0_format>(g_prev_q4_0, w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace

void install_q8_0(type_kernels & k) {
    g_prev_q8_0 = k.mul_tile;
    if (g_prev_q8_0 != nullptr) k.mul_tile = mul_tile_q8_0;
}

void install_q4_0(type_kernels & k) {
    g_prev_q4_0 = k.mul_tile;
    if (g_prev_q4_0 != nullptr) k.mul_tile = mul_tile_q4_0;
}

}  // namespace skippy::kernels::amx
