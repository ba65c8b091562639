// lane_sampler under a grammar: the output always continues the grammar, the favourite
// is kept when the grammar accepts it (no mask computed), a refused favourite is
// replaced by a draw among the allowed tokens, the end is forced once the grammar is
// done, dead ends and bad grammars are errors, and the matcher follows the lane's
// positions (a rewind starts the output again).
#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "runtime/step.h"
#include "sampling_configs.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace skippy {
namespace {

// ids: 0 "<eos>" (end of generation), then pieces.
const std::vector<std::string> pieces = {"", "a", "b", "ab", "{", "}", "\"", "x", "y", ":", ",", " ", "1", "2", "\"x\"", "z"};
constexpr token_id eos = 0;

std::shared_ptr<constraint_cache> make_cache() {
    auto trie = grammar::token_trie::build(pieces, {eos});
    EXPECT_TRUE(trie.is_ok());
    return std::make_shared<constraint_cache>(*trie);
}

sampling_config config(std::string gbnf, float temperature = 0.0f, uint64_t seed = 7) {
    sampling_config c = skippy::testing::plain_sampling(temperature, seed);
    c.grammar = std::move(gbnf);
    return c;
}

std::vector<float> favouring(token_id id) {
    std::vector<float> l(pieces.size(), 0.0f);
    l[static_cast<size_t>(id)] = 10.0f;
    return l;
}

// Runs the lane's loop: prompt {1}, then sample, track, sample ... until eos or n steps.
// logits_for(step) gives the model's logits. Returns the tokens (without eos).
struct run_result {
    std::vector<token_id> tokens;
    bool                  ended = false;
    status                error;
};

template <typename F>
run_result generate(lane_sampler & s, int max_steps, F logits_for) {
    run_result out;
    const token_id prompt[] = {1, 2};
    s.track(0, prompt);
    int64_t pos = 2;
    for (int step = 0; step < max_steps; ++step) {
        std::vector<float> l = logits_for(step);
        auto t = s.sample(l);
        if (!t.is_ok()) {
            out.error = t.error();
            return out;
        }
        if (*t == eos) {
            out.ended = true;
            return out;
        }
        out.tokens.push_back(*t);
        const token_id one[] = {*t};
        s.track(pos++, one);
    }
    return out;
}

std::string text_of(const std::vector<token_id> & ids) {
    std::string t;
    for (token_id id : ids) t += pieces[static_cast<size_t>(id)];
    return t;
}

TEST(constrained_sampler, WithoutAGrammarNothingChanges) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("", 0.9f), cache.get());
    ASSERT_TRUE(s.is_ok());
    EXPECT_FALSE((*s)->constrained());
    sampler plain(config("", 0.9f));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-3, 3);
    for (int i = 0; i < 200; ++i) {
        std::vector<float> l(pieces.size());
        for (float & v : l) v = d(rng);
        auto a = l, b = l;
        auto t = (*s)->sample(a);
        ASSERT_TRUE(t.is_ok());
        EXPECT_EQ(*t, plain.sample(b));
    }
    EXPECT_EQ(cache->n_cached(), 0u);
}

TEST(constrained_sampler, TheFavouriteIsKeptWhenTheGrammarAcceptsIt) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("root ::= \"a\" \"b\"+"), cache.get());
    ASSERT_TRUE(s.is_ok()) << s.error().to_string();
    ASSERT_TRUE((*s)->constrained());
    // The model wants "a", then "b" twice, then the end: all allowed.
    const token_id wanted[] = {1, 2, 2, eos};
    auto r = generate(**s, 10, [&](int step) { return favouring(wanted[step]); });
    ASSERT_TRUE(r.error.is_ok()) << r.error.to_string();
    EXPECT_TRUE(r.ended);
    EXPECT_EQ(text_of(r.tokens), "abb");
    EXPECT_EQ((*s)->n_masked_draws(), 0u);
}

TEST(constrained_sampler, ARefusedFavouriteIsReplacedByTheBestAllowedToken) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("root ::= \"{\" \"\\\"x\\\"\" \":\" [12] \"}\""), cache.get());
    ASSERT_TRUE(s.is_ok()) << s.error().to_string();
    // The model always prefers "z" (never allowed), then "2" over everything else.
    auto r = generate(**s, 20, [&](int) {
        auto l = favouring(15);
        l[13] = 5.0f;
        return l;
    });
    ASSERT_TRUE(r.error.is_ok()) << r.error.to_string();
    EXPECT_TRUE(r.ended);
    const std::string text = text_of(r.tokens);
    EXPECT_EQ(text, "{\"x\":2}");
    EXPECT_GT((*s)->n_masked_draws(), 0u);
    // Done after "}": the end was forced although the model wanted "z".
}

