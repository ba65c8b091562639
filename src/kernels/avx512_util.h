// Helpers shared by the AVX-512 kernels (internal to kernels; include only from the
// avx512_*.cpp files, which are compiled with the AVX2 flags plus -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mavx512vnni).
//
// The linkage rule of avx2_util.h holds here too: include nothing that defines inline
// functions or templates used elsewhere, keep helpers in an unnamed namespace (the
// kernels.NoSharedSymbolsIn_avx512_Objects test checks the objects).
//
// How the AVX-512 kernels reproduce the scalar reference bit for bit is avx2_util.h's
// recipe with 16 lanes: integer (super-)block sums are exact in any order, then the
// float part runs one output per lane, each lane doing the reference's operations in
// its order, never fused.
//
// Decode (one token, or the few of a batched decode step) is decode_tile below: 16
// weight rows at a time, each row's block sums in its own vector, then reduced so
// that the float step runs one row per lane.
//
// Prefill (a tile of many tokens) is where 512 bits pay most: the "tokens16" micro-kernels
// take one weight row and 16 tokens, one token per int32 lane, and form each block's
// integer sum with VNNI's vpdpbusd (four u8 x s8 products added into an int32 lane)
// without any horizontal reduction: the activations of the 16 tokens are rearranged
// once per tile ("transposed": vector k holds dword k of the block of every token, one
// token per lane), and dword k of the weight block, broadcast, multiplies all 16 tokens
// at once. The rearranged activations are shared by every row of the tile, so their
// cost is spread over hundreds of rows.
//
// vpdpbusd multiplies an unsigned byte by a signed byte; AVX-512 has no vpsignb. The
// weights therefore go in as unsigned codes c with value = c - offset (Q4_0: nibbles,
// offset 8; Q8_0: w + 128, offset 128), and the offset comes out through the exact
// identity sum((c - o) * x) = sum(c * x) - o * sum(x), with sum(x) formed once per token
// and block in the rearranged activations, not per row.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || !defined(__AVX512F__) || !defined(__AVX512BW__) || \
    !defined(__AVX512VL__) || !defined(__AVX512DQ__) || !defined(__AVX512VNNI__)
#error "avx512_util.h is for translation units compiled with the AVX2 and AVX-512 F/BW/VL/DQ/VNNI flags"
#endif

// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*() (a
// self-initialised variable), which -Wmaybe-uninitialized reports wherever they are
// inlined; the warning is about the header's idiom, not about our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace skippy::kernels::avx512 {
namespace {

// The tokens of a prefill group: one per int32 / f32 lane.
constexpr int k_group = 16;

// x86 is little-endian, so the GGUF fields can be read with plain loads.
inline uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

inline uint32_t load_u32(const uint8_t * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline uint64_t load_u64(const uint8_t * p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

inline float load_f32(const uint8_t * p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

inline __m512i loadu_512(const uint8_t * p) { return _mm512_loadu_si512(p); }
inline __m256i loadu_256(const uint8_t * p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
inline __m128i loadu_128(const uint8_t * p) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)); }

// Exact f16 -> f32 (F16C), for a scale field.
inline float f16_at(const uint8_t * p) { return _cvtsh_ss(load_u16(p)); }

// Dword k of each lane's block: base + offsets[lane] + at (offsets in bytes, from the
// group's token rows). The 16 tokens of a group sit in one activation buffer.
inline __m512i gather_dwords(__m512i offsets, const uint8_t * base) { return _mm512_i32gather_epi32(offsets, base, 1); }

// The f16 at base + offsets[lane], for 16 lanes (the two bytes after it are read too and
// dropped; every caller's field is followed by codes of the same block).
inline __m512 gather_f16(__m512i offsets, const uint8_t * base) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gather_dwords(offsets, base)));
}

inline __m512 gather_f32(__m512i offsets, const uint8_t * base) { return _mm512_i32gather_ps(offsets, base, 1); }

