// Token log-probabilities (compute_logprobs, lane_sampler with n_logprobs): the values
// against a direct double computation on random logits, the top-N order and its ties,
// masked tokens never listed, the grammar's mask applied, tokens unchanged by asking,
// and nothing computed when not asked for.
#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "runtime/step.h"
#include "sampling_configs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace skippy {
namespace {

sampling_config config(float temperature, int32_t n_logprobs, uint64_t seed = 5) {
    sampling_config c = skippy::testing::plain_sampling(temperature, seed);
    c.n_logprobs = n_logprobs;
    return c;
}

// The direct computation: log(exp(l_i) / sum_j exp(l_j)), in long double, no tricks.
std::vector<long double> reference(const std::vector<float> & logits) {
    long double m = -INFINITY;
    for (float l : logits) m = std::max<long double>(m, l);
    long double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<long double>(l) - m);
    std::vector<long double> out;
    for (float l : logits) out.push_back(static_cast<long double>(l) - m - std::log(sum));
    return out;
}

TEST(logprobs, MatchADirectComputationOnRandomLogits) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 50; ++trial) {
        const size_t n_vocab = 1 + rng() % 3000;
        std::normal_distribution<float> d(0.0f, 1.0f + static_cast<float>(trial));
        std::vector<float> logits(n_vocab);
        for (float & l : logits) l = d(rng) + 1000.0f * static_cast<float>(trial % 3 == 0);  // large offsets too
        const auto ref = reference(logits);
        const token_id sampled = static_cast<token_id>(rng() % n_vocab);
        token_logprobs out;
        compute_logprobs(logits, sampled, 20, out);
        EXPECT_NEAR(out.sampled, static_cast<double>(ref[static_cast<size_t>(sampled)]), 1e-5 + 1e-6 * std::fabs(static_cast<double>(ref[static_cast<size_t>(sampled)])));
        ASSERT_EQ(out.top.size(), std::min<size_t>(20, n_vocab));
        double total = 0;
        for (const auto & e : out.top) {
            EXPECT_LE(e.logprob, 0.0f);
            EXPECT_NEAR(e.logprob, static_cast<double>(ref[static_cast<size_t>(e.id)]), 1e-5 + 1e-6 * std::fabs(static_cast<double>(ref[static_cast<size_t>(e.id)])));
            total += std::exp(static_cast<double>(e.logprob));
        }
        EXPECT_LE(total, 1.0 + 1e-6);
        // The top entries are the best by (logit desc, id asc).
        std::vector<token_id> ids(n_vocab);
        std::iota(ids.begin(), ids.end(), 0);
        std::stable_sort(ids.begin(), ids.end(), [&](token_id a, token_id b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
        for (size_t i = 0; i < out.top.size(); ++i) EXPECT_EQ(out.top[i].id, ids[i]) << "rank " << i;
    }
}

TEST(logprobs, TiesGoToTheLowerIdAndTheOrderIsByLogprob) {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 3.0f, 0.5f};
    token_logprobs out;
    compute_logprobs(logits, 6, 4, out);
    ASSERT_EQ(out.top.size(), 4u);
    EXPECT_EQ(out.top[0].id, 1);
    EXPECT_EQ(out.top[1].id, 3);
    EXPECT_EQ(out.top[2].id, 5);
    EXPECT_EQ(out.top[3].id, 2);
    EXPECT_EQ(out.top[0].logprob, out.top[1].logprob);  // same logit: same bits
    EXPECT_GT(out.top[2].logprob, out.top[3].logprob);
    EXPECT_LT(out.sampled, out.top[3].logprob);
}

TEST(logprobs, MaskedTokensAreNeverListedAndDoNotCount) {
    const float banned = -std::numeric_limits<float>::infinity();
    const std::vector<float> logits = {banned, 0.0f, banned, 0.0f, banned};
    token_logprobs out;
    compute_logprobs(logits, 3, 20, out);
    ASSERT_EQ(out.top.size(), 2u);
    EXPECT_EQ(out.top[0].id, 1);
    EXPECT_EQ(out.top[1].id, 3);
    EXPECT_FLOAT_EQ(out.sampled, -std::log(2.0f));
}

