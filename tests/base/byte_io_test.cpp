#include "base/byte_io.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

TEST(byte_io, WritesLittleEndianFieldByField) {
    std::vector<uint8_t> out;
    byte_writer w(out);
    w.put_u16(0x0102);
    w.put_u32(0x03040506);
    w.put_u64(0x0708090a0b0c0d0eull);
    w.put_f32(1.0f);
    const std::vector<uint8_t> want = {0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0e, 0x0d, 0x0c, 0x0b,
                                       0x0a, 0x09, 0x08, 0x07, 0x00, 0x00, 0x80, 0x3f};
    EXPECT_EQ(out, want);
}

TEST(byte_io, ReaderRoundTripsAndFailsStickilyOnShortInput) {
    std::vector<uint8_t> out;
    byte_writer w(out);
    w.put_u32(7);
    w.put_i64(-5);
    byte_reader r(out);
    uint32_t a = 0;
    int64_t b = 0;
    ASSERT_TRUE(r.get_u32(a));
    ASSERT_TRUE(r.get_i64(b));
    EXPECT_EQ(a, 7u);
    EXPECT_EQ(b, -5);
    uint8_t c = 0;
    EXPECT_FALSE(r.get_u8(c));
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.remaining(), 0u);
}

TEST(byte_io, SpanLongerThanRemainingIsRefused) {
    std::vector<uint8_t> data(10, 1);
    byte_reader r(data);
    std::span<const uint8_t> s;
    EXPECT_FALSE(r.get_span(11, s));
    EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace skippy
