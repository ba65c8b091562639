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

// What the previous table entry did, for the shapes the tiles leave.
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
    for (int64_t b = 0; b < nb; ++b) {
        for (int n = 0; n < 16; ++n) {
            dw[16 * b + n] = _cvtsh_ss(load_u16(w + static_cast<size_t>(n) * w_row_bytes + static_cast<size_t>(b) * W::block_bytes));
        }
    }
}

// The float step of one block for 16 tokens: acc[t] (16 weight rows) += sumi * (d_w * d_x).
inline void block_epilogue(const uint8_t * c, const float * dw, const float * dx, __m512 acc[16]) {
    const __m512 dwv = _mm512_load_ps(dw);
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
        const __m512 d = _mm512_mul_ps(dwv, _mm512_set1_ps(dx[t]));
        const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + 64 * t));
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(s, d));
    }
}

template <typename W>
void mul_tile_block32(mul_tile_fn prev, const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq,
                      size_t xq_row_bytes, int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t n_row_tiles = n_rows / k_tile;
    if (n_tokens < k_tile || n_row_tiles == 0) {
        prev(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
        return;
    }
    const int64_t nb = n / qk_0;
    const int64_t nb2 = (nb + 1) & ~int64_t(1);
    const int64_t n_token_tiles = (n_tokens + k_tile - 1) / k_tile;
    const int64_t n_tail = n_tokens % k_tile;

    carver layout;
    const size_t at_bt = layout.take(static_cast<size_t>(nb2) * b_tile_bytes);
    const size_t at_dw = layout.take(static_cast<size_t>(nb) * 16 * sizeof(float));
    const size_t at_dx = layout.take(static_cast<size_t>(n_token_tiles * nb) * 16 * sizeof(float));
    const size_t at_tail = layout.take(n_tail > 0 ? k_tile * xq_row_bytes : 0);
    const size_t at_c = layout.take(2 * 1024);
    uint8_t * base = t_scratch.get(layout.offset);
    uint8_t * bt = base + at_bt;
    float * dw = reinterpret_cast<float *>(base + at_dw);
    float * dx = reinterpret_cast<float *>(base + at_dx);
    uint8_t * tail = base + at_tail;
    uint8_t * c0 = base + at_c;
    uint8_t * c1 = c0 + 1024;

    // Activation scales per token tile and block, 16 tokens side by side; the last tile's
    // missing tokens are zero codes (their outputs are not stored).
    for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
        for (int64_t b = 0; b < nb; ++b) {
            float * d = dx + (tt * nb + b) * 16;
            for (int64_t t = 0; t < 16; ++t) {
                const int64_t tok = tt * k_tile + t;
                d[t] = tok < n_tokens ? _cvtsh_ss(load_u16(xq + static_cast<size_t>(tok) * xq_row_bytes + static_cast<size_t>(b) * xbb))
                                      : 0.0f;
            }
        }
    }
    if (n_tail > 0) {
        std::memset(tail, 0, k_tile * xq_row_bytes);
        std::memcpy(tail, xq + static_cast<size_t>(n_tokens - n_tail) * xq_row_bytes, static_cast<size_t>(n_tail) * xq_row_bytes);
    }

    tile_config cfg;
    set_tile(cfg, 0, 16, 32);  // A, even blocks
    set_tile(cfg, 1, 8, 64);   // B
    set_tile(cfg, 2, 16, 64);  // C
    set_tile(cfg, 3, 16, 32);  // A, odd blocks
    set_tile(cfg, 4, 8, 64);
    set_tile(cfg, 5, 16, 64);
    _tile_loadconfig(&cfg);

    for (int64_t rt = 0; rt < n_row_tiles; ++rt) {
        const int64_t r0 = rt * k_tile;
        prepare_weights<W>(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, nb, bt, dw);
        for (int64_t tt = 0; tt < n_token_tiles; ++tt) {
            const int64_t t0 = tt * k_tile;
            const bool partial = tt == n_token_tiles - 1 && n_tail > 0;
            const uint8_t * a = (partial ? tail : xq + static_cast<size_t>(t0) * xq_row_bytes) + 2;
            const float * dxt = dx + tt * nb * 16;
            __m512 acc[16];
            #pragma GCC unroll 16
            for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
            int64_t b = 0;
            for (; b + 2 <= nb; b += 2) {
                _tile_loadd(0, a + b * xbb, xq_row_bytes);
                _tile_loadd(1, bt + b * b_tile_bytes, 64);
                _tile_zero(2);
                _tile_dpbssd(2, 0, 1);
                _tile_loadd(3, a + (b + 1) * xbb, xq_row_bytes);
                _tile_loadd(4, bt + (b + 1) * b_tile_bytes, 64);
                _tile_zero(5);
                _tile_dpbssd(5, 3, 4);
                _tile_stored(2, c0, 64);
                block_epilogue(c0, dw + 16 * b, dxt + 16 * b, acc);
                _tile_stored(5, c1, 64);
                block_epilogue(c1, dw + 16 * (b + 1), dxt + 16 * (b + 1), acc);
            }
            if (b < nb) {
                _tile_loadd(0, a + b * xbb, xq_row_bytes);
                _tile_loadd(1, bt + b * b_tile_bytes, 64);
                _tile_zero(2);
                _tile_dpbssd(2, 0, 1);
                _tile_stored(2, c0, 64);
                block_epilogue(c0, dw + 16 * b, dxt + 16 * b, acc);
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
