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

inline constexpr size_t q4_k_off_d      = 0;
inline constexpr size_t q4_k_off_dmin   = 2;
inline constexpr size_t q4_k_off_scales = 4;
inline constexpr size_t q4_k_off_qs     = 16;

inline constexpr size_t q6_k_off_ql     = 0;
inline constexpr size_t q6_k_off_qh     = 128;
inline constexpr size_t q6_k_off_scales = 192;
inline constexpr size_t q6_k_off_d      = 208;

inline constexpr size_t q8_k_off_d     = 0;
inline constexpr size_t q8_k_off_qs    = 4;
inline constexpr size_t q8_k_off_bsums = 260;

}  // namespace skippy::kernels