TEST(constrained_sampler, StochasticDrawsAlwaysParseAndRepeatWithTheSeed) {
    auto cache = make_cache();
    const std::string gbnf = grammar::gbnf_json_object();
    std::vector<std::vector<token_id>> first_runs;
    for (int pass = 0; pass < 2; ++pass) {
        for (uint64_t seed = 1; seed <= 20; ++seed) {
            auto s = lane_sampler::make(config(gbnf, 1.0f, seed), cache.get());
            ASSERT_TRUE(s.is_ok()) << s.error().to_string();
            std::mt19937 rng(static_cast<uint32_t>(seed));
            std::uniform_real_distribution<float> d(-2, 2);
            auto r = generate(**s, 60, [&](int step) {
                std::vector<float> l(pieces.size());
                for (float & v : l) v = d(rng);
                // Lean towards closing after a while, so that most runs end.
                if (step > 8) l[5] += 4.0f, l[eos] += 4.0f, l[6] += 2.0f;
                return l;
            });
            ASSERT_TRUE(r.error.is_ok()) << r.error.to_string();
            const std::string text = text_of(r.tokens);
            auto m = grammar::matcher(*grammar::compile(gbnf));
            EXPECT_TRUE(m.accepts(text)) << text;
            if (r.ended) {
                auto v = nlohmann::json::parse(text, nullptr, false);
                EXPECT_TRUE(v.is_object()) << text;
            }
            if (pass == 0) first_runs.push_back(r.tokens);
            else EXPECT_EQ(first_runs[seed - 1], r.tokens) << "seed " << seed;
        }
    }
    EXPECT_EQ(cache->n_cached(), 1u);  // compiled once for 40 samplers
}

TEST(constrained_sampler, ADeadEndIsAnErrorNotAHang) {
    auto cache = make_cache();
    // "q" is in no token: after "a" nothing can continue.
    auto s = lane_sampler::make(config("root ::= \"a\" \"q\""), cache.get());
    ASSERT_TRUE(s.is_ok()) << s.error().to_string();
    auto r = generate(**s, 10, [&](int) { return favouring(1); });
    EXPECT_EQ(r.tokens, std::vector<token_id>{1});
    ASSERT_FALSE(r.error.is_ok());
    EXPECT_EQ(r.error.code(), error_code::invalid_argument);
    EXPECT_NE(r.error.message().find("dead end"), std::string::npos) << r.error.message();
}

TEST(constrained_sampler, ABadGrammarIsRefusedWithTheGrammarsMessage) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("root ::= \"a"), cache.get());
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.error().code(), error_code::invalid_argument);
    auto none = lane_sampler::make(config("root ::= \"a\""), nullptr);
    EXPECT_FALSE(none.is_ok());
    sampling_config big = config(std::string(sampling_bounds::max_grammar_bytes + 1, ' '));
    EXPECT_FALSE(big.validate().is_ok());
}

TEST(constrained_sampler, AnOutputTokenTheGrammarRefusesIsAnError) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("root ::= \"ab\""), cache.get());
    ASSERT_TRUE(s.is_ok());
    const token_id prompt[] = {1};
    (*s)->track(0, prompt);
    auto l = favouring(3);
    ASSERT_EQ(*(*s)->sample(l), 3);
    const token_id wrong[] = {7};  // a peer fed back "x", not what was sampled
    (*s)->track(1, wrong);
    auto l2 = favouring(eos);
    auto t = (*s)->sample(l2);
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.error().code(), error_code::invalid_argument);
}

TEST(constrained_sampler, TheMatcherFollowsTheLanesPositions) {
    auto cache = make_cache();
    auto s = lane_sampler::make(config("root ::= (\"a\" | \"b\")+"), cache.get());
    ASSERT_TRUE(s.is_ok());
    lane_sampler & ls = **s;
    const token_id prompt[] = {7, 8};
    ls.track(0, prompt);
    auto l = favouring(1);
    ASSERT_EQ(*ls.sample(l), 1);
    const token_id a[] = {1};
    ls.track(2, a);
    l = favouring(2);
    ASSERT_EQ(*ls.sample(l), 2);
    const token_id b[] = {2};
    ls.track(3, b);
    // Rewind to the prompt and write another output: the matcher starts again, so a
    // first token that would be fine after "ab" and at the start alike is judged anew.
    ls.trim(2);
    l = favouring(3);
    ASSERT_EQ(*ls.sample(l), 3);
    const token_id ab[] = {3};
    ls.track(2, ab);
    l = favouring(eos);
    auto t = ls.sample(l);
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    EXPECT_EQ(*t, eos);
}

}  // namespace
}  // namespace skippy
