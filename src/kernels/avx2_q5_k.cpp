// Q5_K x Q8_K products with AVX2 (avx2_superblock.h): Q4_K's nibbles plus a fifth bit
// from qh, 6-bit scales and mins per 32 values.
#include "kernels/avx2_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx2 {
namespace {

struct q5_k_format {
    static constexpr size_t block_bytes = q5_k_block_bytes;
    static constexpr size_t off_d = q5_k_off_d;
    static constexpr size_t off_dmin = q5_k_off_dmin;
    static constexpr bool has_min = true, has_bias = false, is_signed = false;
    static constexpr int n_groups = 4, per_group = 2;
    struct scales {
        __m128i sc;  // 8 scales (bytes)
        __m256i m;   // mins duplicated pairwise (m0, m0, m1, m1, ...), as bsums cover 16 values
    };
    // The Q4_K packing (blocks.h), four bytes at a time.
    static scales load_scales(const uint8_t * wb) {
        const uint8_t * s = wb + q5_k_off_scales;
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
        return {sc8, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8))};
    }
    // Group g: values 64g + l (low nibbles of qs[32g + l], bit 2g of qh[l]) and
    // 64g + 32 + l (high nibbles, bit 2g + 1). 16-bit shifts move bits across bytes;
    // the masks drop what crossed.
    static void group(const uint8_t * wb, int g, __m256i * q) {
        const __m256i qs = loadu_256(wb + q5_k_off_qs + 32 * g);
        const __m256i qh = _mm256_srl_epi16(loadu_256(wb + q5_k_off_qh), _mm_cvtsi32_si128(2 * g));
        const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
        q[0] = _mm256_or_si256(_mm256_and_si256(qs, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), low4), _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
    }
    static __m256i scale_vec(const scales & s, int v) { return scales_of_32(s.sc, v); }
    static __m256i mins(const scales & s) { return s.m; }
    static __m256i bias(const scales &) { return _mm256_setzero_si256(); }
};

using kernel = superblock_kernel<q5_k_format>;

}  // namespace

float vec_dot_q5_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q5_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx2
