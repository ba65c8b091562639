// Byte layouts of the block formats, as GGUF/ggml store them (internal to kernels).
//
// Blocks are read and written byte by byte through base/byte_io.h, never by casting
// to packed structs: multi-byte fields are little-endian and may be unaligned (a
// Q8_0 block is 34 bytes). Offsets below are from the start of a block.
//
//   Q8_0 (32 values, 34 bytes):  [0] f16 d | [2] i8 qs[32]           x = d * q
//   Q4_0 (32 values, 18 bytes):  [0] f16 d | [2] u8 qs[16]           x = d * (q - 8)
//        value j < 16 is the low nibble of qs[j], value j + 16 its high nibble.
//   Q4_K (256 values, 144 bytes): [0] f16 d | [2] f16 dmin | [4] u8 scales[12] |
//        [16] u8 qs[128]. Eight sub-blocks of 32 values, each with a 6-bit scale sc
//        and a 6-bit min m:  x = (d * sc) * q - (dmin * m),  q in [0, 15].
//        Values 64g + l (l < 32) are the low nibbles of qs[32g + l], values
//        64g + 32 + l the high nibbles (sub-blocks 2g and 2g + 1).
//        6-bit packing of scales (s = scales[]):
//          j < 4:  sc = s[j] & 63,                       m = s[j + 4] & 63
//          j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
//                  m  = (s[j + 4] >> 4) | (s[j] >> 6) << 4
//   Q6_K (256 values, 210 bytes): [0] u8 ql[128] | [128] u8 qh[64] | [192] i8 scales[16] |
//        [208] f16 d. Sixteen sub-blocks of 16 values: x = (d * scales[e / 16]) * (q - 32),
//        q in [0, 63] = low 4 bits from ql, high 2 bits from qh. In half h (128 values),
//        for l < 32 and k in 0..3, value 128h + 32k + l takes
//          low bits:  ql[64h + l + 32 * (k & 1)], low nibble if k < 2 else high nibble
//          high bits: (qh[32h + l] >> 2k) & 3
//   Q8_K (256 values, 292 bytes, activations only): [0] f32 d | [4] i8 qs[256] |
//        [260] i16 bsums[16] (bsums[i] = sum of qs[16i .. 16i + 15]).  x = d * q
//
//   In the 32-value formats below, value j < 16 sits in the low nibble of qs[j] and
//   value j + 16 in its high nibble, as in Q4_0.
//   Q5_0 (32 values, 22 bytes): [0] f16 d | [2] u8 qh[4] | [6] u8 qs[16].
//        q = nibble | (bit j of qh read as a little-endian u32) << 4, in [0, 31];
//        x = d * (q - 16).
//   Q5_1 (32 values, 24 bytes): [0] f16 d | [2] f16 m | [4] u8 qh[4] | [8] u8 qs[16].
//        q as in Q5_0; x = d * q + m.
//   Q8_1 (32 values, 36 bytes, activations only): [0] f16 d | [2] f16 s | [4] i8 qs[32].
//        x = d * q; s = d * (sum of the 32 codes), for Q5_1's offset m.
//   IQ4_NL (32 values, 18 bytes): [0] f16 d | [2] u8 qs[16].  x = d * k_iq4nl[q], the
//        16-entry non-linear table in kernels/iq4_table.h.
//   MXFP4 (32 values, 17 bytes): [0] u8 e (E8M0 shared exponent) | [1] u8 qs[16].
//        x = k_mxfp4[q] * 2^(e - 128): the table holds twice the E2M1 values
//        (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), hence the exponent bias 128.
//
//   Q2_K (256 values, 84 bytes): [0] u8 scales[16] | [16] u8 qs[64] | [80] f16 d |
//        [82] f16 dmin. Sixteen sub-blocks of 16: scales[j] & 15 is the scale sc_j,
//        scales[j] >> 4 the min m_j;  x = (d * sc) * q - (dmin * m),  q in [0, 3].
//        In half h (128 values), value 128h + 32k + l (k < 4, l < 32) is
//        (qs[32h + l] >> 2k) & 3.
//   Q3_K (256 values, 110 bytes): [0] u8 hmask[32] | [32] u8 qs[64] | [96] u8 scales[12] |
//        [108] f16 d. Value 128h + 32k + l: low 2 bits as in Q2_K, high bit = bit
//        (4h + k) of hmask[l]; q = low + 4 * high - 4, in [-4, 3]. Sixteen sub-blocks of
//        16 with a 6-bit scale s_j = (scales[j % 8] >> 4 * (j / 8)) & 15 |
//        ((scales[8 + j % 4] >> 2 * (j / 4)) & 3) << 4;  x = (d * (s_j - 32)) * q.
//   Q5_K (256 values, 176 bytes): [0] f16 d | [2] f16 dmin | [4] u8 scales[12] |
//        [16] u8 qh[32] | [48] u8 qs[128]. As Q4_K (same scales, same nibble order),
//        plus a fifth bit: value 64g + l takes bit 2g of qh[l], value 64g + 32 + l bit
//        2g + 1;  q in [0, 31].
//   IQ4_XS (256 values, 136 bytes): [0] f16 d | [2] u16 scales_h | [4] u8 scales_l[4] |
//        [8] u8 qs[128]. Eight sub-blocks of 32, sub-block j in qs[16j .. 16j + 15]
//        (nibble order as IQ4_NL) with the 6-bit scale
//        ls_j = (scales_l[j / 2] >> 4 * (j % 2)) & 15 | ((scales_h >> 2j) & 3) << 4;
//        x = (d * (ls_j - 32)) * k_iq4nl[q].
#pragma once