TEST(logprobs, TheBitsDependOnTheLogitsAlone) {
    std::mt19937 rng(2);
    std::normal_distribution<float> d(0.0f, 4.0f);
    std::vector<float> logits(5000);
    for (float & l : logits) l = d(rng);
    token_logprobs a, b;
    compute_logprobs(logits, 7, 20, a);
    compute_logprobs(logits, 7, 20, b);
    EXPECT_EQ(a, b);
}

TEST(logprobs, TheLaneSamplerReportsTheSampledTokenAndLeavesTheTokensAlone) {
    std::mt19937 rng(9);
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (float temperature : {0.0f, 0.9f}) {
        lane_sampler with(config(temperature, 5)), without(config(temperature, 0));
        const token_id prompt[] = {1, 2};
        with.track(0, prompt);
        without.track(0, prompt);
        for (int step = 0; step < 100; ++step) {
            std::vector<float> l(64);
            for (float & v : l) v = d(rng);
            l[3] += 2.0f;
            auto a = l, b = l;
            token_logprobs lp, none;
            none.top.push_back({1, -1.0f});  // cleared when not asked for
            auto t = with.sample(a, &lp);
            auto u = without.sample(b, &none);
            ASSERT_TRUE(t.is_ok() && u.is_ok());
            EXPECT_EQ(*t, *u);
            EXPECT_TRUE(none.empty());
            ASSERT_EQ(lp.top.size(), 5u);
            token_logprobs direct;
            compute_logprobs(l, *t, 5, direct);  // no bias or penalties configured
            EXPECT_EQ(lp, direct);
            if (temperature == 0.0f) {
                EXPECT_EQ(lp.top[0].id, *t);  // greedy: the sampled token is the best
                EXPECT_EQ(lp.top[0].logprob, lp.sampled);
            }
            const token_id one[] = {*t};
            with.track(2 + step, one);
            without.track(2 + step, one);
        }
    }
}

TEST(logprobs, TheDistributionIsAfterLogitBias) {
    auto c = config(0.0f, 3);
    c.logit_bias = {{0, 5.0f}};
    lane_sampler s(c);
    std::vector<float> l = {0.0f, 1.0f, 2.0f};
    token_logprobs lp;
    auto t = s.sample(l, &lp);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(*t, 0);
    token_logprobs direct;
    compute_logprobs(std::vector<float>{5.0f, 1.0f, 2.0f}, 0, 3, direct);
    EXPECT_EQ(lp, direct);
}

TEST(logprobs, UnderAGrammarRefusedTokensAreMaskedEvenWhenTheFavouriteIsAllowed) {
    const std::vector<std::string> token_pieces = {"", "a", "b", "c"};
    auto trie = grammar::token_trie::build(token_pieces, {0});
    ASSERT_TRUE(trie.is_ok());
    constraint_cache cache(*trie);
    auto c = config(0.0f, 4);
    c.grammar = "root ::= \"a\" | \"b\"";
    auto s = lane_sampler::make(c, &cache);
    ASSERT_TRUE(s.is_ok()) << s.error().to_string();
    const token_id prompt[] = {3};
    (*s)->track(0, prompt);
    std::vector<float> l = {0.0f, 3.0f, 1.0f, 2.0f};  // the favourite "a" is allowed
    token_logprobs lp;
    auto t = (*s)->sample(l, &lp);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(*t, 1);
    EXPECT_EQ((*s)->n_masked_draws(), 0u);  // the draw itself needed no mask
    ASSERT_EQ(lp.top.size(), 2u);           // only "a" and "b" may follow
    EXPECT_EQ(lp.top[0].id, 1);
    EXPECT_EQ(lp.top[1].id, 2);
    EXPECT_FLOAT_EQ(lp.sampled, static_cast<float>(3.0 - std::log(std::exp(3.0) + std::exp(1.0))));
}

TEST(logprobs, NLogprobsIsValidated) {
    auto c = config(0.0f, 20);
    EXPECT_TRUE(c.validate().is_ok());
    c.n_logprobs = 21;
    auto st = c.validate();
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("n_logprobs"), std::string::npos);
    c.n_logprobs = -1;
    EXPECT_EQ(c.validate().code(), error_code::invalid_argument);
}

}  // namespace
}  // namespace skippy