// Sum of the 8 int32 lanes (exact).
inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// [sum of v[0]'s lanes, ..., sum of v[15]'s lanes] (exact integer adds; the pairing
// order is free). 15 adds and 30 in-lane or lane shuffles.
inline __m512i reduce16(const __m512i v[16]) {
    __m512i s[8], t[4], u[2];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
        s[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
        // Per 128-bit lane: that lane's sums of v[4i], v[4i + 1], v[4i + 2], v[4i + 3].
        t[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * i], s[2 * i + 1]), _mm512_unpackhi_epi64(s[2 * i], s[2 * i + 1]));
    }
    // The 128-bit lanes: (a0 + a1, a2 + a3, b0 + b1, b2 + b3), then once more.
    #pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
        u[j] = _mm512_add_epi32(_mm512_shuffle_i32x4(t[2 * j], t[2 * j + 1], 0x88), _mm512_shuffle_i32x4(t[2 * j], t[2 * j + 1], 0xdd));
    }
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xdd));
}

// Nearest integer, ties to even, as rounding.h's round_nearest_even computes it (the
// same bits for every input, NaN and infinities included).
inline __m512i round_nearest_even(__m512 v) {
    const __m512 shifted = _mm512_add_ps(v, _mm512_set1_ps(12582912.0f));
    const __m512i bits = _mm512_and_si512(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x007fffff));
    return _mm512_sub_epi32(bits, _mm512_set1_epi32(0x00400000));
}

inline __m512i clamp_i32(__m512i v, int32_t lo, int32_t hi) {
    return _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}

// Largest |x| over n floats (n % 16 == 0), skipping NaNs as the scalar "if (|x| > amax)"
// does: max_ps returns its second operand when either is NaN, and the running maximum
// never holds one, so the final reduction's order does not matter.
inline float abs_max(const float * x, int64_t n) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    return _mm512_reduce_max_ps(m);
}

// Byte offsets of a group's token rows from the first (16 lanes; a group of m < 16
// tokens repeats its last token, whose extra lanes are computed and dropped).
inline __m512i token_offsets(size_t xq_row_bytes, int64_t m) {
    const __m512i lane = _mm512_min_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int32_t>(m - 1)));
    return _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(xq_row_bytes)));
}

// Drives a quantized type's prefill micro-kernel over a tile of rows x tokens, as the
// mul_tile contract asks (y[t * y_stride + r] = vec_dot(row r, token t)).
//
// K provides:
//   block_elems, chunk_blocks
//   struct token_group: the activations of 16 tokens for blocks [b0, b1), rearranged
//     by prepare(group, x0, offsets, b0, b1) (x0: the first token's row, offsets: each
//     lane's token row from it, token_offsets)
//   tokens<R, G>(w_rows[R], groups[G], b0, b1, acc[R][G], pf): continues acc[r][g]
//     (lane = token of group g) over blocks [b0, b1) of weight row r, calling
//     pf.step() once per 32 values of each block (prefetch_stream)
//   rest: the AVX2 tile, for the tokens left after the groups (decode is one token)
//
// Tokens go in pairs of groups (32 tokens: every unpacked weight block and broadcast
// weight dword serves both), then single groups of 16, a last one of at least
// k_min_tokens padded; fewer tokens go to K::rest. Blocks are taken in chunks so that
// the rearranged activations stay in L1; the partial sums between chunks are kept in y
// itself (a float stored and reloaded is unchanged).
constexpr int64_t k_min_tokens = 4;

// Weight rows per micro-kernel call, for one and two token groups.
template <int G>
constexpr int k_tile_rows = G == 1 ? 4 : 2;

// N x N elements of a vector (16 floats, or 8 pairs of floats) transposed in
// registers: element j of v[i] <-> element i of v[j]. Stage i swaps bit i of the row
// index with bit i of the element index (pairs of rows 2^i apart).
template <int N>
inline void transpose_elements(__m512 v[N]) {
    static_assert(N == 16 || N == 8);
    using index_type = std::conditional_t<N == 16, int32_t, int64_t>;
    #pragma GCC unroll 4
    for (int d = 1; d < N; d *= 2) {
        alignas(64) index_type lo[N], hi[N];
        for (int c = 0; c < N; ++c) {
            lo[c] = (c & d) == 0 ? c : N + c - d;
            hi[c] = (c & d) == 0 ? c + d : N + c;
        }
        const __m512i idx_lo = _mm512_load_si512(lo), idx_hi = _mm512_load_si512(hi);
        #pragma GCC unroll 16
        for (int r = 0; r < N; ++r) {
            if ((r & d) != 0) continue;
            const __m512 a = v[r], b = v[r + d];
            if constexpr (N == 16) {
                v[r] = _mm512_permutex2var_ps(a, idx_lo, b);
                v[r + d] = _mm512_permutex2var_ps(a, idx_hi, b);
            } else {
                v[r] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a), idx_lo, _mm512_castps_pd(b)));
                v[r + d] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a), idx_hi, _mm512_castps_pd(b)));
            }
        }
    }
}

