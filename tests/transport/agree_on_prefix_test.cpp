// agree_on_prefix (docs/kv-cache.md §10, step 2): the prefix length a stage and the
// stages below it can all restore, when some restore only at whole checkpoints.
#include "transport/lane_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace skippy::transport {
namespace {

// A stage that restores any length up to `max` (KV) or only the lengths it stored
// (checkpoints): the longest it holds of what it is asked.
struct fake_stage {
    int64_t           max = 0;
    std::set<int64_t> checkpoints;  // empty: KV, any length up to max
    int               asked = 0;
    int64_t operator()(int64_t n) {
        ++asked;
        if (checkpoints.empty()) return std::min(n, max);
        int64_t best = 0;
        for (int64_t c : checkpoints) {
            if (c <= n) best = c;
        }
        return best;
    }
};

TEST(agree_on_prefix, AKvOnlyChainAgreesOnTheFirstTrip) {
    fake_stage here{90, {}}, below{60, {}};
    int trips = 0;
    auto r = agree_on_prefix(99, 8, std::ref(here), [&](int64_t n) -> result<int64_t> { ++trips; return below(n); });
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 60);
    EXPECT_EQ(trips, 1);
    EXPECT_EQ(here.asked, 2) << "asked once more for 60, which it holds";
}

TEST(agree_on_prefix, CheckpointsThatDifferMeetAtTheLongestCommonOne) {
    // Here: 64, 128, 180; below: 64, 128, 179. Below answers 179, which here lacks;
    // here answers 128 for it, below holds 128.
    fake_stage here{0, {64, 128, 180}}, below{0, {64, 128, 179}};
    int trips = 0;
    auto r = agree_on_prefix(199, 32, std::ref(here), [&](int64_t n) -> result<int64_t> { ++trips; return below(n); });
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 128);
    EXPECT_EQ(trips, 2);
}

TEST(agree_on_prefix, NothingInCommonOrBelowMinTokensIsZero) {
    fake_stage here{0, {64}}, below{0, {60}};
    auto r = agree_on_prefix(99, 8, std::ref(here), [&](int64_t n) -> result<int64_t> { return below(n); });
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 0);
    fake_stage short_here{20, {}};
    int trips = 0;
    r = agree_on_prefix(99, 32, std::ref(short_here), [&](int64_t) -> result<int64_t> { ++trips; return int64_t{20}; });
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 0);
    EXPECT_EQ(trips, 0) << "nothing is asked below what this stage cannot restore";
}

TEST(agree_on_prefix, TheFinalStageAnswersAloneAndErrorsFromBelowPropagate) {
    fake_stage here{0, {16, 48}};
    auto r = agree_on_prefix(40, 8, std::ref(here), nullptr);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 16);
    r = agree_on_prefix(40, 8, std::ref(here), [](int64_t) -> result<int64_t> { return make_error(error_code::peer_closed, "gone"); });
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::peer_closed);
}

TEST(agree_on_prefix, GivesUpAfterMaxRounds) {
    // Each side always holds just one less than the other answered.
    int64_t next = 100;
    auto here = [&](int64_t n) { return std::min(n, next--); };
    auto below = [&](int64_t n) -> result<int64_t> { return std::min(n, next--); };
    auto r = agree_on_prefix(100, 8, here, below, 3);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 0);
}

}  // namespace
}  // namespace skippy::transport
