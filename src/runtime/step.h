// One step of a stage's lane loop (docs/transport.md, "Lanes and steps"): the next
// piece of work of several lanes — prompt chunks and decode tokens — run through the
// stage's layers as one batch, then, on the final stage, sampled. Every stage runs its
// steps through step_runner: stage 0's scheduler, the stage servers' batch links and
// the in-process local_pipeline alike.
//
//   items ──▶ lookups (a cache may restore an item's first tokens, or all of it)
//         ──▶ embed (first stage) / rows from upstream
//         ──▶ stage::forward_batch: one pass for every item's remaining tokens
//         ──▶ bookkeeping (a cache notes what was computed)
//         ──▶ final stage: one head pass over the rows that sample, then each lane's sampler
//
// Exactness: an item's rows are bitwise what the lane computes alone (forward_batch
// and the head promise it), so a step's composition never changes a token.
#pragma once

#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "runtime/sampler.h"
#include "runtime/stage.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace skippy {

// A sampler with its penalty window kept by position: the window holds the tokens at
// positions [0, n) the lane holds, which is exactly the prompt and then each
// generated token, however the positions were filled (computed, restored, chunked).
//
// Under a grammar (sampling_config::grammar), the output — every token after the
// prompt, i.e. after the positions the lane held at its first sample — must continue
// it: the sampler draws as usual and keeps the token when the grammar accepts it (one
// cheap check: unconstrained lanes pay nothing and constrained ones little); otherwise
// it masks every token the grammar refuses and draws again from the same logits. Once
// the grammar is done (nothing may follow), only end-of-generation tokens remain, so
// the generation ends as at any end of generation. The matcher follows the positions
// too (it is fed the generated tokens as the lane comes to hold them), so a token's
// draw depends only on the logits and the tokens before it: the same on every
// topology, with the cache on or off.
class lane_sampler {
public:
    // Unconstrained. REQUIRES: config.grammar is empty.
    explicit lane_sampler(sampling_config config) : sampler_(std::move(config)) {}
    // Under the grammar of `config` (when not empty), compiled through `constraints`
    // (null: a grammar is refused). invalid_argument with the grammar's message for a
    // bad grammar.
    static result<std::unique_ptr<lane_sampler>> make(sampling_config config, constraint_cache * constraints);

    // The lane now holds `tokens` at [pos_start, +n) (later positions are dropped).
    void track(int64_t pos_start, std::span<const token_id> tokens);
    // Drops positions >= n_tokens.
    void trim(int64_t n_tokens);
    // The next token from logits[n_vocab] (modified) with the window as it stands;
    // `runtime` if a logit is not finite (sampler::sample_finite). Under a grammar:
    // invalid_argument when the output so far is not one the grammar admits, or the
    // grammar can go on but no token of the vocabulary continues it (a dead end), or
    // the matcher ran out of its limits. With `logprobs` and config.n_logprobs > 0, it
    // receives compute_logprobs() of the distribution the draw started from (after
    // bias, penalties and the grammar's mask; the mask is computed for it when the
    // draw did not need it, which never changes the token); else it is cleared.
    result<token_id> sample(std::span<float> logits, token_logprobs * logprobs = nullptr);

    bool constrained() const { return matcher_ != nullptr; }
    // Draws the grammar refused (a full mask was computed), for tests and the bench.
    uint64_t n_masked_draws() const { return n_masked_draws_; }

private:
    // Sets every token the grammar refuses to -infinity; invalid_argument on a dead end.
    status mask(std::span<float> logits);
    // Feeds the matcher the generated tokens the lane holds that it has not seen.
    status catch_up();

    sampler               sampler_;
    std::vector<token_id> sequence_;
    // Under a grammar.
    grammar::token_trie_ptr           vocab_;
    std::unique_ptr<grammar::matcher> matcher_;
    grammar::token_mask               mask_;
    int64_t                           output_start_ = -1;  // positions before it are the prompt; -1: not sampled yet
    int64_t                           n_fed_ = 0;          // output tokens the matcher consumed
    uint64_t                          n_masked_draws_ = 0;
};

enum class step_kind : uint8_t {
    prefill,        // prompt tokens, nothing sampled
    prefill_final,  // the prompt's last chunk: the final stage samples after it
    decode,         // one token: the final stage samples after it
};

inline bool samples(step_kind k) { return k != step_kind::prefill; }

// One lane's part of a step.
struct step_item {
    int32_t                   lane = 0;
    step_kind                 kind = step_kind::decode;
    int64_t                   pos_start = 0;
    std::span<const token_id> tokens;   // the tokens at [pos_start, +n)
    std::span<const float>    rows_in;  // stages after the first: [n, n_embd] from upstream
    uint64_t                  request_id = 0;  // the message's id on the wire (for cache events; 0: none)
    // Set by step_lanes_i::before (a prefix cache on a stage with recurrent layers):
    // lengths, ascending, at which the stage copies the lane's recurrent state while it
    // computes the item (lane_span::checkpoints; those it restores are skipped).
    std::vector<int64_t>      checkpoints;

    // Set by the step.
    status   result;             // this item's failure (the other items go on)
    int64_t  restored = 0;       // leading tokens a cache restored instead of computing
    bool     from_cache = false; // the whole item restored, its output rows too
    token_id sampled = -1;       // the final stage: the token sampled after the item
    token_logprobs logprobs;     // and its logprobs (empty unless the lane's n_logprobs > 0)
    size_t   out_offset = 0;     // where the item's n rows start in step_runner::output()
    int64_t  n_computed() const { return from_cache ? 0 : std::max<int64_t>(static_cast<int64_t>(tokens.size()) - restored, 0); }
};

// What a step needs of the lanes it runs: their caches and their samplers.
class step_lanes_i {
public:
    virtual ~step_lanes_i() = default;
    // Before the step computes `item`: a prefix cache may restore its first tokens
    // (set item.restored) or, with the rows this stage would output, all of it (set
    // item.from_cache and fill out[n, n_embd]).
    virtual void before(step_item & item, std::span<float> out) { (void)item; (void)out; }
    // After the item's tokens [restored, n) were computed; out holds all n rows (the
    // restored ones are not meaningful unless from_cache).
    virtual void after(const step_item & item, std::span<const float> out) { (void)item; (void)out; }
    // The final stage: the lane's sampler (null: the lane cannot sample, an error).
    virtual lane_sampler * sampler(int32_t lane) { (void)lane; return nullptr; }
};

class step_runner {
public:
    // REQUIRES: st outlives the runner.
    explicit step_runner(stage & st) : stage_(st) {}

    // Runs one step. REQUIRES: items name distinct lanes. PROMISES: every item has its
    // result; a successful item's output rows are at output()[out_offset ...] (n rows
    // of n_embd: this stage's output; on the final stage only the rows it computed
    // are meaningful) and, when it samples on the final stage, sampled is set.
    void run(std::span<step_item> items, step_lanes_i & lanes);

    std::span<const float> rows(const step_item & item) const;
    const std::vector<float> & output() const { return out_; }

private:
    stage &                  stage_;
    std::vector<float>       out_;
    std::vector<lane_span>   spans_;
    std::vector<size_t>      span_item_;
    std::vector<status>      span_status_;
    std::vector<float>       x_, last_rows_, logits_;
};

}  // namespace skippy
