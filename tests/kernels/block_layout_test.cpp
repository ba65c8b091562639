// Hand-built blocks with known bytes decode to known values: pins each format's bit
// layout (byte order, nibble order, scale packing, signedness) independently of our
// encoders.
#include "kernels/blocks.h"
#include "kernels/kernels.h"

#include "base/tensor_type.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace skippy::kernels {
namespace {

std::vector<float> decode_checked(tensor_type t, const std::vector<uint8_t> & bytes, int64_t n) {
    EXPECT_EQ(bytes.size(), row_bytes(t, n));
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(t, bytes.data(), out.data(), n);
    return out;
}

TEST(kernels_block_layout, BlockSizesMatchTheTensorTypeTable) {
    EXPECT_EQ(row_bytes(tensor_type::q8_0, 32), q8_0_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q4_0, 32), q4_0_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q4_k, 256), q4_k_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q6_k, 256), q6_k_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q8_k, 256), q8_k_block_bytes);
    EXPECT_EQ(q4_k_block_bytes, 144u);
    EXPECT_EQ(q6_k_block_bytes, 210u);
    EXPECT_EQ(q8_k_block_bytes, 292u);
    EXPECT_EQ(row_bytes(tensor_type::q5_0, 32), q5_0_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q5_1, 32), q5_1_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q8_1, 32), q8_1_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::iq4_nl, 32), iq4_nl_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::mxfp4, 32), mxfp4_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q2_k, 256), q2_k_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q3_k, 256), q3_k_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::q5_k, 256), q5_k_block_bytes);
    EXPECT_EQ(row_bytes(tensor_type::iq4_xs, 256), iq4_xs_block_bytes);
    EXPECT_EQ(q2_k_block_bytes, 84u);
    EXPECT_EQ(q3_k_block_bytes, 110u);
    EXPECT_EQ(q5_k_block_bytes, 176u);
    EXPECT_EQ(iq4_xs_block_bytes, 136u);
}

TEST(kernels_block_layout, F32IsLittleEndianIeee) {
    const std::vector<uint8_t> bytes = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x20, 0xc1};
    const auto v = decode_checked(tensor_type::f32, bytes, 2);
    EXPECT_EQ(v[0], 1.5f);
    EXPECT_EQ(v[1], -10.0f);
}

TEST(kernels_block_layout, F16AndBf16AreLittleEndian) {
    const std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b};
    const auto h = decode_checked(tensor_type::f16, f16, 4);
    EXPECT_EQ(h[0], 1.0f);
    EXPECT_EQ(h[1], -2.0f);
    EXPECT_EQ(h[2], 0x1p-24f);
    EXPECT_EQ(h[3], 65504.0f);
    const std::vector<uint8_t> bf16 = {0x80, 0x3f, 0xc0, 0xbf};
    const auto b = decode_checked(tensor_type::bf16, bf16, 2);
    EXPECT_EQ(b[0], 1.0f);
    EXPECT_EQ(b[1], -1.5f);
}

TEST(kernels_block_layout, Q8_0IsF16ScaleThenSignedBytes) {
    std::vector<uint8_t> block = {0x00, 0x38};  // d = 0.5
    for (int j = 0; j < 32; ++j) block.push_back(static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128)));
    const auto v = decode_checked(tensor_type::q8_0, block, 32);
    EXPECT_EQ(v[0], -64.0f);   // -128 * 0.5
    EXPECT_EQ(v[16], 0.0f);
    EXPECT_EQ(v[17], 4.0f);
    EXPECT_EQ(v[31], 60.0f);   // 120 * 0.5
}

TEST(kernels_block_layout, Q4_0LowNibblesAreTheFirstHalf) {
    std::vector<uint8_t> block = {0x00, 0x40};  // d = 2
    for (int j = 0; j < 16; ++j) block.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
    const auto v = decode_checked(tensor_type::q4_0, block, 32);
    EXPECT_EQ(v[0], -16.0f);   // low nibble of qs[0] = 0  -> (0 - 8) * 2
    EXPECT_EQ(v[15], 14.0f);   // low nibble of qs[15] = 15 -> (15 - 8) * 2
    EXPECT_EQ(v[16], 14.0f);   // high nibble of qs[0] = 15
    EXPECT_EQ(v[31], -16.0f);  // high nibble of qs[15] = 0
    EXPECT_EQ(v[9], 2.0f);     // (9 - 8) * 2
    EXPECT_EQ(v[25], -4.0f);   // high nibble of qs[9] = 15 - 9 = 6 -> (6 - 8) * 2
}

