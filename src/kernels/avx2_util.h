// Helpers shared by the AVX2 kernels (internal to kernels; include only from the
// avx2_*.cpp files, which are compiled with -mavx2 -mfma -mf16c).
//
// Linkage rule for every avx2_*.cpp file: include nothing that defines inline
// functions or templates used elsewhere (no <vector>, <algorithm>, base/fp16.h,
// base/byte_io.h ...), and keep helpers in an unnamed namespace. An inline function
// instantiated in an AVX2 file is compiled with AVX2 instructions, and the linker may
// pick that copy for the whole program, which would then crash on a CPU without AVX2.
// The kernels.NoSharedSymbolsIn_<isa>_Objects tests check the object files for weak
// symbols.
//
// How the AVX2 kernels reproduce the scalar reference bit for bit:
// - Quantized types: integer sums of each (super-)block are exact whatever the order,
//   so they are formed with maddubs/madd and reduced to one int32 per output. The
//   float part then runs "one output per lane": eight outputs (eight rows of one
//   token, or eight tokens of one row) take one lane each, and every lane performs
//   the scalar reference's float operations in its order (never fused). Which lane an
//   output takes, and which other outputs share its vector, cannot change its bits.
// - F32/F16/BF16: the reference keeps eight partial sums (element i in lane i % 8),
//   which is one __m256 accumulator updated with a rounded multiply then a rounded
//   add, and the same fixed final combination (hsum_fixed).
//
// Loops over lanes, groups and tile rows carry "#pragma GCC unroll": at -O2 GCC keeps
// them as loops, and the per-lane vectors then go through the stack (half the speed).
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "avx2_util.h is for translation units compiled with -mavx2 -mfma -mf16c"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace skippy::kernels::avx2 {
namespace {

// x86 is little-endian, so the GGUF fields can be read with plain loads.
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

inline __m256i loadu_256(const uint8_t * p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
inline __m128i loadu_128(const uint8_t * p) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)); }

// Exact f16 -> f32 (F16C), for a scale field.
inline float f16_at(const uint8_t * p) { return _cvtsh_ss(load_u16(p)); }

// The two f16 fields in the 4 bytes at each of p[0] .. p[7] (the f16 at p[i] in lane i
// of lo, the one at p[i] + 2 in lane i of hi): one load per pointer straight into a
// vector register, then unpacks. Building the vector from general registers (a
// vpinsrw or vpinsrd per field) costs several times as much on the CPUs measured.
inline void gather_f16_halves(const uint8_t * const p[8], __m128i & lo, __m128i & hi) {
    __m128i w[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) w[k] = _mm_unpacklo_epi16(_mm_loadu_si32(p[2 * k]), _mm_loadu_si32(p[2 * k + 1]));
    // w[k] = [lo 2k, lo 2k+1, hi 2k, hi 2k+1, 0, ...] (16-bit lanes)
    const __m128i a = _mm_unpacklo_epi32(w[0], w[1]);  // [lo 0-3, hi 0-3]
    const __m128i b = _mm_unpacklo_epi32(w[2], w[3]);  // [lo 4-7, hi 4-7]
    lo = _mm_unpacklo_epi64(a, b);
    hi = _mm_unpackhi_epi64(a, b);
}

// The f16 fields at p[0] .. p[7], converted (the 2 bytes after each are read too:
// callers' fields are never a buffer's last bytes).
inline __m256 gather_f16(const uint8_t * const p[8]) {
    __m128i lo, hi;
    gather_f16_halves(p, lo, hi);
    return _mm256_cvtph_ps(lo);
}

// The f16 fields at p[0] + 2 .. p[7] + 2, converted (for a field that ends its block).
inline __m256 gather_f16_high(const uint8_t * const p[8]) {
    __m128i lo, hi;
    gather_f16_halves(p, lo, hi);
    return _mm256_cvtph_ps(hi);
}