// A vector of per-row values for a micro-kernel whose vectors hold Rows rows (see
// run_pairs): Rows 1, a in every lane; Rows 2, a in the even lanes and b in the odd
// ones (one 64-bit broadcast).
template <int Rows>
[[gnu::always_inline]] inline __m512i lane_rows_i32(int32_t a, int32_t b) {
    if constexpr (Rows == 1) {
        (void)b;
        return _mm512_set1_epi32(a);
    } else {
        return _mm512_set1_epi64(static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(b)) << 32 | static_cast<uint32_t>(a)));
    }
}

template <int Rows>
[[gnu::always_inline]] inline __m512 lane_rows_ps(float a, float b) {
    if constexpr (Rows == 1) {
        (void)b;
        return _mm512_set1_ps(a);
    } else {
        uint32_t ua, ub;
        std::memcpy(&ua, &a, 4);
        std::memcpy(&ub, &b, 4);
        return _mm512_castsi512_ps(lane_rows_i32<2>(static_cast<int32_t>(ua), static_cast<int32_t>(ub)));
    }
}

// Prefetches n_bytes from p into L2, a cache line at a time (prefetches never fault, so
// p may run past the end of a buffer). The tiles below fetch the next 16 rows this way
// while they work on 16: into L1 (T0), a burst of that many lines (36 for Q4_K, 53 for
// Q6_K per block column) waits on L1's few fill buffers, one per line for a whole
// memory latency, and a weight stream read this way reached 6-8 GB/s on one core of a
// Sapphire Rapids VM, where a plain sequential read reached 18-22. Into L2 (T1) the
// same matrix-vector products reached 13-16 GB/s: BM_matvec, one thread, all the
// super-block formats and Q8_0 about 2x, Q5_1 1.25x; the formats of 18 bytes a block
// (bursts of 9 lines) about even, Q4_0 0.8x on 2816x1024 but 1.4x on 1024x2816. The
// rows' loads then hit L2, which the out-of-order core hides.
//
// The prefetch helpers are always inlined: GCC takes a function whose only effect is a
// prefetch for one without side effects and deletes the calls to it, silently. That
// happened to the tiles' next-rows prefetch when it was a plain inline function:
// run_pairs and run_groups ran with no prefetch at all (BM_matmul Q4_K 2816x1024, 8
// tokens, one thread: 0.45-0.51 ms, against 0.35-0.36 with the prefetch). The test
// kernels.PrefetchesEmitted (cmake/check_prefetch_emitted.py) reads the objects.
[[gnu::always_inline]] inline void prefetch_span(const uint8_t * p, size_t n_bytes) {
    for (size_t i = 0; i < n_bytes; i += 64) _mm_prefetch(reinterpret_cast<const char *>(p + i), _MM_HINT_T1);
}

// For the tiles that take the rows in blocks of 16 over a chunk of block columns
// (run_groups, run_pairs): rows [r0 + 16, r0 + 32)'s part of the chunk (chunk_bytes from
// chunk_offset in each row), fetched into L2 while rows [r0, r0 + 16) compute, since 16
// row streams are more than the hardware prefetcher follows (as in decode_tile). The
// lines go two at a time: the micro-kernels call step() once per 32 values of a block
// they take, and the driver calls finish() after the 16 rows for any lines left. All
// of them at once before the rows (144 lines for Q4_K over a chunk of 4 blocks) stalled
// the core on its few miss buffers: on Zen 4, 19% of run_pairs' samples sat on the
// prefetch loop, and BM_matmul (2816x1024, one thread, avx512) took 0.34 ms for 8
// tokens of Q4_K against 0.29 spread out, 0.47 against 0.40 for 16, 0.68 against 0.43
// for 16 of Q6_K; 512 tokens of Q4_K 13.5 ms against 12.5.
struct prefetch_stream {
    const uint8_t * row;
    size_t row_stride;
    size_t chunk_bytes;
    int64_t rows_left;  // up to 16; none (<= 0) past the last rows
    size_t pos = 0;     // in the current row's part