#include <cstddef>
#include <cstdint>

namespace skippy::kernels {

inline constexpr int64_t qk_0 = 32;   // values per Q8_0 / Q4_0 block
inline constexpr int64_t qk_k = 256;  // values per K-quant super-block

inline constexpr size_t q8_0_block_bytes = 2 + 32;
inline constexpr size_t q4_0_block_bytes = 2 + 16;
inline constexpr size_t q4_k_block_bytes = 2 + 2 + 12 + 128;
inline constexpr size_t q6_k_block_bytes = 128 + 64 + 16 + 2;
inline constexpr size_t q8_k_block_bytes = 4 + 256 + 2 * 16;
inline constexpr size_t q5_0_block_bytes = 2 + 4 + 16;
inline constexpr size_t q5_1_block_bytes = 2 + 2 + 4 + 16;
inline constexpr size_t q8_1_block_bytes = 2 + 2 + 32;
inline constexpr size_t iq4_nl_block_bytes = 2 + 16;
inline constexpr size_t mxfp4_block_bytes = 1 + 16;
inline constexpr size_t q2_k_block_bytes = 16 + 64 + 2 + 2;
inline constexpr size_t q3_k_block_bytes = 32 + 64 + 12 + 2;
inline constexpr size_t q5_k_block_bytes = 2 + 2 + 12 + 32 + 128;
inline constexpr size_t iq4_xs_block_bytes = 2 + 2 + 4 + 128;

inline constexpr size_t q4_k_off_d      = 0;
inline constexpr size_t q4_k_off_dmin   = 2;
inline constexpr size_t q4_k_off_scales = 4;
inline constexpr size_t q4_k_off_qs     = 16;

inline constexpr size_t q6_k_off_ql     = 0;
inline constexpr size_t q6_k_off_qh     = 128;
inline constexpr size_t q6_k_off_scales = 192;
inline constexpr size_t q6_k_off_d      = 208;

inline constexpr size_t q5_0_off_d  = 0;
inline constexpr size_t q5_0_off_qh = 2;
inline constexpr size_t q5_0_off_qs = 6;

inline constexpr size_t q5_1_off_d  = 0;
inline constexpr size_t q5_1_off_m  = 2;
inline constexpr size_t q5_1_off_qh = 4;
inline constexpr size_t q5_1_off_qs = 8;

inline constexpr size_t q8_1_off_d  = 0;
inline constexpr size_t q8_1_off_s  = 2;
inline constexpr size_t q8_1_off_qs = 4;

inline constexpr size_t iq4_nl_off_d  = 0;
inline constexpr size_t iq4_nl_off_qs = 2;

inline constexpr size_t mxfp4_off_e  = 0;
inline constexpr size_t mxfp4_off_qs = 1;

inline constexpr size_t q2_k_off_scales = 0;
inline constexpr size_t q2_k_off_qs     = 16;
inline constexpr size_t q2_k_off_d      = 80;
inline constexpr size_t q2_k_off_dmin   = 82;

inline constexpr size_t q3_k_off_hmask  = 0;
inline constexpr size_t q3_k_off_qs     = 32;
inline constexpr size_t q3_k_off_scales = 96;
inline constexpr size_t q3_k_off_d      = 108;

inline constexpr size_t q5_k_off_d      = 0;
inline constexpr size_t q5_k_off_dmin   = 2;
inline constexpr size_t q5_k_off_scales = 4;
inline constexpr size_t q5_k_off_qh     = 16;
inline constexpr size_t q5_k_off_qs     = 48;

inline constexpr size_t iq4_xs_off_d        = 0;
inline constexpr size_t iq4_xs_off_scales_h = 2;
inline constexpr size_t iq4_xs_off_scales_l = 4;
inline constexpr size_t iq4_xs_off_qs       = 8;

inline constexpr size_t q8_k_off_d     = 0;
inline constexpr size_t q8_k_off_qs    = 4;
inline constexpr size_t q8_k_off_bsums = 260;

}  // namespace skippy::kernels
