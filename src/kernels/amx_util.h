// Helpers shared by the AMX kernels (internal to kernels; include only from the amx_*.cpp
// files, compiled with the AVX-512 flags plus -mamx-tile -mamx-int8). The linkage rule
// of avx2_util.h holds here too: nothing inline from shared headers, helpers in an
// unnamed namespace (kernels.NoSharedSymbolsIn_amx_Objects checks it).
//
// How the AMX tiles reproduce the scalar reference bit for bit (the matrix-matrix
// products of prefill; decode and short calls stay on the AVX-512 table's entries):
// - Layout: the activations are the A tile, 16 tokens x K bytes, loaded straight from
//   the converted activation rows (Q8_0 / Q8_K codes, stride = row bytes); the weights
//   are the B tile, K/4 rows x 16 weight rows x 4 bytes, unpacked once per group of 16
//   weight rows into a per-thread scratch (transposed into that layout) and reused for
//   every token tile. C[token][weight row] is one int32 per output, so a C row is 16
//   consecutive outputs of one token, as y holds them.
// - Integer sums are exact in any order. A block format's per-sub-block scales are
//   folded into the B bytes: w = value * scale fits 16 bits, so it is split into
//   w = 256 * hi + lo (lo unsigned, hi signed) and two tiles accumulate x * lo and x * hi;
//   isum = C_lo + 256 * C_hi is the reference's sum of sc_j * dot_j (exact in int32).
// - The float part then runs one output per lane (16 weight rows of one token), every
//   lane doing the reference's float operations in its order, never fused.
#pragma once

// (GCC spells the AMX macros __AMX_TILE__ / __AMX_INT8__, clang __AMXTILE__ / __AMXINT8__.)
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_INT8__) || defined(__AMXINT8__)) || \
    !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "amx_util.h is for translation units compiled with the AVX-512 and AMX flags"
#endif

#include "kernels/type_kernels.h"

// GCC 12 warns, wrongly, that the undefined pass-through operand of some AVX-512
// intrinsics (unpack, shuffle_i32x4, inserti64x4, cvtepi32_ps) is used uninitialized
// once they are inlined here; the pragmas cover the header's lines.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace skippy::kernels::amx {
namespace {

// Tokens per A tile and weight rows per B tile.
constexpr int64_t k_tile = 16;

// Products of fewer tokens stay on the previous table entry (decode is one token). A
// partial last token tile is padded with zero codes. Measured (skippy_kernels_bench,
// 1 thread, 1024x1024 and 2816x1024): one padded tile of 8 tokens takes 0.6x the AVX2
// tile's time on Q8_0 and Q4_K and 0.75-1.0x on Q6_K; the tile's cost is mostly
// unpacking the weights, so below about 6 tokens AVX2 wins.
constexpr int64_t k_min_tokens = 8;
// The Q4_K, Q5_K and Q6_K tiles shorten a lone token tile of up to 4 or 8 tokens to
// that many rows of A and C (a batched decode step of a few lanes). Measured
// (skippy_kernels_bench, 1 thread, 2816x1024): Q4_K 8 tokens 0.28 ms padded, 0.20 short;
// 4 tokens 0.22 ms short against 0.26 on AVX2's 4-token tile and 0.32 on the AVX-512
// entry; Q5_K 4 tokens 0.255 against 0.266. So Q4_K and Q5_K take the tiles from 4
// tokens. Q6_K unpacks more per weight (4 tokens: 0.33-0.44 ms short, 0.26 on AVX2) and
// starts at k_min_tokens.
constexpr int64_t k_min_tokens_short_tiles = 4;

inline uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

inline float load_f32(const uint8_t * p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

inline int32_t load_i32(const uint8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The palette-1 tile configuration (64 bytes, as ldtilecfg reads it).
struct alignas(64) tile_config {
    uint8_t  palette = 1;
    uint8_t  start_row = 0;
    uint8_t  reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t  rows[16] = {};
};

inline void set_tile(tile_config & c, int tile, int rows, int colsb) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.colsb[tile] = static_cast<uint16_t>(colsb);
}

// A 64-byte aligned buffer that grows to the largest size asked and is reused (one per
// thread and kernel file: tiles run inside matmul's tasks, several at once).
struct scratch {
    uint8_t * p = nullptr;
    size_t    n = 0;
    scratch() = default;
    scratch(const scratch &) = delete;
    scratch & operator=(const scratch &) = delete;
    ~scratch() { std::free(p); }
    uint8_t * get(size_t bytes) {
        if (bytes > n) {
            std::free(p);
            n = (bytes + 4095) & ~size_t(4095);
            p = static_cast<uint8_t *>(std::aligned_alloc(64, n));
            if (p == nullptr) std::abort();
        }
        return p;
    }
};

// Carves 64-byte aligned pieces out of a scratch size computed in the same order.
struct carver {
    size_t offset = 0;
    size_t take(size_t bytes) {
        const size_t at = offset;
        offset += (bytes + 63) & ~size_t(63);
        return at;
    }
};

// Transposes 16 rows of 16 dwords in place: afterwards r[j] holds dword j of the input
// rows 0..15, in row order (the B tile layout: K/4 rows of 16 columns of 4 bytes).
inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    #pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    // u[4g + c], 128-bit lane L: rows 4g .. 4g + 3 at dword 4L + c.
    __m512i u[16];
    #pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);   // g0 L0, g0 L2, g1 L0, g1 L2
        const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);   // g0 L1, g0 L3, g1 L1, g1 L3
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        r[4 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

// Bytes of B holding weight values w = value * scale (|w| < 2^15) as two byte planes:
// given the products of the even bytes (we) and the odd bytes (wo) as 16-bit words,
// lo = w & 255 and hi = w >> 8 in the original byte positions.
inline void split_products(__m512i we, __m512i wo, __m512i & lo, __m512i & hi) {
    const __m512i low_byte = _mm512_set1_epi16(0x00ff);
    lo = _mm512_ternarylogic_epi32(we, low_byte, _mm512_slli_epi16(wo, 8), 0xea);  // (we & 0xff) | (wo << 8)
    hi = _mm512_ternarylogic_epi32(wo, _mm512_set1_epi16(static_cast<int16_t>(0xff00)), _mm512_srli_epi16(we, 8),
                                   0xea);  // (wo & 0xff00) | (we >> 8)
}

// Row offsets n * row_bytes of a 16-row group, for gathers.
inline __m512i row_offsets(size_t row_bytes) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
}

// The u32 at base + n * row_bytes for n < 16.
inline __m512i gather_rows(const uint8_t * base, __m512i offsets) {
    return _mm512_i32gather_epi32(offsets, static_cast<const void *>(base), 1);
}

}  // namespace
}  // namespace skippy::kernels::amx