    prefetch_stream(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, int64_t r0, size_t chunk_offset, size_t chunk_bytes_)
        : row(w + static_cast<size_t>(r0 + 16) * w_row_bytes + chunk_offset),
          row_stride(w_row_bytes),
          chunk_bytes(chunk_bytes_),
          rows_left(n_rows - (r0 + 16) < 16 ? n_rows - (r0 + 16) : 16) {}

    [[gnu::always_inline]] void step() {
        #pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) {
            if (rows_left > 0) line();
        }
    }
    [[gnu::always_inline]] void finish() {
        while (rows_left > 0) line();
    }

  private:
    [[gnu::always_inline]] void line() {
        _mm_prefetch(reinterpret_cast<const char *>(row + pos), _MM_HINT_T1);
        pos += 64;
        if (pos >= chunk_bytes) {
            pos = 0;
            row += row_stride;
            --rows_left;
        }
    }
};

// Where a group's outputs go: its number of tokens (lanes), and y of its first token.
struct group_out {
    int64_t m;
    float * y;
};

// The partial sums of rows [r, r + nr) of a group (lane = token) from y, or zeros.
inline void load_partials(const group_out & out, int64_t y_stride, int64_t r, int64_t nr, __m512 v[16]) {
    const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1u);
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) v[t] = t < out.m ? _mm512_maskz_loadu_ps(rows, out.y + t * y_stride + r) : _mm512_setzero_ps();
    transpose_elements<16>(v);
}

inline void store_partials(const group_out & out, int64_t y_stride, int64_t r, int64_t nr, __m512 v[16]) {
    const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1u);
    transpose_elements<16>(v);
    #pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
        if (t < out.m) _mm512_mask_storeu_ps(out.y + t * y_stride + r, rows, v[t]);
    }
}

// Tokens [t, t + 16 G) (the last group possibly short: m_last tokens) x all rows, in
// blocks of 16 rows: each block's partial sums come from y and go back to it through a
// 16 x 16 transpose (one contiguous store per token and block).
template <typename K, int G>
void run_groups(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes, int64_t t,
                int64_t m_last, int64_t nb, float * y, int64_t y_stride) {
    const uint8_t * x0[G];
    __m512i offsets[G];
    group_out out[G];
    #pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
        const int64_t m = g == G - 1 ? m_last : k_group;
        const int64_t t0 = t + g * k_group;
        x0[g] = xq + static_cast<size_t>(t0) * xq_row_bytes;
        offsets[g] = token_offsets(xq_row_bytes, m);
        out[g] = {m, y + t0 * y_stride};
    }
    constexpr int R = k_tile_rows<G>;
    for (int64_t b0 = 0; b0 < nb; b0 += K::chunk_blocks) {
        const int64_t b1 = b0 + K::chunk_blocks < nb ? b0 + K::chunk_blocks : nb;
        alignas(64) typename K::token_group groups[G];
        const typename K::token_group * gp[G];
        #pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
            K::prepare(groups[g], x0[g], offsets[g], b0, b1);
            gp[g] = &groups[g];
        }
        for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
            const int64_t nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
            // BM_matmul, one thread, with this against without: 12-16 tokens 0.68-0.89x
            // the time (Q6_K the most), 64 tokens 0.84-0.97x, 512 tokens 0.89-1.02x.
            prefetch_stream pf(w, w_row_bytes, n_rows, r0, static_cast<size_t>(b0) * K::wbb, static_cast<size_t>(b1 - b0) * K::wbb);
            __m512 acc[16][G];
            for (int g = 0; g < G; ++g) {
                __m512 v[16];
                if (b0 == 0) {
                    for (int i = 0; i < 16; ++i) v[i] = _mm512_setzero_ps();
                } else {
                    load_partials(out[g], y_stride, r0, nr, v);
                }
                for (int i = 0; i < 16; ++i) acc[i][g] = v[i];
            }
            int64_t r = 0;
            for (; r + R <= nr; r += R) {
                const uint8_t * rows[R];
                for (int i = 0; i < R; ++i) rows[i] = w + static_cast<size_t>(r0 + r + i) * w_row_bytes;
                K::template tokens<R, G>(rows, gp, b0, b1, acc + r, pf);
            }
            for (; r < nr; ++r) {
                const uint8_t * rows[1] = {w + static_cast<size_t>(r0 + r) * w_row_bytes};
                K::template tokens<1, G>(rows, gp, b0, b1, acc + r, pf);
            }
            for (int g = 0; g < G; ++g) {
                __m512 v[16];
                for (int i = 0; i < 16; ++i) v[i] = acc[i][g];
                store_partials(out[g], y_stride, r0, nr, v);
            }
            pf.finish();
        }
    }
}