// Two adjacent f16 fields, at p[i] and p[i] + 2, of eight blocks.
inline void gather_f16_pairs(const uint8_t * const p[8], __m256 & first, __m256 & second) {
    __m128i lo, hi;
    gather_f16_halves(p, lo, hi);
    first = _mm256_cvtph_ps(lo);
    second = _mm256_cvtph_ps(hi);
}

// The f32 fields at p[0] .. p[7].
inline __m256 gather_f32(const uint8_t * const p[8]) {
    return _mm256_setr_ps(load_f32(p[0]), load_f32(p[1]), load_f32(p[2]), load_f32(p[3]), load_f32(p[4]),
                          load_f32(p[5]), load_f32(p[6]), load_f32(p[7]));
}

// The first level of reduce8 for two vectors a, b: per 128-bit lane [a0 + a2, b0 + b2,
// a1 + a3, b1 + b3]. Callers that fold rows as they finish keep fewer vectors live.
// (reduce8 is built from unpacks and adds: vphaddd costs several times as much on
// the CPUs measured.)
inline __m256i pair_sums(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

// reduce8 from its first level, p[k] = pair_sums(v[2k], v[2k + 1]).
inline __m256i reduce_pairs(const __m256i p[4]) {
    // Per 128-bit lane: [v0, v1, v2, v3] (then v4 .. v7) summed over that lane.
    const __m256i t0 = _mm256_add_epi32(_mm256_unpacklo_epi64(p[0], p[1]), _mm256_unpackhi_epi64(p[0], p[1]));
    const __m256i t1 = _mm256_add_epi32(_mm256_unpacklo_epi64(p[2], p[3]), _mm256_unpackhi_epi64(p[2], p[3]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t0, t1, 0x31));
}

// [sum of v0's lanes, ..., sum of v7's lanes]. Integer adds are exact (callers keep
// sums far from overflow), so the pairing order does not matter.
inline __m256i reduce8(__m256i v0, __m256i v1, __m256i v2, __m256i v3, __m256i v4, __m256i v5, __m256i v6,
                       __m256i v7) {
    const __m256i p[4] = {pair_sums(v0, v1), pair_sums(v2, v3), pair_sums(v4, v5), pair_sums(v6, v7)};
    return reduce_pairs(p);
}

inline __m256i reduce8(const __m256i v[8]) { return reduce8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]); }