// d = 1, dmin = 0.5, and scale bytes whose 6-bit fields decode (by hand, from the
// packing rule in blocks.h) to
//   sc = {1, 2, 3, 4, 17, 35, 53, 7},  m = {5, 6, 7, 8, 2, 20, 38, 56}.
// qs[i] = (i % 16) | (15 - i % 16) << 4.
std::vector<uint8_t> q4_k_test_block() {
    std::vector<uint8_t> b = {0x00, 0x3c, 0x00, 0x38,
                              0x41, 0x82, 0xc3, 0x04, 0x05, 0x46, 0x87, 0xc8, 0x21, 0x43, 0x65, 0x87};
    for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4)));
    return b;
}

TEST(kernels_block_layout, Q4_KSixBitScalesAndNibbleOrder) {
    const auto v = decode_checked(tensor_type::q4_k, q4_k_test_block(), 256);
    // value = d * sc * q - dmin * m
    EXPECT_EQ(v[0], 1 * 0 - 0.5f * 5);      // sub-block 0, low nibble of qs[0] = 0
    EXPECT_EQ(v[31], 1 * 15 - 0.5f * 5);    // low nibble of qs[31] = 15
    EXPECT_EQ(v[33], 2 * 14 - 0.5f * 6);    // sub-block 1: high nibble of qs[1] = 14
    EXPECT_EQ(v[70], 3 * 6 - 0.5f * 7);     // sub-block 2: low nibble of qs[38] = 6
    EXPECT_EQ(v[100], 4 * 11 - 0.5f * 8);   // sub-block 3: high nibble of qs[36] = 11
    EXPECT_EQ(v[133], 17 * 5 - 0.5f * 2);   // sub-block 4: low nibble of qs[69] = 5
    EXPECT_EQ(v[180], 35 * 11 - 0.5f * 20); // sub-block 5: high nibble of qs[84] = 11
    EXPECT_EQ(v[200], 53 * 8 - 0.5f * 38);  // sub-block 6: low nibble of qs[104] = 8
    EXPECT_EQ(v[255], 7 * 0 - 0.5f * 56);   // sub-block 7: high nibble of qs[127] = 0

    // Every value, from the literal scale table above.
    const int sc[8] = {1, 2, 3, 4, 17, 35, 53, 7};
    const int m[8] = {5, 6, 7, 8, 2, 20, 38, 56};
    for (int e = 0; e < 256; ++e) {
        const int byte_index = 32 * (e / 64) + e % 32;
        const int low = byte_index % 16, high = 15 - byte_index % 16;
        const int q = (e % 64) < 32 ? low : high;
        EXPECT_EQ(v[e], static_cast<float>(sc[e / 32] * q) - 0.5f * static_cast<float>(m[e / 32])) << e;
    }
}

TEST(kernels_block_layout, Q4_KSecondBlockUsesItsOwnHeader) {
    auto two = q4_k_test_block();
    auto second = q4_k_test_block();
    second[0] = 0x00;
    second[1] = 0x40;  // d = 2
    two.insert(two.end(), second.begin(), second.end());
    const auto v = decode_checked(tensor_type::q4_k, two, 512);
    EXPECT_EQ(v[256 + 31], 2 * 15 - 0.5f * 5);
}