// Decode: the tokens a prefill tile leaves (up to k_decode_max_batch_tokens: decode is
// one token, a batched decode step a few; run_pairs below takes some formats' steps of
// 7 or 8), all in one group (decode_tile below), in 512-bit vectors, one weight row per
// int32 lane at the end.
//
// K provides rows16<NT>(rows, x, nb, next, acc): the outputs of the 16 weight rows
// `rows` and NT tokens (x[i] their activation rows), acc[i] lane j = row j's output for
// token i; while it works it prefetches next[0, 16 * nb * block_bytes) (null: none),
// the next 16 rows, since 16 interleaved row streams are more than the hardware
// prefetcher follows well. Each row's integer block sums are formed in its own vector
// and the 16 rows are then reduced together (reduce16_pairs below), so that the float
// step runs one row per lane, as the reference's order requires. The rows of a tile
// that do not fill a group of 16 go to K::rest (the AVX2 tile; the matmul shares rows
// out in multiples of 16, so only odd shapes have them).
constexpr int64_t k_decode_rows = 16;
// The tokens of one group: each block of a row is unpacked once for all of them. Groups
// of at most 4 (8 tokens as 4 + 4) unpacked every row twice for a step of 5 to 8; one
// group of up to 8 keeps more partial sums than registers, and the spills cost less than
// the second unpacking. BM_matmul, one thread, Xeon (Emerald Rapids), 3 interleaved
// rounds, 8 tokens, ms: Q6_K 1024x2816 0.32-0.37 against 0.40-0.42, Q8_0 0.45-0.47
// against 0.53-0.63, Q6_K 4096x4096 1.76-1.84 against 2.28-2.34, Q8_0 2.47-2.69
// against 3.02-3.04; Q4_K 4096x4096, 7 tokens, 1.34-1.42 against 1.66-2.03; 6 tokens
// 20-30% faster; 1 and 4 tokens unchanged. Not measured on AMD cores.
constexpr int64_t k_decode_max_tokens = 8;

template <typename K>
constexpr bool k_has_rows16 = requires { &K::template rows16<1>; };

// The 4 bytes at a field of each of 16 rows (its scale, say) in one vector, lane r =
// row r, built as the rows come: a load per row straight into a vector register and
// in-register unpacks (4 bytes a lane). A vpgatherdd costs about three times as much,
// and scalar stores read back as one vector stall on store forwarding.
struct dword_collector16 {
    __m128i pair[2];  // the current quad's two pairs of rows
    __m128i quad[4];

    // Rows 4q + 2k and 4q + 2k + 1 (fields at pa and pb).
    void add_pair(int k, const uint8_t * pa, const uint8_t * pb) {
        pair[k] = _mm_unpacklo_epi32(_mm_loadu_si32(pa), _mm_loadu_si32(pb));
    }
    void add_quad(int q) { quad[q] = _mm_unpacklo_epi64(pair[0], pair[1]); }
    __m512i vec() const {
        const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(quad[0]), quad[1], 1);
        const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(quad[2]), quad[3], 1);
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
};

// 16 rows at a common stride, taken as two halves of 8 (rows 0-7 and 8-15). Row r of
// a half is its base plus an odd multiple of the stride times 1, 2 or 4, one base +
// index * scale address, so that a half's 8 row streams need only a few registers.
struct row_group {
    const uint8_t * base[2];  // rows 0 and 8
    int64_t s1, s3, s5, s7;   // 1, 3, 5 and 7 times the stride

    row_group(const uint8_t * row0, int64_t stride)
        : base{row0, row0 + 8 * stride}, s1(stride), s3(3 * stride), s5(5 * stride), s7(7 * stride) {}

    // Row r (< 8, constant after unrolling) of the half whose base (plus any offset) is b.
    const uint8_t * at(const uint8_t * b, int r) const {
        switch (r) {
            case 0: return b;
            case 1: return b + s1;
            case 2: return b + 2 * s1;
            case 3: return b + s3;
            case 4: return b + 4 * s1;
            case 5: return b + s5;
            case 6: return b + 2 * s3;
            default: return b + s7;
        }
    }
};

