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

// The range of every sampling field: what the HTTP front end and the CLI accept, and
// what sampling_config::validate() (run by stage 0 and by the final stage when a
// configuration arrives on the wire) enforces. One set of bounds, so that a request is
// accepted or refused alike on every topology (docs/http-api.md).
struct sampling_bounds {
    static constexpr float   max_temperature = 100.0f;     // temperature in [0, 100]; 0: greedy
    static constexpr int32_t max_top_k = 1 << 24;          // top_k in [0, 2^24]; 0: off
    // top_p in (0, 1]; min_p in [0, 1]
    static constexpr float   min_repeat_penalty = 0.01f;   // repeat_penalty in [0.01, 100]; 1: off
    static constexpr float   max_repeat_penalty = 100.0f;
    static constexpr float   max_abs_penalty = 2.0f;       // presence_penalty, frequency_penalty in [-2, 2]
    static constexpr int32_t max_penalty_last_n = 1 << 20; // penalty_last_n in [0, 2^20]
    // Each logit_bias value in [-100, 100] (OpenAI's range), checked by the front ends;
    // validate() asks only for a finite value (a peer may ban a token with any bias).
    static constexpr float   max_abs_logit_bias = 100.0f;
    // A grammar's GBNF text, in bytes (grammar::grammar_limits' default; the wire's bound too).
    static constexpr size_t  max_grammar_bytes = size_t{1} << 20;
    static constexpr int32_t max_logprobs = 20;            // n_logprobs in [0, 20]; 0: off
};

// One token's log-probability.
struct token_logprob {
    token_id id = 0;
    float    logprob = 0.0f;  // <= 0, finite

    bool operator==(const token_logprob &) const = default;
};

// What the final stage reports of one predicted token when logprobs are asked for:
// the log-softmax of the distribution the draw starts from — the logits after
// logit_bias, the penalties and the grammar's mask, before top-k / top-p / min-p /
// temperature (docs/http-api.md, "Log-probabilities").
struct token_logprobs {
    float                      sampled = 0.0f;  // the sampled token's logprob
    std::vector<token_logprob> top;             // the n most likely, by logprob descending, ties by id ascending;
                                                // tokens of logit -infinity (masked) are never listed

    bool empty() const { return top.empty(); }
    bool operator==(const token_logprobs &) const = default;
};

// Log-softmax of logits[n_vocab] for `sampled` and the n_top most likely tokens, into
// `out`. Max-subtracted, the sum of exponentials taken in double in index order, so
// the result is a function of the logits' bits alone (the same on every topology).
// REQUIRES: some logit is finite, logits[sampled] is finite, 0 < n_top.
// PROMISES: out.top holds min(n_top, finite logits) entries, out.top[0] is an argmax.
void compute_logprobs(std::span<const float> logits, token_id sampled, int32_t n_top, token_logprobs & out);

// The k most likely tokens as (logit, id), best first: by logit descending, ties by id
// ascending, i.e. the first k of the whole vocabulary sorted that way (the order top-k
// sampling draws from). One comparison per logit once k are held, so a 151k-token
// vocabulary costs a scan, not a sort. REQUIRES: 0 < k <= logits.size(), no NaN.
void top_candidates(std::span<const float> logits, size_t k, std::vector<std::pair<float, token_id>> & out);

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
    // A constraint on the output: GBNF text (docs/grammar.md, start rule `root`) that
    // every generated token must continue; empty: none. The front ends compile JSON
    // schemas to it; the final stage compiles it (lane_sampler, constraint_cache).
    std::string grammar;
    // Log-probabilities of each predicted token and its n_logprobs most likely
    // alternatives (compute_logprobs); 0: none computed, none sent.
    int32_t n_logprobs = 0;

    bool greedy() const { return temperature <= 0.0f; }
    // Checks every field against sampling_bounds (and that every value is finite and
    // every logit_bias id >= 0, and the grammar's size): invalid_argument naming the
    // field. The grammar's syntax is checked where it is compiled.
    status validate() const;
    // validate(), and every logit_bias id below n_vocab (the model's vocabulary).
    status validate(int32_t n_vocab) const;
};

class sampler {
public:
    explicit sampler(sampling_config config);

    // Picks the next token from logits[n_vocab] (modified in place): adjust() then pick().
    token_id sample(std::span<float> logits);
    // The first half of sample(): logit bias and penalties, in place.
    void adjust(std::span<float> logits);
    // The second half: the draw from adjusted logits (greedy argmax, or top-k, top-p,
    // min-p, temperature and one value of the generator). Logits of -infinity are
    // never drawn while some logit is finite (the grammar's mask).
    // REQUIRES: some logit is finite.
    token_id pick(std::span<const float> logits);
    // `runtime` naming the first logit that is NaN or infinite, else ok.
    static status check_finite(std::span<const float> logits);
    // sample(), unless a logit is NaN or infinite (the model's weights or activations
    // are broken): then `runtime`, naming the first such token, and nothing is drawn.
    // Every topology's final stage samples through this, so a broken model fails the
    // request alike everywhere instead of "sampling" token 0.
    result<token_id> sample_finite(std::span<float> logits);
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
