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

std::vector<float> decode(tensor_type t, const std::vector<uint8_t> & bytes, int64_t n) {
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
}

TEST(kernels_block_layout, F32IsLittleEndianIeee) {
    const std::vector<uint8_t> bytes = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x20, 0xc1};
    const auto v = decode(tensor_type::f32, bytes, 2);
    EXPECT_EQ(v[0], 1.5f);
    EXPECT_EQ(v[1], -10.0f);
}

TEST(kernels_block_layout, F16AndBf16AreLittleEndian) {
    const std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b};
    const auto h = decode(tensor_type::f16, f16, 4);
    EXPECT_EQ(h[0], 1.0f);
    EXPECT_EQ(h[1], -2.0f);
    EXPECT_EQ(h[2], 0x1p-24f);
    EXPECT_EQ(h[3], 65504.0f);
    const std::vector<uint8_t> bf16 = {0x80, 0x3f, 0xc0, 0xbf};
    const auto b = decode(tensor_type::bf16, bf16, 2);
    EXPECT_EQ(b[0], 1.0f);
    EXPECT_EQ(b[1], -1.5f);
}

TEST(kernels_block_layout, Q8_0IsF16ScaleThenSignedBytes) {
    std::vector<uint8_t> block = {0x00, 0x38};  // d = 0.5
    for (int j = 0; j < 32; ++j) block.push_back(static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128)));
    const auto v = decode(tensor_type::q8_0, block, 32);
    EXPECT_EQ(v[0], -64.0f);   // -128 * 0.5
    EXPECT_EQ(v[16], 0.0f);
    EXPECT_EQ(v[17], 4.0f);
    EXPECT_EQ(v[31], 60.0f);   // 120 * 0.5
}

TEST(kernels_block_layout, Q4_0LowNibblesAreTheFirstHalf) {
    std::vector<uint8_t> block = {0x00, 0x40};  // d = 2
    for (int j = 0; j < 16; ++j) block.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
    const auto v = decode(tensor_type::q4_0, block, 32);
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
    const auto v = decode(tensor_type::q4_k, q4_k_test_block(), 256);
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
    const auto v = decode(tensor_type::q4_k, two, 512);
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
    const auto v = decode(tensor_type::q6_k, b, 256);
    // value = d * scale[e / 16] * (q - 32)
    EXPECT_EQ(v[0], 0.25f * 3 * -32);     // ql[0] low = 0, high bits 0 -> q = 0
    EXPECT_EQ(v[37], 0.25f * 5 * -11);    // ql[37] = 0x25 low = 5, high 1 -> q = 21
    EXPECT_EQ(v[90], 0.25f * -7 * 1);     // ql[26] = 0x1a high = 1, high bits 2 -> q = 33
    EXPECT_EQ(v[127], 0.25f * -9 * 19);   // ql[63] = 0x3f high = 3, high bits 3 -> q = 51
    EXPECT_EQ(v[200], 0.25f * 127 * 4);   // second half: ql[72] = 0x48 high = 4, bits 2 -> 36
    EXPECT_EQ(v[210], 0.25f * -128 * 5);  // ql[82] = 0x52 high = 5, bits 2 -> 37
    EXPECT_EQ(v[255], 0.25f * -1 * 23);   // ql[127] = 0x7f high = 7, bits 3 -> 55
}

TEST(kernels_block_layout, Q8_KIsF32ScaleSignedBytesThenSums) {
    std::vector<uint8_t> b = {0x00, 0x00, 0x00, 0x3f};  // d = 0.5 (f32)
    for (int j = 0; j < 256; ++j) b.push_back(static_cast<uint8_t>(j));  // int8: 0..127, -128..-1
    b.resize(q8_k_block_bytes, 0);  // bsums are not used to decode
    const auto v = decode(tensor_type::q8_k, b, 256);
    EXPECT_EQ(v[1], 0.5f);
    EXPECT_EQ(v[127], 63.5f);
    EXPECT_EQ(v[128], -64.0f);
    EXPECT_EQ(v[255], -0.5f);
}

}  // namespace
}  // namespace skippy::kernels