// The 16 rows of a group in the order the decode tiles take them: in each half h
// (rows 8h to 8h + 7) and each quad q of it (4 rows), on_pair(k, p0, p1) for its pairs
// k = 0, 1 (p0, p1: the two rows' addresses plus off), then on_quad(h, q); after each
// half, on_half(h). Everything is inlined and unrolled, so h, q and k are constants.
template <typename Pair, typename Quad, typename Half>
[[gnu::always_inline]] inline void for_row_pairs(const row_group & rows, int64_t off, Pair && on_pair, Quad && on_quad,
                                                 Half && on_half) {
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const uint8_t * base = rows.base[h] + off;
        #pragma GCC unroll 2
        for (int q = 0; q < 2; ++q) {
            #pragma GCC unroll 2
            for (int k = 0; k < 2; ++k) on_pair(k, rows.at(base, 4 * q + 2 * k), rows.at(base, 4 * q + 2 * k + 1));
            on_quad(h, q);
        }
        on_half(h);
    }
}

// NT tokens (x[i] their activation rows) times one group of 16 rows starting at r0.
template <typename K, int NT>
[[gnu::always_inline]] inline void decode_group16(const row_group & rows, const uint8_t * next, const uint8_t * const x[NT], int64_t nb,
                                                  int64_t r0, float * y, int64_t y_stride) {
    __m512 acc[NT];
    K::template rows16<NT>(rows, x, nb, next, acc);
    #pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) _mm512_storeu_ps(y + i * y_stride + r0, acc[i]);
}

// Up to k_decode_max_tokens tokens, in one group (each weight row unpacked once for
// all of them), so a batched decode step reads and unpacks the weights once.
template <typename K>
void decode_tile(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                 int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    assert(n_tokens >= 1 && n_tokens <= k_decode_max_tokens);
    const int64_t nb = n / K::block_elems;
    const uint8_t * x[k_decode_max_tokens];
    for (int64_t i = 0; i < k_decode_max_tokens; ++i) x[i] = xq + static_cast<size_t>(i < n_tokens ? i : 0) * xq_row_bytes;
    int64_t r0 = 0;
    for (; r0 + k_decode_rows <= n_rows; r0 += k_decode_rows) {
        const row_group rows(w + static_cast<size_t>(r0) * w_row_bytes, static_cast<int64_t>(w_row_bytes));
        const uint8_t * next = r0 + 2 * k_decode_rows <= n_rows ? w + static_cast<size_t>(r0 + k_decode_rows) * w_row_bytes : nullptr;
        switch (n_tokens) {
            case 1: decode_group16<K, 1>(rows, next, x, nb, r0, y, y_stride); break;
            case 2: decode_group16<K, 2>(rows, next, x, nb, r0, y, y_stride); break;
            case 3: decode_group16<K, 3>(rows, next, x, nb, r0, y, y_stride); break;
            case 4: decode_group16<K, 4>(rows, next, x, nb, r0, y, y_stride); break;
            case 5: decode_group16<K, 5>(rows, next, x, nb, r0, y, y_stride); break;
            case 6: decode_group16<K, 6>(rows, next, x, nb, r0, y, y_stride); break;
            case 7: decode_group16<K, 7>(rows, next, x, nb, r0, y, y_stride); break;
            default: decode_group16<K, 8>(rows, next, x, nb, r0, y, y_stride); break;
        }
    }
    if (r0 < n_rows) {
        for (int64_t t = 0; t < n_tokens; ++t) {
            K::rest(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, n_rows - r0, xq + static_cast<size_t>(t) * xq_row_bytes, 0, 1,
                    nb * K::block_elems, y + t * y_stride + r0, y_stride);
        }
    }
}

// The int32 sums of two blocks of 16 rows, from one vector per row whose lanes 0-7
// hold partial sums of one block and lanes 8-15 of the other: lane j of lo (hi) is
// the sum of lanes 0-7 (8-15) of row j's vector. 21 adds and shuffles per 8 rows, built
// as the rows come (add_pair after each two rows, add_quad after each four, half after
// each eight), so that few vectors are live.
struct reduce16_pairs {
    __m512i s[2];  // the current quad's pairs
    __m512i t[2];  // the current half's quads