// ql[i] = i, every qh byte = 0b11100100 (high bits 0, 1, 2, 3 for k = 0..3),
// d = 0.25, scales = {3, -3, 5, -5, 7, -7, 9, -9, 11, -11, 13, -13, 127, -128, 1, -1}.
TEST(kernels_block_layout, Q6_KLowAndHighBitsAndSignedScales) {
    std::vector<uint8_t> b;
    for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>(i));
    for (int i = 0; i < 64; ++i) b.push_back(0xe4);
    const int8_t scales[16] = {3, -3, 5, -5, 7, -7, 9, -9, 11, -11, 13, -13, 127, -128, 1, -1};
    for (int8_t s : scales) b.push_back(static_cast<uint8_t>(s));
    b.push_back(0x00);
    b.push_back(0x34);  // d = 0.25
    const auto v = decode_checked(tensor_type::q6_k, b, 256);
    // value = d * scale[e / 16] * (q - 32)
    EXPECT_EQ(v[0], 0.25f * 3 * -32);     // ql[0] low = 0, high bits 0 -> q = 0
    EXPECT_EQ(v[37], 0.25f * 5 * -11);    // ql[37] = 0x25 low = 5, high 1 -> q = 21
    EXPECT_EQ(v[90], 0.25f * -7 * 1);     // ql[26] = 0x1a high = 1, high bits 2 -> q = 33
    EXPECT_EQ(v[127], 0.25f * -9 * 19);   // ql[63] = 0x3f high = 3, high bits 3 -> q = 51
    EXPECT_EQ(v[200], 0.25f * 127 * 4);   // second half: ql[72] = 0x48 high = 4, bits 2 -> 36
    EXPECT_EQ(v[210], 0.25f * -128 * 5);  // ql[82] = 0x52 high = 5, bits 2 -> 37
    EXPECT_EQ(v[255], 0.25f * -1 * 23);   // ql[127] = 0x7f high = 7, bits 3 -> 55
}

// qs[j] = j | (15 - j) << 4 for the 32-value formats below: low nibbles 0..15 for
// values 0..15, high nibbles 15..0 for values 16..31.
std::vector<uint8_t> nibble_ramp() {
    std::vector<uint8_t> qs;
    for (int j = 0; j < 16; ++j) qs.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
    return qs;
}

TEST(kernels_block_layout, Q5_0FifthBitsAreALittleEndianWordAfterTheScale) {
    std::vector<uint8_t> b = {0x00, 0x38, 0x01, 0x00, 0x00, 0x80};  // d = 0.5; bits 0 and 31 of qh
    const auto qs = nibble_ramp();
    b.insert(b.end(), qs.begin(), qs.end());
    const auto v = decode_checked(tensor_type::q5_0, b, 32);
    // x = d * (q - 16)
    EXPECT_EQ(v[0], 0.0f);     // low nibble 0 | 16
    EXPECT_EQ(v[1], -7.5f);    // 1 - 16
    EXPECT_EQ(v[15], -0.5f);   // 15 - 16
    EXPECT_EQ(v[16], -0.5f);   // high nibble of qs[0] = 15
    EXPECT_EQ(v[30], -7.5f);   // high nibble of qs[14] = 1
    EXPECT_EQ(v[31], 0.0f);    // high nibble of qs[15] = 0, | 16 from bit 31
}

TEST(kernels_block_layout, Q5_1IsScaleOffsetFifthBitsThenNibbles) {
    std::vector<uint8_t> b = {0x00, 0x40, 0x00, 0xbc, 0x00, 0x00, 0x01, 0x00};  // d = 2, m = -1; bit 16 of qh
    const auto qs = nibble_ramp();
    b.insert(b.end(), qs.begin(), qs.end());
    const auto v = decode_checked(tensor_type::q5_1, b, 32);
    // x = d * q + m
    EXPECT_EQ(v[0], -1.0f);
    EXPECT_EQ(v[15], 29.0f);
    EXPECT_EQ(v[16], 61.0f);  // 15 | 16
    EXPECT_EQ(v[17], 27.0f);  // 14
}

TEST(kernels_block_layout, Q8_1IsScaleSumThenSignedBytes) {
    std::vector<uint8_t> b = {0x00, 0x38, 0x00, 0x3c};  // d = 0.5; s (= 1) is not used to decode
    for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
    const auto v = decode_checked(tensor_type::q8_1, b, 32);
    EXPECT_EQ(v[0], -8.0f);
    EXPECT_EQ(v[31], 7.5f);
}

TEST(kernels_block_layout, Iq4NlIndexesTheNonLinearTable) {
    std::vector<uint8_t> b = {0x00, 0x3c};  // d = 1
    const auto qs = nibble_ramp();
    b.insert(b.end(), qs.begin(), qs.end());
    const auto v = decode_checked(tensor_type::iq4_nl, b, 32);
    const float table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(v[j], table[j]) << j;
        EXPECT_EQ(v[16 + j], table[15 - j]) << j;
    }
}

