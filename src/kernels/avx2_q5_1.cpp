// Q5_1 x Q8_1 products and the Q8_1 activation encoder with AVX2.
//
// The reference (quants_q5_1.cpp) computes, per block, the exact int32 sum of
// q_w * q_x (codes 0..31 times int8), then sum += (d_w * d_x) * sumi + m_w * s_x in
// block order. The codes are unsigned, so maddubs takes them as they are (pair sums
// within 2 * 31 * 128); the float steps run one output per lane (avx2_util.h).
#include "kernels/avx2_block32.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

constexpr size_t wbb = q5_1_block_bytes;
constexpr size_t xbb = q8_1_block_bytes;

inline __m256i codes(const uint8_t * wb) {
    return _mm256_or_si256(unpack_nibbles_32(wb + q5_1_off_qs), q5_high_bits(wb + q5_1_off_qh));
}

inline __m256i block_dot(__m256i w, const uint8_t * xb) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, loadu_256(xb + q8_1_off_qs)), _mm256_set1_epi16(1));
}

// Reference float step: d = d_w * d_x; m = m_w * s_x; sum += d * sumi + m.
inline __m256 accumulate(__m256 acc, __m256 dw, __m256 mw, __m256 dx, __m256 sx, __m256i sumi) {
    const __m256 d = _mm256_mul_ps(dw, dx);
    const __m256 m = _mm256_mul_ps(mw, sx);
    return _mm256_add_ps(acc, _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)), m));
}

struct q5_1_kernel {
    static constexpr int64_t block_elems = qk_0;
    static constexpr int64_t chunk_blocks = 128;
    struct token_group {
        __m256 dx[chunk_blocks];
        __m256 sx[chunk_blocks];
    };

    static void prepare(token_group & g, const uint8_t * const x[8], int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * pd[8];
            const uint8_t * ps[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                pd[i] = x[i] + b * xbb + q8_1_off_d;
                ps[i] = x[i] + b * xbb + q8_1_off_s;
            }
            g.dx[b - b0] = gather_f16(pd);
            g.sx[b - b0] = gather_f16(ps);
        }
    }

    static __m256 tokens8(const uint8_t * w, const uint8_t * const x[8], const token_group & g, int64_t b0, int64_t b1,
                          __m256 acc) {
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * wb = w + b * wbb;
            const __m256i q = codes(wb);
            __m256i v[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) v[i] = block_dot(q, x[i] + b * xbb);
            acc = accumulate(acc, _mm256_set1_ps(f16_at(wb + q5_1_off_d)), _mm256_set1_ps(f16_at(wb + q5_1_off_m)),
                             g.dx[b - b0], g.sx[b - b0], reduce8(v));
        }
        return acc;
    }

    template <int NT>
    static void rows8(const uint8_t * const w[8], const uint8_t * const x[NT], int64_t nb, const uint8_t * next, __m256 acc[NT]) {
        #pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (next != nullptr) prefetch_span(next + b * 8 * wbb, 8 * wbb);
            const uint8_t * wd[8];
            __m256i v[NT][8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
                const uint8_t * wb = w[i] + b * wbb;
                wd[i] = wb + q5_1_off_d;
                const __m256i q = codes(wb);
                #pragma GCC unroll 3
                for (int t = 0; t < NT; ++t) v[t][i] = block_dot(q, x[t] + b * xbb);
            }
            __m256 dw, mw;
            static_assert(q5_1_off_m == q5_1_off_d + 2);
            gather_f16_pairs(wd, dw, mw);
            #pragma GCC unroll 3
            for (int t = 0; t < NT; ++t) {
                const uint8_t * xb = x[t] + b * xbb;
                acc[t] = accumulate(acc[t], dw, mw, _mm256_set1_ps(f16_at(xb + q8_1_off_d)), _mm256_set1_ps(f16_at(xb + q8_1_off_s)),
                                    reduce8(v[t]));
            }
        }
    }
};

}  // namespace

float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const uint8_t * wb = w_row + ib * wbb;
        const uint8_t * xb = x_row + ib * xbb;
        const int32_t sumi = hsum_i32(block_dot(codes(wb), xb));
        const float d = f16_at(wb + q5_1_off_d) * f16_at(xb + q8_1_off_d);
        const float m = f16_at(wb + q5_1_off_m) * f16_at(xb + q8_1_off_s);
        sum += d * static_cast<float>(sumi) + m;
    }
    return sum;
}

void mul_tile_q5_1_q8_1(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<q5_1_kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

// Byte for byte the scalar from_float_q8_1: Q8_0's activation encoding (avx2_q8_0.cpp)
// at offset 4, plus s = f16(d * sum of the codes) with the unrounded d = amax / 127.
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t ib = 0; ib < n / qk_0; ++ib) {
        const float * x = src + ib * qk_0;
        uint8_t * b = dst + ib * xbb;
        const float amax = abs_max(x, qk_0);
        const float d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k) {
            q[k] = clamp_i32(round_nearest_even(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id)), -127, 127);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(b + q8_1_off_qs), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
        const int32_t sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        const uint16_t dh = _cvtss_sh(d, 0);
        const uint16_t sh = _cvtss_sh(d * static_cast<float>(sum), 0);
        std::memcpy(b + q8_1_off_d, &dh, 2);
        std::memcpy(b + q8_1_off_s, &sh, 2);
    }
}

}  // namespace skippy::kernels::avx2