    // Rows 2k, 2k + 1 of the current quad (k = 0, 1): per 128-bit lane
    // [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
    void add_pair(int k, __m512i a, __m512i b) {
        s[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    }
    // Quad q (rows 4q .. 4q + 3 of the half) complete: per 128-bit lane, that lane's
    // sums of the four rows.
    void add_quad(int q) {
        t[q] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[0], s[1]), _mm512_unpackhi_epi64(s[0], s[1]));
    }
    // The half's 8 rows: [lo rows 0-3, hi rows 0-3, lo rows 4-7, hi rows 4-7] (t[q]'s
    // 128-bit lanes are lo 0-3, lo 4-7, hi 0-3, hi 4-7 partial sums).
    __m512i half() const {
        return _mm512_add_epi32(_mm512_shuffle_i32x4(t[0], t[1], 0x88), _mm512_shuffle_i32x4(t[0], t[1], 0xdd));
    }
    // Both halves' results to lo and hi, lane j = row j.
    static void finish(__m512i h0, __m512i h1, __m512i & lo, __m512i & hi) {
        lo = _mm512_shuffle_i32x4(h0, h1, 0x88);
        hi = _mm512_shuffle_i32x4(h0, h1, 0xdd);
    }
};

// Batched decode steps of a few tokens (k_pair_min_tokens<K> to k_pair_max_tokens), for
// formats whose micro-kernel takes two rows per vector (tokens<R, G, 2>): lanes 2t and 2t + 1
// hold token t (a prefill group's rearranged activations, each token twice), the even
// lanes compute the vector's first row and the odd lanes its second. Every vpdpbusd then
// makes 16 useful (row, token) sums, where a prefill group of 8 tokens makes 8 and the
// decode tile unpacks each row again for every 4 tokens; the weight dwords of the two
// rows are stored interleaved, so one 64-bit broadcast load gives both. A vector's
// lanes 2t, 2t + 1 are two adjacent outputs of token t, so an 8 x 8 transpose of 64-bit
// elements turns 16 rows' vectors into each token's 16 outputs.
// A format opts in with K::pair_min_tokens, the fewest tokens for which this beats the
// decode tile on it (measured with BM_matmul; 0 or absent: never). Only rows of at
// most one chunk of blocks take it: it took longer rows a chunk after another with the
// partial sums kept in y, and there the decode tile was faster. BM_matmul, one
// thread, Zen 4, 6 interleaved rounds, 4096x4096 (16 blocks a row): Q4_K 7 tokens
// 1.40-1.55 ms against 1.70-2.39, 8 tokens 1.54-1.87 against 1.68-2.26; IQ4_XS 7
// tokens 1.40-1.66 against 1.68-2.01. Rows of 4 blocks (2816x1024) keep it: even or
// faster there.
constexpr int64_t k_pair_max_tokens = 8;

template <typename K>
constexpr int64_t k_pair_min_tokens = [] {
    if constexpr (requires { K::pair_min_tokens; }) {
        return static_cast<int64_t>(K::pair_min_tokens);
    } else {
        return int64_t{0};
    }
}();

// Byte offsets of the token rows for run_pairs: lanes 2t and 2t + 1 take token t (the
// last one for lanes past the m tokens, computed and dropped).
inline __m512i paired_token_offsets(size_t xq_row_bytes, int64_t m) {
    const __m512i token = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    return _mm512_mullo_epi32(_mm512_min_epi32(token, _mm512_set1_epi32(static_cast<int32_t>(m - 1))),
                              _mm512_set1_epi32(static_cast<int32_t>(xq_row_bytes)));
}

