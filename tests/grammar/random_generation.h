// Random constrained generation for the tests: pick random allowed tokens until the
// grammar may end, preferring to end once the output is long enough.
#pragma once

#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace skippy::grammar::testing {

struct generation {
    bool        ended = false;  // an end-of-generation token was chosen
    std::string text;
    size_t      n_mask_checks = 0;
};

struct generation_options {
    int    max_steps = 1500;
    int    soft_steps = 40;   // past this, end when allowed and favour closing tokens
    int    check_every = 11;  // compare the mask with the per-token answer every n steps (0: never)
    double closer_weight = 200.0;
};

inline size_t count_closers(std::string_view piece) {
    size_t n = 0;
    for (char c : piece) n += c == '}' || c == ']' || c == '"';
    return n;
}

// Fails the calling test (gtest assertions) on any inconsistency.
inline void generate(matcher & m, const token_trie & vocab, std::mt19937 & rng, const generation_options & o,
                     generation & out) {
    token_mask mask;
    for (int step = 0; step < o.max_steps; ++step) {
        ASSERT_TRUE(m.allowed_tokens(vocab, mask).is_ok()) << m.error().to_string();
        std::vector<token_id> ids = mask.ids();
        ASSERT_FALSE(ids.empty()) << "no token allowed after: " << out.text;
        if (o.check_every > 0 && step % o.check_every == 0) {
            for (token_id id = 0; id < vocab.n_vocab(); ++id) {
                ASSERT_EQ(mask.test(id), m.accepts_token(vocab, id))
                    << "after: " << out.text << "\ntoken " << id << " '" << vocab.piece(id) << "'";
            }
            ++out.n_mask_checks;
        }
        std::vector<token_id> ends, others;
        for (token_id id : ids) (vocab.is_end_of_generation(id) ? ends : others).push_back(id);
        const bool hurry = step > o.soft_steps;
        if (!ends.empty() && (hurry || others.empty() || rng() % 4 == 0)) {
            ASSERT_TRUE(m.advance_token(vocab, ends[rng() % ends.size()]).is_ok());
            EXPECT_TRUE(m.is_done());
            out.ended = true;
            return;
        }
        std::vector<double> weights;
        weights.reserve(others.size());
        for (token_id id : others) {
            weights.push_back(1.0 + (hurry ? o.closer_weight * double(count_closers(vocab.piece(id))) : 0.0));
        }
        std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
        token_id id = others[pick(rng)];
        ASSERT_TRUE(m.advance_token(vocab, id).is_ok());
        out.text += vocab.piece(id);
    }
}

}  // namespace skippy::grammar::testing