// Sum of the 8 int32 lanes (exact).
inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): the scalar reference's final
// combination of its eight partial sums.
inline float hsum_fixed(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4, l1+l5, l2+l6, l3+l7
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Lanes [0, n) set (n <= 8), as a mask for blends and masked loads.
inline __m256i lane_mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The 32 nibbles of 16 bytes in value order: low nibbles (values 0-15), then high.
// The 16 bytes are broadcast to both 128-bit lanes by the load itself, and one
// per-lane variable shift puts the high nibbles of the upper lane in place: two ALU
// operations per block on the decode path instead of five.
inline __m256i unpack_nibbles_32(const uint8_t * qs) {
    const __m256i q = _mm256_broadcastsi128_si256(loadu_128(qs));
    return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

// 16 table entries (int8) looked up by 32 indices < 16.
inline __m256i lookup16(const int8_t * table, __m256i idx) {
    const __m256i t = _mm256_broadcastsi128_si256(loadu_128(reinterpret_cast<const uint8_t *>(table)));
    return _mm256_shuffle_epi8(t, idx);
}

// Nearest integer, ties to even, as rounding.h's round_nearest_even computes it (the
// same bits for every input, NaN and infinities included): add 1.5 * 2^23 and read the
// low mantissa bits.
inline __m256i round_nearest_even(__m256 v) {
    const __m256 shifted = _mm256_add_ps(v, _mm256_set1_ps(12582912.0f));
    const __m256i bits = _mm256_and_si256(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x007fffff));
    return _mm256_sub_epi32(bits, _mm256_set1_epi32(0x00400000));
}

inline __m256i clamp_i32(__m256i v, int32_t lo, int32_t hi) {
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

// 32 int32 values (already within int8 range) -> 32 bytes in order.
inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b);      // [a0-3 b0-3 | a4-7 b4-7] (int16)
    const __m256i cd = _mm256_packs_epi32(c, d);      // [c0-3 d0-3 | c4-7 d4-7]
    const __m256i bytes = _mm256_packs_epi16(ab, cd);  // 4-byte groups: a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Largest |x| over n floats (n % 8 == 0), skipping NaNs as the scalar "if (|x| > amax)"
// does: max_ps returns its second operand when either is NaN.
inline float abs_max(const float * x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// Eight outputs as a vector, one per lane, stored at y[lane * stride] (lanes < n).
inline void scatter_lanes(__m256 v, float * y, int64_t stride, int64_t n) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (int64_t i = 0; i < n; ++i) y[i * stride] = lanes[i];
}

inline __m256 gather_lanes(const float * y, int64_t stride) {
    return _mm256_setr_ps(y[0], y[stride], y[2 * stride], y[3 * stride], y[4 * stride], y[5 * stride],
                          y[6 * stride], y[7 * stride]);
}

// The first n lanes from y[i * stride], the others zero (nothing read past lane n).
inline __m256 gather_lanes(const float * y, int64_t stride, int64_t n) {
    alignas(32) float lanes[8] = {};
    for (int64_t i = 0; i < n; ++i) lanes[i] = y[i * stride];
    return _mm256_load_ps(lanes);
}

// Where prefetch_span puts the lines.
enum class prefetch_level { l1, l2 };

// Prefetches n_bytes from p, a cache line at a time, into L1 or L2 (prefetches never
// fault, so p may run past the end of a buffer). A burst of L1 prefetches waits on L1's
// few fill buffers (one per line, for a whole memory latency); beyond about 20 lines a
// burst streams faster into L2 (avx512_util.h's prefetch_span has the figures). Below
// that, L1 was as fast or faster: the rows' loads then hit L1. Always inlined, as
// avx512_util.h's prefetch helpers are (it says why).
template <prefetch_level Level = prefetch_level::l1>
[[gnu::always_inline]] inline void prefetch_span(const uint8_t * p, size_t n_bytes) {
    for (size_t i = 0; i < n_bytes; i += 64) {
        if constexpr (Level == prefetch_level::l1) {
            _mm_prefetch(reinterpret_cast<const char *>(p + i), _MM_HINT_T0);
        } else {
            _mm_prefetch(reinterpret_cast<const char *>(p + i), _MM_HINT_T1);
        }
    }
}

// Drives a quantized type's two micro-kernels over a tile of rows x tokens, as the
// mul_tile contract asks (y[t * y_stride + r] = vec_dot(row r, token t)).
//
// K provides:
//   block_elems, w_block_bytes, x_block_bytes, chunk_blocks
//   struct token_group: per-block data of 8 tokens for blocks [b0, b1), filled by
//     prepare(group, x[8], b0, b1) (e.g. their scales as a vector)
//   __m256 tokens8(w_row, x[8], group, b0, b1, acc): continues acc (lane i = token i)
//     over blocks [b0, b1) of one weight row
//   rows8<NT>(w[8], x[NT], nb, next, out[NT]): the outputs of eight weight rows and NT
//     tokens (1 to 3), each row's values unpacked once for all of them; while it works
//     it prefetches the next eight rows, next[0, 8 * nb * w_block_bytes) (null: none),
//     because eight short interleaved row streams are more than the hardware
//     prefetcher follows well, and decode is bound by this memory traffic
//
// Full groups of 8 tokens use tokens8, so each weight block is unpacked once for eight
// tokens; so do the last 4 to 7 tokens, as one group whose missing tokens repeat the
// last one (their lanes are dropped): a batched decode step of a few lanes then reads
// each weight row once instead of once per token. A group of 4 runs the kernel's
// 4-token variant where it has one (its lanes 4-7 repeat 0-3), at about half the cost.
// One to three remaining tokens use rows8 (decode is one token), which is cheaper for
// them. Which lane a token takes
// cannot change its bits (one output per lane). Blocks are taken in chunks
// so that per-token-group data stays small; the partial sums between chunks are kept
// in y itself (a float stored and reloaded is unchanged).
// Kernels whose tokens8 takes the number of working tokens (4 or 8) as a template
// argument.
template <typename K>
constexpr bool k_has_tokens4 = requires { &K::template tokens8<4>; };

// Rows 8 at a time for NT tokens (x[i] their activation rows), outputs y[i * y_stride + r].
// Not inlined: in a function of its own each NT gets all the registers (inlined into
// mul_tile_driver next to the others, the one-token superblock loop spilled more and
// ran up to a fifth slower).
template <typename K, int NT>
[[gnu::noinline]] void rows8_tile(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * const x[NT], int64_t nb, float * y,
                int64_t y_stride) {
    for (int64_t r = 0; r < n_rows; r += 8) {
        const uint8_t * rows[8];
        // Missing rows of the last group repeat the last row; their lanes are dropped.
        for (int64_t i = 0; i < 8; ++i) rows[i] = w + static_cast<size_t>(r + i < n_rows ? r + i : n_rows - 1) * w_row_bytes;
        const uint8_t * next = r + 8 < n_rows ? w + static_cast<size_t>(r + 8) * w_row_bytes : nullptr;
        __m256 out[NT];
        K::template rows8<NT>(rows, x, nb, next, out);
        #pragma GCC unroll 3
        for (int i = 0; i < NT; ++i) {
            if (r + 8 <= n_rows) {
                _mm256_storeu_ps(y + i * y_stride + r, out[i]);
            } else {
                scatter_lanes(out[i], y + i * y_stride + r, 1, n_rows - r);
            }
        }
    }
}

template <typename K>
void mul_tile_driver(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                     int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    const int64_t nb = n / K::block_elems;
    constexpr int64_t k_min_padded_group = 4;
    int64_t t = 0;
    while (n_tokens - t >= k_min_padded_group) {
        const int64_t m = n_tokens - t < 8 ? n_tokens - t : 8;  // tokens of this group
        const uint8_t * x[8];
        for (int i = 0; i < 8; ++i) x[i] = xq + static_cast<size_t>(t + (i < m ? i : m - 1)) * xq_row_bytes;
        float * yt = y + t * y_stride;
        for (int64_t b0 = 0; b0 < nb; b0 += K::chunk_blocks) {
            const int64_t b1 = b0 + K::chunk_blocks < nb ? b0 + K::chunk_blocks : nb;
            typename K::token_group group;
            K::prepare(group, x, b0, b1);
            for (int64_t r = 0; r < n_rows; ++r) {
                __m256 acc = _mm256_setzero_ps();
                if (b0 != 0) acc = m == 8 ? gather_lanes(yt + r, y_stride) : gather_lanes(yt + r, y_stride, m);
                const uint8_t * w_row = w + static_cast<size_t>(r) * w_row_bytes;
                if constexpr (k_has_tokens4<K>) {
                    acc = m <= 4 ? K::template tokens8<4>(w_row, x, group, b0, b1, acc) : K::tokens8(w_row, x, group, b0, b1, acc);
                } else {
                    acc = K::tokens8(w_row, x, group, b0, b1, acc);
                }
                scatter_lanes(acc, yt + r, y_stride, m);
            }
        }
        t += m;
    }
    if (t < n_tokens) {
        const int64_t m = n_tokens - t;  // 1 to 3
        const uint8_t * x[3];
        for (int64_t i = 0; i < 3; ++i) x[i] = xq + static_cast<size_t>(t + (i < m ? i : 0)) * xq_row_bytes;
        if (m == 1) {
            rows8_tile<K, 1>(w, w_row_bytes, n_rows, x, nb, y + t * y_stride, y_stride);
        } else if (m == 2) {
            rows8_tile<K, 2>(w, w_row_bytes, n_rows, x, nb, y + t * y_stride, y_stride);
        } else {
            rows8_tile<K, 3>(w, w_row_bytes, n_rows, x, nb, y + t * y_stride, y_stride);
        }
    }
}

}  // namespace
}  // namespace skippy::kernels::avx2