// m (at most k_pair_max_tokens) tokens from xq x all rows of nb blocks, in blocks of
// 16 rows (8 vectors); an odd last row is paired with itself and its copy dropped.
// REQUIRES: 0 < nb <= K::chunk_blocks (the rows mul_tile_driver gives it: one token
// group covers them).
template <typename K>
void run_pairs(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes, int64_t m,
               int64_t nb, float * y, int64_t y_stride) {
    assert(nb > 0 && nb <= K::chunk_blocks);
    constexpr int R = 4;  // vectors (8 rows) per micro-kernel call
    alignas(64) typename K::token_group group;
    K::prepare(group, xq, paired_token_offsets(xq_row_bytes, m), 0, nb);
    const typename K::token_group * gp[1] = {&group};
    for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
        const int64_t nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
        const __mmask16 rows_mask = static_cast<__mmask16>((1u << nr) - 1u);
        const auto row = [&](int64_t i) { return w + static_cast<size_t>(r0 + (i < nr ? i : nr - 1)) * w_row_bytes; };
        prefetch_stream pf(w, w_row_bytes, n_rows, r0, 0, static_cast<size_t>(nb) * K::wbb);
        __m512 acc[8][1];
        for (int p = 0; p < 8; ++p) acc[p][0] = _mm512_setzero_ps();
        const int64_t n_vectors = (nr + 1) / 2;
        int64_t p = 0;
        for (; p + R <= n_vectors; p += R) {
            const uint8_t * rows[2 * R];
            for (int i = 0; i < 2 * R; ++i) rows[i] = row(2 * p + i);
            K::template tokens<R, 1, 2>(rows, gp, 0, nb, acc + p, pf);
        }
        for (; p < n_vectors; ++p) {
            const uint8_t * rows[2] = {row(2 * p), row(2 * p + 1)};
            K::template tokens<1, 1, 2>(rows, gp, 0, nb, acc + p, pf);
        }
        __m512 v[8];
        for (int q = 0; q < 8; ++q) v[q] = acc[q][0];
        transpose_elements<8>(v);
        for (int t = 0; t < m; ++t) _mm512_mask_storeu_ps(y + t * y_stride + r0, rows_mask, v[t]);
        pf.finish();
    }
}

// The most tokens the decode tile takes (a batched decode step of that many lanes):
// below about this many a prefill token group's 16 lanes are mostly idle. Measured
// (BM_matmul, 2816x1024, one thread, Zen 5): 4 tokens 2x faster than a prefill group,
// 8 tokens 1.1-1.6x (Q5_K even), 12 tokens mixed (Q4_K, Q5_K 1.2x slower).
constexpr int64_t k_decode_max_batch_tokens = 8;
static_assert(k_decode_max_batch_tokens <= k_decode_max_tokens, "the decode tile takes what the prefill groups leave in one group");
// The fewest tokens a token group of the prefill tile takes: fewer go to the decode
// tile, where a format has one.
template <typename K>
constexpr int64_t k_min_group_tokens = k_has_rows16<K> ? k_decode_max_batch_tokens + 1 : k_min_tokens;

template <typename K>
void mul_tile_driver(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                     int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t nb = n / K::block_elems;
    int64_t t = 0;
    if (n_rows > 0) {
        for (; n_tokens - t >= 2 * k_group; t += 2 * k_group) {
            run_groups<K, 2>(w, w_row_bytes, n_rows, xq, xq_row_bytes, t, k_group, nb, y, y_stride);
        }
        for (; n_tokens - t >= k_min_group_tokens<K>; t += k_group) {
            const int64_t m = n_tokens - t < k_group ? n_tokens - t : k_group;
            run_groups<K, 1>(w, w_row_bytes, n_rows, xq, xq_row_bytes, t, m, nb, y, y_stride);
        }
    }
    if (t < n_tokens) {
        if constexpr (k_pair_min_tokens<K> > 0) {
            // (nb == 0: no block to add up; decode_tile writes the zeros vec_dot gives.)
            if (n_tokens - t >= k_pair_min_tokens<K> && n_tokens - t <= k_pair_max_tokens && nb > 0 && nb <= K::chunk_blocks) {
                run_pairs<K>(w, w_row_bytes, n_rows, xq + static_cast<size_t>(t) * xq_row_bytes, xq_row_bytes, n_tokens - t, nb,
                             y + t * y_stride, y_stride);
                return;
            }
        }
        if constexpr (k_has_rows16<K>) {
            decode_tile<K>(w, w_row_bytes, n_rows, xq + static_cast<size_t>(t) * xq_row_bytes, xq_row_bytes, n_tokens - t, n,
                           y + t * y_stride, y_stride);
        } else {
            K::rest(w, w_row_bytes, n_rows, xq + static_cast<size_t>(t) * xq_row_bytes, xq_row_bytes, n_tokens - t, n,
                    y + t * y_stride, y_stride);
        }
    }
}

}  // namespace
}  // namespace skippy::kernels::avx512
