#include "runtime/sampler.h"
#include "sampling_configs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <random>

namespace skippy {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

sampling_config plain(float temperature, uint64_t seed = 1) { return skippy::testing::plain_sampling(temperature, seed); }

// Draw counts of each token over n samples from fresh copies of `logits`.
std::map<token_id, int> histogram(sampler & s, const std::vector<float> & logits, int n) {
    std::map<token_id, int> counts;
    for (int i = 0; i < n; ++i) {
        auto copy = logits;
        ++counts[s.sample(copy)];
    }
    return counts;
}

TEST(sampler, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
    sampler s(plain(0.0f));
    auto l = logits_of({0.1f, 2.0f, -1.0f, 2.0f});
    EXPECT_EQ(s.sample(l), 1);
}

TEST(sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
    const auto l = logits_of({1.0f, 1.1f, 0.9f, 1.05f, 0.95f});
    sampler a(plain(1.0f, 42)), b(plain(1.0f, 42)), c(plain(1.0f, 43));
    std::vector<token_id> ta, tb, tc;
    for (int i = 0; i < 64; ++i) {
        auto la = l, lb = l, lc = l;
        ta.push_back(a.sample(la));
        tb.push_back(b.sample(lb));
        tc.push_back(c.sample(lc));
    }
    EXPECT_EQ(ta, tb);
    EXPECT_NE(ta, tc);
}

TEST(sampler, TemperatureOneFollowsTheSoftmax) {
    sampler s(plain(1.0f, 7));
    const auto l = logits_of({0.0f, std::log(3.0f)});  // probabilities 1/4, 3/4
    auto counts = histogram(s, l, 20000);
    EXPECT_NEAR(counts[1] / 20000.0, 0.75, 0.02);
}

TEST(sampler, TopKKeepsOnlyTheKBest) {
    auto c = plain(1.0f, 3);
    c.top_k = 2;
    sampler s(c);
    auto counts = histogram(s, logits_of({3.0f, 2.9f, 2.8f, 2.7f}), 2000);
    EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
    EXPECT_GT(counts[0], 0);
    EXPECT_GT(counts[1], 0);
}

TEST(sampler, TopPCutsTheTailAfterTheCumulativeMass) {
    auto c = plain(1.0f, 5);
    c.top_p = 0.5f;
    sampler s(c);
    // probabilities ~ 0.47, 0.32, 0.21: top_p 0.5 keeps the first two
    auto counts = histogram(s, logits_of({std::log(0.47f), std::log(0.32f), std::log(0.21f)}), 3000);
    EXPECT_EQ(counts.count(2), 0u);
    EXPECT_GT(counts[1], 0);
}

TEST(sampler, MinPDropsTokensBelowAFractionOfTheBest) {
    auto c = plain(1.0f, 9);
    c.min_p = 0.5f;
    sampler s(c);
    // relative probabilities 1, 0.6, 0.4: min_p 0.5 keeps the first two
    auto counts = histogram(s, logits_of({0.0f, std::log(0.6f), std::log(0.4f)}), 3000);
    EXPECT_EQ(counts.count(2), 0u);
    EXPECT_GT(counts[1], 0);
}

TEST(sampler, PenaltiesLowerRecentTokens) {
    auto c = plain(0.0f);
    c.repeat_penalty = 2.0f;
    sampler s(c);
    s.accept(0);
    auto l = logits_of({2.0f, 1.5f});  // 2.0 / 2 = 1.0 < 1.5
    EXPECT_EQ(s.sample(l), 1);

    auto f = plain(0.0f);
    f.frequency_penalty = 0.3f;
    sampler sf(f);
    sf.accept(0);
    sf.accept(0);
    auto l2 = logits_of({2.0f, 1.5f});  // 2.0 - 2 * 0.3 = 1.4 < 1.5
    EXPECT_EQ(sf.sample(l2), 1);

    auto p = plain(0.0f);
    p.presence_penalty = 0.6f;
    p.penalty_last_n = 1;  // only the last token counts
    sampler sp(p);
    sp.accept(0);
    sp.accept(1);
    auto l3 = logits_of({2.0f, 1.5f});
    EXPECT_EQ(sp.sample(l3), 0);
}

TEST(sampler, LogitBiasIsAdded) {
    auto c = plain(0.0f);
    c.logit_bias = {{1, 5.0f}, {99, 1.0f}};  // out-of-vocabulary ids are ignored
    sampler s(c);
    auto l = logits_of({2.0f, -2.0f});
    EXPECT_EQ(s.sample(l), 1);
}

TEST(sampler, ValidationNamesTheBadField) {
    auto c = plain(1.0f);
    EXPECT_TRUE(c.validate().is_ok());
    c.top_p = 0.0f;
    EXPECT_NE(c.validate().message().find("top_p"), std::string::npos);
    c = plain(NAN);
    EXPECT_NE(c.validate().message().find("temperature"), std::string::npos);
    c = plain(1.0f);
    c.repeat_penalty = 0.0f;
    EXPECT_NE(c.validate().message().find("repeat_penalty"), std::string::npos);
    c = plain(1.0f);
    c.logit_bias = {{-1, 1.0f}};
    EXPECT_FALSE(c.validate().is_ok());
    // What the wire refuses, a whole-model run refuses too.
    for (float bias : {NAN, INFINITY, -INFINITY}) {
        c.logit_bias = {{1, bias}};
        EXPECT_NE(c.validate().message().find("logit_bias"), std::string::npos) << bias;
    }
    c.logit_bias = {{1, -1e30f}};
    EXPECT_TRUE(c.validate().is_ok());
}

}  // namespace
}  // namespace skippy

