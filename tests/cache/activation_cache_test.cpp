// Activation cache: byte-limited LRU keyed by (prefix, tokens, width).
#include "cache/activation_cache.h"

#include <gtest/gtest.h>

namespace skippy::cache {
namespace {

activation_key key(uint8_t b, int64_t n = 4, int32_t w = 8) {
    activation_key k;
    k.prefix.bytes.fill(b);
    k.n_tokens = n;
    k.width = w;
    return k;
}

TEST(activation_cache, StoresAndReturnsFrames) {
    activation_cache c(100);
    ASSERT_TRUE(c.store(key(1), std::vector<uint8_t>(10, 7)));
    auto f = c.lookup(key(1));
    ASSERT_TRUE(f);
    EXPECT_EQ(f->size(), 10u);
    EXPECT_FALSE(c.lookup(key(1, 4, 16)));  // other width
    EXPECT_FALSE(c.lookup(key(1, 5)));      // other length
    EXPECT_EQ(c.stats().n_hits, 1);
    EXPECT_EQ(c.stats().n_misses, 2);
}

TEST(activation_cache, EvictsLeastRecentlyUsedToFit) {
    activation_cache c(30);
    c.store(key(1), std::vector<uint8_t>(10));
    c.store(key(2), std::vector<uint8_t>(10));
    c.store(key(3), std::vector<uint8_t>(10));
    c.lookup(key(1));  // 2 is now the oldest
    c.store(key(4), std::vector<uint8_t>(10));
    EXPECT_TRUE(c.contains(key(1)));
    EXPECT_FALSE(c.contains(key(2)));
    EXPECT_EQ(c.stats().n_bytes, 30);
    EXPECT_EQ(c.stats().n_evictions, 1);
}

TEST(activation_cache, ZeroCapacityIsOff) {
    activation_cache c(0);
    EXPECT_FALSE(c.enabled());
    EXPECT_FALSE(c.store(key(1), std::vector<uint8_t>(1)));
    EXPECT_FALSE(c.lookup(key(1)));
}

TEST(activation_cache, FrameLargerThanTheCapacityIsRefused) {
    activation_cache c(8);
    c.store(key(1), std::vector<uint8_t>(4));
    EXPECT_FALSE(c.store(key(2), std::vector<uint8_t>(9)));
    EXPECT_TRUE(c.contains(key(1)));  // nothing evicted for it
    EXPECT_EQ(c.stats().n_refused, 1);
}

TEST(activation_cache, ReplacingAFrameKeepsTheByteCountExact) {
    activation_cache c(100);
    c.store(key(1), std::vector<uint8_t>(10));
    c.store(key(1), std::vector<uint8_t>(20));
    EXPECT_EQ(c.stats().n_entries, 1);
    EXPECT_EQ(c.stats().n_bytes, 20);
}

TEST(activation_cache, AFrameHandedOutSurvivesEviction) {
    activation_cache c(10);
    c.store(key(1), std::vector<uint8_t>(10, 3));
    auto f = c.lookup(key(1));
    c.store(key(2), std::vector<uint8_t>(10));
    EXPECT_FALSE(c.contains(key(1)));
    EXPECT_EQ((*f)[9], 3);
}

}  // namespace
}  // namespace skippy::cache
