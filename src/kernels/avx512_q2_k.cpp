// Q2_K x Q8_K products with AVX-512 (avx512_superblock.h): 2-bit codes, 4-bit scales
// and mins per 16 values.
#include "kernels/avx512_kernels.h"
#include "kernels/avx512_superblock.h"
#include "kernels/quants_avx2.h"

namespace skippy::kernels::avx512 {
namespace {

// The codes of values 128h + 32k + l (k < 4, l < 32), (qs[32h + l] >> 2k) & 3, for k =
// k0 (low 256 bits) and k0 + 1 (high 256 bits), from q = this half's 32 bytes twice.
inline __m512i crumbs(__m512i q, int k0) {
    const __m512i shift = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi16(static_cast<int16_t>(2 * k0)),
                                                  _mm512_set1_epi16(static_cast<int16_t>(2 * k0 + 2)));
    return _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
}

struct q2_k_format {
    static constexpr size_t block_bytes = q2_k_block_bytes;
    static constexpr size_t off_d = q2_k_off_d;
    static constexpr size_t off_dmin = q2_k_off_dmin;
    static constexpr int n_sub = 16;
    static constexpr bool has_min = true;
    static constexpr int bias_shift = -1;
    static constexpr int pair_min_tokens = 0;
    static void codes(const uint8_t * wb, uint8_t * out) {
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(loadu_256(wb + q2_k_off_qs + 32 * h));
            _mm512_store_si512(out + 128 * h, crumbs(q, 0));
            _mm512_store_si512(out + 128 * h + 64, crumbs(q, 2));
        }
    }
    // scales[j] & 15 is the scale of sub-block j (16 values), scales[j] >> 4 its min;
    // bsums pair k covers sub-blocks 2k and 2k + 1.
    static void scales(const uint8_t * wb, int32_t * sc, uint32_t * pair) {
        const uint8_t * s = wb + q2_k_off_scales;
        #pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) sc[j] = s[j] & 0x0f;
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) pair[k] = static_cast<uint32_t>(s[2 * k] >> 4) | static_cast<uint32_t>(s[2 * k + 1] >> 4) << 16;
    }
    static constexpr auto rest = avx2::mul_tile_q2_k_q8_k;

    // Decode (superblock_kernel::rows16): the activation in crumbs_x_decode's order.
    using decode_x = min_decode_x;
    [[gnu::always_inline]] static void x_decode(const uint8_t * xb, decode_x & xd) {
        crumbs_x_decode(xb, xd.q);
        xd.bsums = loadu_256(xb + q8_k_off_bsums);
    }
    // min_row_sums of the codes (pairs within 2 * 3 * 128), each lane's scale (vpermw
    // from the 16 scales) and the mins.
    template <int NT>
    [[gnu::always_inline]] static void row_decode(const uint8_t * wb, const decode_x * xd, __m512i * out) {
        const __m256i raw = _mm256_cvtepu8_epi16(loadu_128(wb + q2_k_off_scales));
        const __m512i sc = _mm512_zextsi256_si512(_mm256_and_si256(raw, _mm256_set1_epi16(0x0f)));
        const __m256i m = _mm256_srli_epi16(raw, 4);
        const __m512i qs = loadu_512(wb + q2_k_off_qs);
        const __m512i three = _mm512_set1_epi8(3);
        __m512i c[4], mult[4];
        #pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            c[k] = _mm512_and_si512(k == 0 ? qs : _mm512_srli_epi16(qs, 2 * k), three);
            mult[k] = _mm512_permutexvar_epi16(word_index(2 * k, 2 * k + 1, 8 + 2 * k, 9 + 2 * k), sc);
        }
        min_row_sums<NT>(c, mult, m, xd, out);
    }
    static_assert(q2_k_off_dmin == q2_k_off_d + 2);
    static constexpr size_t off_scale = q2_k_off_d;  // d, then dmin
    static void scales16(__m512i words, __m512 & d, __m512 & dmin) { f16_pairs(words, d, dmin); }
};

using kernel = superblock_kernel<q2_k_format>;

}  // namespace

float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n) { return kernel::vec_dot(w_row, x_row, n); }

void mul_tile_q2_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride) {
    mul_tile_driver<kernel>(w, w_row_bytes, n_rows, xq, xq_row_bytes, n_tokens, n, y, y_stride);
}

}  // namespace skippy::kernels::avx512
