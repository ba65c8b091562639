// The lane scheduler of stage 0 (and of the in-process local_pipeline): lanes hand it
// their work from their own threads — a prompt to prefill, a token to decode — and one
// scheduler thread forms steps of what is ready and runs them (docs/transport.md,
// "Scheduling"):
//
//   - a step takes every ready decode (one token per lane), then prompt chunks in turn
//     (a prompt's next chunk queues behind the prompts that waited, so a short prompt
//     is not held until a long one is done), within a token budget while any lane
//     decodes, so that a long prompt is prefilled in chunks beside the running
//     streams instead of stalling them for its whole length; a lone prompt takes its
//     full chunk size, and with nobody decoding a prompt under way yields a step to
//     prompts that have not started (their first tokens would wait for its chunk);
//   - the prompt tokens of a step with decodes are also held to a time budget (a
//     multiple of a decode-only step, learnt from the steps that ran and re-measured
//     every few steps as the decoding lanes' contexts grow): a chunk's cost grows
//     with its position, so such a step takes one prompt's chunk, sized from that
//     prompt's own last chunk (a short prompt's cheap chunks must not size a long
//     prompt's dear ones);
//   - no lane waits for a full batch: a step runs with what is ready, except that it
//     waits a moment (`gather`) for the lanes of the previous step, whose tokens arrive
//     together, so steps keep their size instead of splitting (and a prompt chunk does
//     not slip in ahead of them);
//   - with micro_batches > 1 (stages in separate processes) the decoding lanes are
//     spread over that many steps, so that each stage works on one step while the
//     next stage runs another; when they have fallen into more groups than that, a
//     short step waits for the next group back to merge with it (fragmented below).
//
// Exactness does not depend on any of this: a row is the same in any step (step.h).
#pragma once

#include "runtime/step.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace skippy {

struct scheduler_options {
    // Most tokens in a step while any lane decodes: the decodes plus prompt chunks.
    // Prompt chunks get at least a quarter of it however many lanes decode.
    int64_t step_tokens = 64;
    // Steps the decoding lanes are spread over (1: all ready decodes in one step).
    int32_t micro_batches = 1;
    // How long a step may wait for the lanes of the previous step to be ready again.
    std::chrono::microseconds gather{2000};
    // While lanes decode, a step's prompt tokens are also held to a time budget: about
    // this many times a decode-only step (as measured), so that running streams'
    // inter-token latency stays near that factor while a long prompt is prefilled
    // (a prompt chunk's cost grows with its position, through attention). 0: tokens only.
    double decode_step_time_factor = 2.0;
    // After this many steps with both decodes and prompt tokens, one step runs the
    // decodes alone, so that the decode-only time the budget is measured against
    // follows the lanes' contexts as they grow (stale, it would starve the prompt:
    // every step's growth would be charged to its prompt tokens). 0: never.
    int32_t decode_only_refresh_steps = 8;
};

// What the scheduler saw of one step, for metrics.
struct step_observation {
    int32_t n_lanes = 0;
    int64_t n_tokens = 0;
    std::vector<double> queue_wait_s;  // per item: from being ready to the step's start
};

class lane_scheduler {
public:
    // Runs one step on the scheduler thread and sets each item's result (the caller's
    // compute and hand-off, e.g. step_runner then a Step frame downstream).
    using step_fn = std::function<void(std::span<step_item> items)>;
    using observe_fn = std::function<void(const step_observation &)>;

    // REQUIRES: n_lanes >= 1; options.step_tokens >= 1; options.micro_batches >= 1.
    lane_scheduler(int32_t n_lanes, scheduler_options options, step_fn run, observe_fn observe = {});
    ~lane_scheduler();
    lane_scheduler(const lane_scheduler &) = delete;
    lane_scheduler & operator=(const lane_scheduler &) = delete;

