// Q4_K x Q8_K products with AVX2.
//
// The reference (quants_q4_k.cpp) computes per super-block, exactly in int32,
//   isum = sum_j sc_j * sum(q_w * q_x over sub-block j)
//   imin = sum_j m_j * (bsums of sub-block j)
// then sum += (d_w * d_x) * isum - (dmin_w * d_x) * imin in super-block order. Here
// the nibbles are multiplied as unsigned bytes by maddubs (pair sums within
// 2 * 15 * 128), madd applies the sub-block scale while widening to int32, and madd
// of the bsums with the mins gives imin's partial sums. Both are reduced per output
// and the float steps run one output per lane (avx2_util.h), so results equal the
// reference's.
#include "kernels/avx2_util.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t wbb = q4_k_block_bytes;
constexpr size_t xbb = q8_k_block_bytes;

// The eight 6-bit scales and mins of a super-block, as in blocks.h:
//   j < 4:  sc = s[j] & 63,  m = s[j + 4] & 63
//   j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,  m = (s[j + 4] >> 4) | (s[j] >> 6) << 4
// computed four bytes at a time. Returns the scales as 8 int16 in the low 128 bits,
// each duplicated into a 32-bit unit (so unit j broadcasts sc_j to a whole vector), and
// the mins duplicated pairwise as 16 int16 (m0, m0, m1, m1, ...) for madd with bsums.
struct scales_mins {
    __m256i sc_units;  // 32-bit unit j = (sc_j, sc_j)
    __m256i m_pairs;   // int16 lane 2j and 2j + 1 = m_j
};

inline scales_mins unpack_scales(const uint8_t * s) {
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
    scales_mins r;
    // Bytes sc0 sc0 sc1 sc1 ... widened to int16: unit j holds (sc_j, sc_j).
    r.sc_units = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc8, sc8));
    r.m_pairs = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    return r;
}

inline __m256i broadcast_unit(__m256i units, int j) { return _mm256_permutevar8x32_epi32(units, _mm256_set1_epi32(j)); }

// 8 int32 partial sums of isum for one super-block of one weight row and one token.
inline __m256i super_block_dot(const uint8_t * wb, const uint8_t * xb, __m256i sc_units) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i acc = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int g = 0; g < 4; ++g) {
        const __m256i q = loadu_256(wb + q4_k_off_qs + 32 * g);
        const __m256i lo = _mm256_and_si256(q, low4);                         // sub-block 2g
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);  // sub-block 2g + 1
        const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu_256(xb + q8_k_off_qs + 64 * g)),
                                               broadcast_unit(sc_units, 2 * g));
        const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu_256(xb + q8_k_off_qs + 64 * g + 32)),
                                               broadcast_unit(sc_units, 2 * g + 1));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(p_lo, p_hi));
    }
    return acc;
}

// Reference float step: d = d_w * d_x; dmin = dmin_w * d_x; sum += d * isum - dmin * imin.
inline __m256 accumulate(__m256 acc, __m256 dw, __m256 dminw, __m256 dx, __m256i isum, __m256i imin) {
    const __m256 d = _mm256_mul_ps(dw, dx);
    const __m256 dmin = _mm256_mul_ps(dminw, dx);
    const __m256 t = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(imin)));
    return _mm256_add_ps(acc, t);
}

struct q4_k_kernel {
    static constexpr int64_t block_elems = qk_k;
    static constexpr int64_t chunk_blocks = 64;
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

    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const size_t xo = static_cast<size_t>(b) * xbb;
            const scales_mins sm = unpack_scales(wb + q4_k_off_scales);
            __m256i isum[8], imin[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) isum[i] = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int gr = 0; gr < 4; ++gr) {
                const __m256i q = loadu_256(wb + q4_k_off_qs + 32 * gr);
                const __m256i lo = _mm256_and_si256(q, low4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
                const __m256i s_lo = broadcast_unit(sm.sc_units, 2 * gr);
                const __m256i s_hi = broadcast_unit(sm.sc_units, 2 * gr + 1);
                #pragma GCC unroll 8
                for (int i = 0; i < 8; ++i) {
                    const uint8_t * xq = x[i] + xo + q8_k_off_qs + 64 * gr;
                    const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu_256(xq)), s_lo);
                    const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu_256(xq + 32)), s_hi);
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(p_lo, p_hi));
                }
            }
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) imin[i] = _mm256_madd_epi16(loadu_256(x[i] + xo + q8_k_off_bsums), sm.m_pairs);
            acc = accumulate(acc, _mm256_set1_ps(f16_at(wb + q4_k_off_d)), _mm256_set1_ps(f16_at(wb + q4_k_off_dmin)),
                             g.dx[b - b0], reduce8(isum), reduce8(imin));
        }
        return acc;
    }

    static __m256 rows8(const uint8_t * const w[8], const uint8_t * x, int64_t nb, const uint8_t * next) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            const uint8_t * xb = x + b * xbb;
            const __m256i bsums = loadu_256(xb + q8_k_off_bsums);
            const uint8_t * wb[8];
            const uint8_t * wmin[8];
            __m256i isum[8], imin[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                wb[i] = w[i] + b * wbb;
                wmin[i] = wb[i] + q4_k_off_dmin;
                const scales_mins sm = unpack_scales(wb[i] + q4_k_off_scales);
                isum[i] = super_block_dot(wb[i], xb, sm.sc_units);
                imin[i] = _mm256_madd_epi16(bsums, sm.m_pairs);
            }
            acc = accumulate(acc, gather_f16(wb), gather_f16(wmin), _mm256_set1_ps(load_f32(xb + q8_k_off_d)), reduce8(isum),
                             reduce8(imin));
        }
        return acc;
    }
};

}  // namespace

float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * wbb;
        const uint8_t * x = x_row + ib * xbb;
        const scales_mins sm = unpack_scales(w + q4_k_off_scales);
        const int32_t isum = hsum_i32(super_block_dot(w, x, sm.sc_units));
        const int32_t imin = hsum_i32(_mm256_madd_epi16(loadu_256(x + q8_k_off_bsums), sm.m_pairs));
        const float dx = load_f32(x + q8_k_off_d);
        const float d = f16_at(w + q4_k_off_d) * dx;
        const float dmin = f16_at(w + q4_k_off_dmin) * dx;
        sum += d * static_cast<float>(isum) - dmin * static_cast<float>(imin);
    }
    return sum;
}

void mul_tile_q4_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<q4_k_kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
