#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace skippy {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) {
    return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto & b : out) b = static_cast<uint8_t>(rng());
    return out;
}

// The check value of the CRC catalogue and the examples of RFC 3720 §B.4.
TEST(crc32c, MatchesThePublishedValues) {
    std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), ascending(32), descending(32);
    for (int i = 0; i < 32; ++i) {
        ascending[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
        descending[static_cast<size_t>(i)] = static_cast<uint8_t>(31 - i);
    }
    using crc32c_detail::crc32c_reference;
    EXPECT_EQ(crc32c_reference(bytes_of("123456789")), 0xE3069283u);
    EXPECT_EQ(crc32c_reference(zeros), 0x8A9136AAu);
    EXPECT_EQ(crc32c_reference(ones), 0x62A8AB43u);
    EXPECT_EQ(crc32c_reference(ascending), 0x46DD794Eu);
    EXPECT_EQ(crc32c_reference(descending), 0x113FDB5Cu);
    EXPECT_EQ(crc32c_reference({}), 0u);
    EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
    EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

// Lengths around the fast path's word size and its three-lane group (3 x 32 KiB), at
// every alignment of the start.
TEST(crc32c, HardwarePathEqualsTheReference) {
    if (!crc32c_detail::has_crc32_instruction()) {
        GTEST_SKIP() << "this CPU has no SSE4.2 CRC32 instruction; the reference path is the one that runs";
    }
    const std::vector<uint8_t> data = random_bytes(4 * 98304 + 64, 7);
    const size_t group = 3 * 32768;
    std::vector<size_t> lengths = {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 4095, 4096, 32768,
                                   group - 1, group, group + 1, group + 7, 2 * group, 2 * group + 13, 4 * group};
    std::mt19937 rng(11);
    for (int i = 0; i < 40; ++i) lengths.push_back(rng() % (4 * group));
    for (size_t len : lengths) {
        for (size_t offset = 0; offset < 8; ++offset) {
            const std::span<const uint8_t> s(data.data() + offset, len);
            ASSERT_EQ(crc32c_detail::crc32c_hardware(s), crc32c_detail::crc32c_reference(s)) << len << " at +" << offset;
            ASSERT_EQ(crc32c_detail::crc32c_hardware(s, 0x12345678u), crc32c_detail::crc32c_reference(s, 0x12345678u));
        }
    }
}

TEST(crc32c, ChainsAndCombines) {
    const std::vector<uint8_t> data = random_bytes(300000, 3);
    const std::span<const uint8_t> all(data);
    const uint32_t whole = crc32c(all);
    for (size_t cut : {size_t{0}, size_t{1}, size_t{1000}, size_t{98304}, size_t{150001}, data.size()}) {
        const auto a = all.first(cut);
        const auto b = all.subspan(cut);
        EXPECT_EQ(crc32c(b, crc32c(a)), whole) << cut;
        EXPECT_EQ(crc32c_detail::crc32c_combine(crc32c(a), crc32c(b), b.size()), whole) << cut;
    }
}

// What the checksum is for: one flipped bit anywhere in a page is seen, and so is any
// burst of up to 32 bits.
TEST(crc32c, SeesEveryFlippedBitAndShortBurst) {
    std::vector<uint8_t> data = random_bytes(200000, 5);
    const uint32_t good = crc32c(data);
    std::mt19937 rng(9);
    for (int i = 0; i < 2000; ++i) {
        const size_t at = rng() % data.size();
        const uint8_t mask = static_cast<uint8_t>(1u << (rng() % 8));
        data[at] ^= mask;
        EXPECT_NE(crc32c(data), good) << "bit flip at byte " << at;
        data[at] ^= mask;
    }
    for (int i = 0; i < 200; ++i) {
        const size_t at = rng() % (data.size() - 4);
        const uint32_t burst = static_cast<uint32_t>(rng()) | 1u;
        for (size_t k = 0; k < 4; ++k) data[at + k] ^= static_cast<uint8_t>(burst >> (8 * k));
        EXPECT_NE(crc32c(data), good) << "burst at byte " << at;
        for (size_t k = 0; k < 4; ++k) data[at + k] ^= static_cast<uint8_t>(burst >> (8 * k));
    }
    EXPECT_EQ(crc32c(data), good);
}

}  // namespace
}  // namespace skippy