namespace skippy {
namespace {

TEST(sampler, HistoryReplacesTheWindowWithTheSequenceTail) {
    sampling_config c;
    c.temperature = 0;
    c.repeat_penalty = 4.0f;
    c.penalty_last_n = 2;
    sampler s(c);
    s.accept(0);
    const std::vector<token_id> seq = {0, 0, 1, 2};  // the window is the last two: {1, 2}
    s.set_history(seq);
    std::vector<float> l = {3.0f, 2.0f, 0.0f};  // token 1 penalized to 0.5; token 0 no longer is
    EXPECT_EQ(s.sample(l), 0);
}

}  // namespace
}  // namespace skippy

namespace skippy {
namespace {

// top_candidates is the first k of the whole vocabulary sorted by (logit descending, id
// ascending), on logits full of ties (a few distinct values, -0 and +0, -infinity as a
// grammar mask leaves them), for k from 1 to the vocabulary size.
TEST(top_candidates, AreTheFirstKOfTheFullSortOrderWithTiesByLowerId) {
    std::mt19937 rng(11);
    const float levels[] = {-std::numeric_limits<float>::infinity(), -2.0f, -0.0f, 0.0f, 0.5f, 3.0f, 3.0f};
    std::vector<std::pair<float, token_id>> got;
    for (int trial = 0; trial < 300; ++trial) {
        const size_t n_vocab = 1 + rng() % 400;
        std::vector<float> logits(n_vocab);
        for (auto & l : logits) l = trial % 3 == 0 ? std::uniform_real_distribution<float>(-5, 5)(rng) : levels[rng() % std::size(levels)];
        std::vector<std::pair<float, token_id>> all;
        for (size_t i = 0; i < n_vocab; ++i) all.emplace_back(logits[i], static_cast<token_id>(i));
        std::sort(all.begin(), all.end(), [](const auto & a, const auto & b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
        for (size_t k : {size_t{1}, size_t{2}, size_t{40}, n_vocab / 2 + 1, n_vocab}) {
            if (k > n_vocab) continue;
            top_candidates(logits, k, got);
            ASSERT_EQ(got.size(), k);
            for (size_t i = 0; i < k; ++i) {
                ASSERT_EQ(got[i].second, all[i].second) << "trial " << trial << ", k " << k << ", rank " << i;
                ASSERT_EQ(std::signbit(got[i].first), std::signbit(all[i].first));
            }
        }
    }
}

}  // namespace
}  // namespace skippy
