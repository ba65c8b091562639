// Token sampling on the final stage.
//
// Order of operations (llama.cpp's default chain): logit bias -> repetition /
// presence / frequency penalties over the last `penalty_last_n` tokens -> top-k ->
// top-p -> min-p -> temperature -> a draw from the seeded generator. temperature <= 0
// means greedy (argmax after bias and penalties; ties go to the lowest id).
// The generator is our own (splitmix64), so a seed gives the same tokens everywhere.
#pragma once

#include "base/status.h"

#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

namespace skippy {

using token_id = int32_t;

struct sampling_config {
    float    temperature = 0.8f;   // <= 0: greedy
    int32_t  top_k = 40;           // <= 0: off
    float    top_p = 0.95f;        // in (0, 1]; 1: off
    float    min_p = 0.05f;        // <= 0: off
    uint64_t seed = 0;
    float    repeat_penalty = 1.0f;      // 1: off; divides positive logits, multiplies negative ones
    float    presence_penalty = 0.0f;    // subtracted once per token present in the window
    float    frequency_penalty = 0.0f;   // subtracted per occurrence in the window
    int32_t  penalty_last_n = 64;        // window of recent tokens the penalties look at; 0: off
    std::vector<std::pair<token_id, float>> logit_bias;  // added to a token's logit

    bool greedy() const { return temperature <= 0.0f; }
    // Checks ranges (finite values, top_p in (0, 1], ...); an error names the field.
    status validate() const;
};

class sampler {
public:
    explicit sampler(sampling_config config);

    // Picks the next token from logits[n_vocab] (modified in place).
    token_id sample(std::span<float> logits);
    // Records a token (prompt or generated) in the penalty window.
    void accept(token_id id);
    // Replaces the penalty window with the last penalty_last_n tokens of `sequence`
    // (everything the session holds so far), whatever was accepted before.
    void set_history(std::span<const token_id> sequence);

    const sampling_config & config() const { return config_; }

private:
    double next_uniform();  // [0, 1)

    sampling_config     config_;
    uint64_t            rng_state_;
    std::deque<token_id> recent_;
    std::vector<std::pair<float, token_id>> candidates_;
};

}  // namespace skippy