TEST(kernels_block_layout, Mxfp4IsE8M0ExponentThenE2M1Nibbles) {
    std::vector<uint8_t> b = {127};  // scale 2^(127 - 127) for E2M1 values
    const auto qs = nibble_ramp();
    b.insert(b.end(), qs.begin(), qs.end());
    const auto v = decode_checked(tensor_type::mxfp4, b, 32);
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};  // code 8 is -0
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(v[j], e2m1[j]) << j;
        EXPECT_EQ(v[16 + j], e2m1[15 - j]) << j;
    }
    // Extreme exponents: e = 1 scales by 2^-127 (an f32 subnormal, as ggml reads it).
    b[0] = 1;
    EXPECT_EQ(decode_checked(tensor_type::mxfp4, b, 32)[7], 6.0f * 0x1p-126f);
    b[0] = 254;
    EXPECT_EQ(decode_checked(tensor_type::mxfp4, b, 32)[1], 0x1p126f);
}

// scales[j] = sc_j | m_j << 4 with sc_j = j % 15 + 1, m_j = j; d = 0.5, dmin = 0.25;
// qs[i] = i, so value 128h + 32k + l has q = ((32h + l) >> 2k) & 3.
TEST(kernels_block_layout, Q2_KTwoBitCodesFourBitScalesAndMins) {
    std::vector<uint8_t> b;
    for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>((j % 15 + 1) | (j << 4)));
    for (int i = 0; i < 64; ++i) b.push_back(static_cast<uint8_t>(i));
    b.insert(b.end(), {0x00, 0x38, 0x00, 0x34});
    const auto v = decode_checked(tensor_type::q2_k, b, 256);
    // value = (d * sc) * q - dmin * m
    EXPECT_EQ(v[0], 0.5f * 1 * 0 - 0.25f * 0);
    EXPECT_EQ(v[3], 0.5f * 1 * 3 - 0);       // qs[3] & 3
    EXPECT_EQ(v[17], 0.5f * 2 * 1 - 0.25f);  // sub-block 1: qs[17] = 0b10001 -> 1
    EXPECT_EQ(v[45], 0.5f * 3 * 3 - 0.5f);   // k = 1: (qs[13] >> 2) & 3 = 3
    EXPECT_EQ(v[127], 0.5f * 8 * 0 - 1.75f); // k = 3: (qs[31] >> 6) & 3 = 0
    EXPECT_EQ(v[255], 0.5f * 1 * 0 - 3.75f); // sub-block 15 (sc 1, m 15): (qs[63] >> 6) = 0
    EXPECT_EQ(v[190], 0.5f * 12 * 3 - 2.75f); // h 1, k 1, l 30: (62 >> 2) & 3 = 3, sub-block 11
    for (int e = 0; e < 256; ++e) {
        const int j = e / 16, q = ((32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
        EXPECT_EQ(v[e], 0.5f * static_cast<float>(j % 15 + 1) * static_cast<float>(q) - 0.25f * static_cast<float>(j)) << e;
    }
}

// hmask[0] = 0 and every other hmask byte 0xff; qs bytes 0x1b (2-bit fields 3, 2, 1, 0
// for k = 0..3); scales: byte 0 = 0x21, byte 8 = 0xe4, the rest 0, which decode (by
// hand) to s_0 = 1, s_4 = 16, s_8 = 34, s_12 = 48 and 0 elsewhere; d = 1.
TEST(kernels_block_layout, Q3_KHighBitMaskAndSixBitScales) {
    std::vector<uint8_t> b(32, 0xff);
    b[0] = 0x00;
    b.insert(b.end(), 64, 0x1b);
    std::vector<uint8_t> scales(12, 0);
    scales[0] = 0x21;
    scales[8] = 0xe4;
    b.insert(b.end(), scales.begin(), scales.end());
    b.insert(b.end(), {0x00, 0x3c});
    const auto v = decode_checked(tensor_type::q3_k, b, 256);
    // value = (d * (s - 32)) * (low + 4 * high - 4)
    EXPECT_EQ(v[0], -31.0f * -1);    // low 3, hmask[0] bit 0 clear
    EXPECT_EQ(v[1], -31.0f * 3);     // hmask[1] bit 0 set
    EXPECT_EQ(v[20], -32.0f * 3);    // sub-block 1, s = 0
    EXPECT_EQ(v[64], -16.0f * -3);   // k = 2: low 1, hmask[0] bit 2 clear
    EXPECT_EQ(v[65], -16.0f * 1);
    EXPECT_EQ(v[128], 2.0f * -1);    // second half, sub-block 8: low 3, hmask[0] bit 4 clear
    EXPECT_EQ(v[200], 16.0f * 1);    // k = 2, l = 8: low 1, hmask[8] bit 6 set; sub-block 12
    EXPECT_EQ(v[255], -32.0f * 0);   // k = 3: low 0, bit 7 set -> 0
}

// Q4_K's scale bytes and nibbles (q4_k_test_block), with qh[l] = 0x55 for even l and
// 0xaa for odd l: the fifth bit (bit 2g of qh[l] for low nibbles, 2g + 1 for high) is
// set on even l in low-nibble sub-blocks and odd l in high-nibble ones.
TEST(kernels_block_layout, Q5_KAddsAFifthBitPerValueToQ4_K) {
    const auto q4 = q4_k_test_block();
    std::vector<uint8_t> b(q4.begin(), q4.begin() + 16);
    for (int l = 0; l < 32; ++l) b.push_back(l % 2 == 0 ? 0x55 : 0xaa);
    b.insert(b.end(), q4.begin() + 16, q4.end());
    const auto v = decode_checked(tensor_type::q5_k, b, 256);
    EXPECT_EQ(v[0], 1 * 16 - 0.5f * 5);    // low nibble 0, l = 0 even: + 16
    EXPECT_EQ(v[1], 1 * 1 - 0.5f * 5);     // low nibble 1, l = 1 odd
    EXPECT_EQ(v[33], 2 * 30 - 0.5f * 6);   // high nibble of qs[1] = 14, l = 1 odd: + 16
    const int sc[8] = {1, 2, 3, 4, 17, 35, 53, 7};
    const int m[8] = {5, 6, 7, 8, 2, 20, 38, 56};
    for (int e = 0; e < 256; ++e) {
        const int byte_index = 32 * (e / 64) + e % 32;
        const bool low = (e % 64) < 32;
        const int l = e % 32;
        const int q = (low ? byte_index % 16 : 15 - byte_index % 16) + ((l % 2 == 0) == low ? 16 : 0);
        EXPECT_EQ(v[e], static_cast<float>(sc[e / 32] * q) - 0.5f * static_cast<float>(m[e / 32])) << e;
    }
}

// d = 1, scales ls_j = 20 + 3j (bytes worked out by hand: scales_l 0x74 0xda 0x30 0x96,
// scales_h 0xaa55), qs of sub-block j = nibble_ramp().
TEST(kernels_block_layout, Iq4XsSixBitScalesAndTableIndices) {
    std::vector<uint8_t> b = {0x00, 0x3c, 0x55, 0xaa, 0x74, 0xda, 0x30, 0x96};
    const auto qs = nibble_ramp();
    for (int j = 0; j < 8; ++j) b.insert(b.end(), qs.begin(), qs.end());
    const auto v = decode_checked(tensor_type::iq4_xs, b, 256);
    const float table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    EXPECT_EQ(v[0], -12.0f * -127);
    EXPECT_EQ(v[47], -9.0f * 113);
    EXPECT_EQ(v[255], 9.0f * -127);
    for (int e = 0; e < 256; ++e) {
        const int j = e / 32, i = e % 32;
        EXPECT_EQ(v[e], static_cast<float>(3 * j - 12) * table[i < 16 ? i : 31 - i]) << e;
    }
}

TEST(kernels_block_layout, Q8_KIsF32ScaleSignedBytesThenSums) {
    std::vector<uint8_t> b = {0x00, 0x00, 0x00, 0x3f};  // d = 0.5 (f32)
    for (int j = 0; j < 256; ++j) b.push_back(static_cast<uint8_t>(j));  // int8: 0..127, -128..-1
    b.resize(q8_k_block_bytes, 0);  // bsums are not used to decode
    const auto v = decode_checked(tensor_type::q8_k, b, 256);
    EXPECT_EQ(v[1], 0.5f);
    EXPECT_EQ(v[127], 63.5f);
    EXPECT_EQ(v[128], -64.0f);
    EXPECT_EQ(v[255], -0.5f);
}

}  // namespace
}  // namespace skippy::kernels
