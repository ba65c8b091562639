// Q6_K x Q8_K products with AVX2.
//
// The reference (quants_q6_k.cpp) computes per super-block, exactly in int32,
//   isum = sum_j scale_j * sum((q_w - 32) * q_x over sub-block j of 16 values)
// then sum += (d_w * d_x) * isum in super-block order. Here the 6-bit codes (0..63)
// are multiplied as unsigned bytes by maddubs (pair sums within 2 * 63 * 128), madd
// applies the sub-block scale, and the offset comes from the activation's bsums:
// sum_j scale_j * 32 * bsum_j, one more madd into the same int32 lanes. The float
// step runs one output per lane (avx2_util.h), so results equal the reference's.
#include "kernels/avx2_util.h"
#include "kernels/blocks.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t wbb = q6_k_block_bytes;
constexpr size_t xbb = q8_k_block_bytes;

// The 16 int8 sub-block scales, and per group k of 32 values (sub-blocks 2k, 2k + 1)
// a vector of int16: lanes 0-7 = scale_2k, lanes 8-15 = scale_2k+1.
struct q6_scales {
    __m128i bytes;
    __m256i offset;  // int16 lanes -32 * scale_j, for madd with bsums
};

inline q6_scales load_scales(const uint8_t * wb) {
    q6_scales s;
    s.bytes = loadu_128(wb + q6_k_off_scales);
    // |32 * scale| <= 4096 fits int16; each madd lane then stays within 2 * 4096 * 2048.
    s.offset = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(s.bytes), 5));
    return s;
}

inline __m256i group_scales(__m128i scale_bytes, int k) {
    const __m128i pick = _mm_setr_epi8(static_cast<char>(2 * k), static_cast<char>(2 * k), static_cast<char>(2 * k),
                                       static_cast<char>(2 * k), static_cast<char>(2 * k), static_cast<char>(2 * k),
                                       static_cast<char>(2 * k), static_cast<char>(2 * k), static_cast<char>(2 * k + 1),
                                       static_cast<char>(2 * k + 1), static_cast<char>(2 * k + 1),
                                       static_cast<char>(2 * k + 1), static_cast<char>(2 * k + 1),
                                       static_cast<char>(2 * k + 1), static_cast<char>(2 * k + 1),
                                       static_cast<char>(2 * k + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scale_bytes, pick));
}

// The codes (0..63) of values 128h + 32k + l, l < 32, for k = 0..3 (blocks.h):
// low 4 bits from ql (bytes l and l + 32 of the half, low then high nibbles), high 2
// bits from qh bits 2k, 2k + 1.
struct q6_half {
    __m256i q[4];
};

inline q6_half unpack_half(const uint8_t * wb, int h) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    const __m256i ql0 = loadu_256(wb + q6_k_off_ql + 64 * h);
    const __m256i ql1 = loadu_256(wb + q6_k_off_ql + 64 * h + 32);
    const __m256i qh = loadu_256(wb + q6_k_off_qh + 32 * h);
    // 16-bit shifts move bits across byte borders; the masks drop what crossed.
    q6_half r;
    r.q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
    r.q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
    r.q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
    r.q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
    return r;
}

// 8 int32 partial sums of isum for one super-block of one weight row and one token.
inline __m256i super_block_dot(const uint8_t * wb, const uint8_t * xb, const q6_scales & s) {
    __m256i acc = _mm256_madd_epi16(loadu_256(xb + q8_k_off_bsums), s.offset);
    #pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
        const q6_half q = unpack_half(wb, h);
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k) {
            const __m256i p = _mm256_maddubs_epi16(q.q[k], loadu_256(xb + q8_k_off_qs + 128 * h + 32 * k));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, group_scales(s.bytes, 4 * h + k)));
        }
    }
    return acc;
}

// Reference float step: d = d_w * d_x; sum += d * isum.
inline __m256 accumulate(__m256 acc, __m256 dw, __m256 dx, __m256i isum) {
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum)));
}

struct q6_k_kernel {
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
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const size_t xo = static_cast<size_t>(b) * xbb;
            const q6_scales s = load_scales(wb);
            __m256i isum[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) isum[i] = _mm256_madd_epi16(loadu_256(x[i] + xo + q8_k_off_bsums), s.offset);
            #pragma GCC unroll 8
            for (int h = 0; h < 2; ++h) {
                const q6_half q = unpack_half(wb, h);
                #pragma GCC unroll 8
                for (int k = 0; k < 4; ++k) {
                    const __m256i sk = group_scales(s.bytes, 4 * h + k);
                    #pragma GCC unroll 8
                    for (int i = 0; i < 8; ++i) {
                        const __m256i p = _mm256_maddubs_epi16(q.q[k], loadu_256(x[i] + xo + q8_k_off_qs + 128 * h + 32 * k));
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, sk));
                    }
                }
            }
            acc = accumulate(acc, _mm256_set1_ps(f16_at(wb + q6_k_off_d)), g.dx[b - b0], reduce8(isum));
        }
        return acc;
    }

    static __m256 rows8(const uint8_t * const w[8], const uint8_t * x, int64_t nb, const uint8_t * next) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            const uint8_t * xb = x + b * xbb;
            const uint8_t * wd[8];
            __m256i isum[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                const uint8_t * wb = w[i] + b * wbb;
                wd[i] = wb + q6_k_off_d;
                isum[i] = super_block_dot(wb, xb, load_scales(wb));
            }
            acc = accumulate(acc, gather_f16(wd), _mm256_set1_ps(load_f32(xb + q8_k_off_d)), reduce8(isum));
        }
        return acc;
    }
};

}  // namespace

float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_k; ++ib) {
        const uint8_t * w = w_row + ib * wbb;
        const uint8_t * x = x_row + ib * xbb;
        const int32_t isum = hsum_i32(super_block_dot(w, x, load_scales(w)));
        const float d = f16_at(w + q6_k_off_d) * load_f32(x + q8_k_off_d);
        sum += d * static_cast<float>(isum);
    }
    return sum;
}

void mul_tile_q6_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<q6_k_kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