    // From the lane's thread, one call at a time per lane. Computes `tokens` at
    // [pos_start, +n) in chunks of at most max_chunk_tokens and returns once every
    // chunk ran (the first error ends it). REQUIRES: tokens stay valid until it returns.
    status prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, int32_t max_chunk_tokens);
    // Computes `token` at `pos` in the next step that takes it; returns its step
    // item's result: the sampled token on a final stage, -1 otherwise.
    // `logprobs` (optional) receives the item's logprobs (empty unless asked for).
    result<token_id> decode(int32_t lane, int64_t pos, token_id token, token_logprobs * logprobs = nullptr);
    // The lane's request is over: it no longer counts as decoding.
    void end(int32_t lane);

    // Ends the thread; calls waiting or made later fail (unavailable).
    void stop();

    const scheduler_options & options() const { return options_; }

private:
    enum class work_kind : uint8_t { none, prefill, decode };
    struct lane_work {
        work_kind                 kind = work_kind::none;
        int64_t                   pos = 0;
        std::span<const token_id> tokens;  // prefill: what is left
        int32_t                   max_chunk = 0;
        token_id                  token = 0;
        uint64_t                  order = 0;  // when it became ready (FIFO)
        std::chrono::steady_clock::time_point ready_at;
        bool                      done = false;
        status                    result;
        token_id                  sampled = -1;
        token_logprobs            logprobs;
        bool                      decoding = false;  // decoded since its request began
        double                    budget_tokens = 0;  // its prompt's chunk budget (0: not learnt yet)
        bool                      prompt_started = false;  // a chunk of its prompt has run
        uint64_t                  last_step = 0;     // the step of its last decode (0: none)
    };

    void loop();
    // Picks the next step's items (with the lock held). Empty: nothing to do yet; `wait_until`
    // is when to look again (gathering), or max() to wait for work.
    std::vector<step_item> form_step(std::chrono::steady_clock::time_point & wait_until);
    status wait_done(std::unique_lock<std::mutex> & lock, int32_t lane);
    // With micro-batches: n_ready decodes would make a short step and the decoding lanes
    // are in more groups (steps in flight) than micro-batches. Then the step waits for
    // the next group back (up to merge_wait), as a step waits a moment for its previous
    // step's lanes with one micro-batch: else lanes that once fell into an extra group
    // (prompts ending at different times, a token back late) keep it for good, and some
    // step runs short every round.
    bool fragmented(size_t n_ready, int32_t n_decoding) const;
    // The most decodes a step takes with micro-batches: n_decoding spread over them (at least 1).
    size_t micro_batch_lanes(int32_t n_decoding) const;
    std::chrono::microseconds merge_wait() const;

    // After a step: updates the decode-only step time and the prompt budget.
    // The prompt tokens w's next chunk may take beside decodes: its own learnt size,
    // or, before its first chunk, the last size learnt near the start of a sequence.
    double chunk_budget(const lane_work & w) const { return w.budget_tokens > 0 ? w.budget_tokens : prompt_budget_tokens_; }
    // `prompt_lane`: the lane whose chunk the step ran (-1: none, or several), and
    // `prompt_pos`: where that chunk started.
    void learn_step_cost(size_t n_decodes, int64_t n_prompt_tokens, int32_t prompt_lane, int64_t prompt_pos, double seconds);

    const scheduler_options  options_;
    step_fn                  run_;
    observe_fn               observe_;
    std::mutex               mutex_;
    std::condition_variable  work_cv_, done_cv_;
    std::vector<lane_work>   lanes_;
    uint64_t                 next_order_ = 1;
    uint64_t                 next_step_ = 1;
    // Time budget (decode_step_time_factor): a moving average of decode-only steps (0:
    // none seen yet) and the prompt tokens a step with decodes may take.
    double                   decode_only_step_s_ = 0.0;
    std::vector<double>      refresh_samples_s_;  // the last (up to 3) re-measurements it is the median of
    double                   prompt_budget_tokens_ = 0.0;  // where a prompt starts (chunk_budget)
    int32_t                  mixed_steps_since_decode_only_ = 0;
    std::chrono::steady_clock::time_point last_step_end_{};
    bool                     stopping_ = false;
    std::thread              thread_;
};

}  // namespace skippy
