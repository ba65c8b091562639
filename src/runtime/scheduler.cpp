#include "runtime/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace skippy {

using sched_clock = std::chrono::steady_clock;

namespace {

// Chunks that start before this position teach a new prompt's first chunk size
// (learn_step_cost): there, a prompt token costs about what it costs at position 0
// (attention over 256 positions is a few percent of a token's weight products on the
// models we serve), where further on it grows with the prefix.
constexpr int64_t k_fresh_prompt_positions = 256;

}  // namespace

lane_scheduler::lane_scheduler(int32_t n_lanes, scheduler_options options, step_fn run, observe_fn observe)
    : options_(options), run_(std::move(run)), observe_(std::move(observe)), lanes_(static_cast<size_t>(n_lanes)),
      prompt_budget_tokens_(static_cast<double>((options.step_tokens + 3) / 4)) {
    assert(n_lanes >= 1 && options.step_tokens >= 1 && options.micro_batches >= 1);
    thread_ = std::thread([this] { loop(); });
}

lane_scheduler::~lane_scheduler() { stop(); }

void lane_scheduler::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_cv_.notify_all();
    done_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

status lane_scheduler::wait_done(std::unique_lock<std::mutex> & lock, int32_t lane) {
    lane_work & w = lanes_[static_cast<size_t>(lane)];
    done_cv_.wait(lock, [&] { return w.done || stopping_; });
    w.kind = work_kind::none;
    if (!w.done) return make_error(error_code::unavailable, "the stage is shutting down");
    return w.result;
}

status lane_scheduler::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, int32_t max_chunk_tokens) {
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) return make_error(error_code::invalid_argument, "no such lane");
    if (tokens.empty()) return status::ok();
    if (max_chunk_tokens < 1) return make_error(error_code::invalid_argument, "prefill chunk must be >= 1 token");
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_) return make_error(error_code::unavailable, "the stage is shutting down");
    lane_work & w = lanes_[static_cast<size_t>(lane)];
    w.kind = work_kind::prefill;
    w.pos = pos_start;
    w.tokens = tokens;
    w.max_chunk = max_chunk_tokens;
    w.budget_tokens = 0;
    w.prompt_started = false;
    w.order = next_order_++;
    w.ready_at = sched_clock::now();
    w.done = false;
    w.result = status::ok();
    work_cv_.notify_one();
    return wait_done(lock, lane);
}

result<token_id> lane_scheduler::decode(int32_t lane, int64_t pos, token_id token, token_logprobs * logprobs) {
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) return make_error(error_code::invalid_argument, "no such lane");
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_) return make_error(error_code::unavailable, "the stage is shutting down");
    lane_work & w = lanes_[static_cast<size_t>(lane)];
    w.kind = work_kind::decode;
    w.pos = pos;
    w.token = token;
    w.order = next_order_++;
    w.ready_at = sched_clock::now();
    w.done = false;
    w.result = status::ok();
    w.sampled = -1;
    w.decoding = true;
    work_cv_.notify_one();
    SKIPPY_TRY(wait_done(lock, lane));
    if (logprobs) *logprobs = std::move(w.logprobs);
    return w.sampled;
}

void lane_scheduler::end(int32_t lane) {
    if (lane < 0 || lane >= static_cast<int32_t>(lanes_.size())) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        lanes_[static_cast<size_t>(lane)].decoding = false;
        lanes_[static_cast<size_t>(lane)].last_step = 0;
    }
    work_cv_.notify_one();  // a step gathering for this lane need not wait for it
}

void lane_scheduler::learn_step_cost(size_t n_decodes, int64_t n_prompt_tokens, int32_t prompt_lane, int64_t prompt_pos,
                                     double seconds) {
    if (options_.decode_step_time_factor <= 0 || n_decodes == 0) return;
    if (n_prompt_tokens == 0) {
        // A re-measurement after mixed steps is not averaged into the figure: the old
        // one is stale by then (the lanes' contexts grew), and averaging it in would
        // take tens of steps to catch up, the prompt starved meanwhile. Nor does one
        // replace it, as it once did: one step's time is noisy (a step preempted on a
        // shared machine took 1.3x its neighbours, and with it set the budget of the
        // next eight steps: prompt chunks of 3 tokens where 2 fit, steps at 2.8x a
        // decode-only one). The figure is the median of the last three (of two, the
        // lower: noise only adds time), which follows a real change at the second.
        const bool refresh = mixed_steps_since_decode_only_ > 0 || decode_only_step_s_ <= 0;
        if (refresh) {
            if (refresh_samples_s_.size() == 3) refresh_samples_s_.erase(refresh_samples_s_.begin());
            refresh_samples_s_.push_back(seconds);
            std::vector<double> sorted = refresh_samples_s_;
            std::sort(sorted.begin(), sorted.end());
            decode_only_step_s_ = sorted[(sorted.size() - 1) / 2];
        } else {
            decode_only_step_s_ = 0.8 * decode_only_step_s_ + 0.2 * seconds;
            refresh_samples_s_.assign(1, decode_only_step_s_);  // a run of decode-only steps: one sample
        }
        mixed_steps_since_decode_only_ = 0;
        return;
    }
    ++mixed_steps_since_decode_only_;
    if (decode_only_step_s_ <= 0) return;
    // The prompt's share of this step, per token, predicts the next chunk's (it sits
    // a chunk further on, so a little dearer); aim the next step at the budget. Growth
    // per step is bounded (2x) so one quick step cannot swing it far; a dear step
    // shrinks it at once, since the running streams pay for every step over budget
    // (a prompt that starts with the budget another prompt earned is one).
    if (prompt_lane < 0) return;
    lane_work & w = lanes_[static_cast<size_t>(prompt_lane)];
    const double last = chunk_budget(w);
    const double budget_s = options_.decode_step_time_factor * decode_only_step_s_;
    const double per_token_s = std::max(seconds - decode_only_step_s_, 1e-9) / static_cast<double>(n_prompt_tokens);
    const double wanted = (budget_s - decode_only_step_s_) / per_token_s;
    const double hi = std::min(static_cast<double>(options_.step_tokens), 2.0 * std::max(1.0, last));
    w.budget_tokens = std::clamp(wanted, 1.0, std::max(1.0, hi));
    // Where a new prompt starts it takes a size learnt near the start of a sequence, as
    // most prompts start: a long prompt's later chunks, dear with attention over their
    // prefix, would give a short prompt arriving meanwhile chunks of 1-2 tokens, doubling
    // from there (7 steps for a 63-token prompt in the fairness bench).
    if (prompt_pos < k_fresh_prompt_positions) prompt_budget_tokens_ = w.budget_tokens;
}

size_t lane_scheduler::micro_batch_lanes(int32_t n_decoding) const {
    const size_t cap = (static_cast<size_t>(n_decoding) + options_.micro_batches - 1) / options_.micro_batches;
    return std::max<size_t>(cap, 1);
}

bool lane_scheduler::fragmented(size_t n_ready, int32_t n_decoding) const {
    if (options_.micro_batches <= 1 || n_ready >= micro_batch_lanes(n_decoding)) return false;
    // The steps in flight: those of the last few steps whose lanes have not all handed in
    // their next token (a lane whose client stalls falls behind them and is not waited for).
    const uint64_t recent = next_step_ > 2 * static_cast<uint64_t>(options_.micro_batches) + 1
                                ? next_step_ - 2 * static_cast<uint64_t>(options_.micro_batches) - 1
                                : 1;
    std::vector<uint64_t> in_flight;
    for (const lane_work & w : lanes_) {
        if (!w.decoding || w.last_step < recent || !(w.kind == work_kind::none || w.done)) continue;
        if (std::find(in_flight.begin(), in_flight.end(), w.last_step) == in_flight.end()) in_flight.push_back(w.last_step);
    }
    // The ready lanes make one more group. More groups than micro-batches (3 + 3 + 2 lanes
    // for 2) would keep a short step every round for good: the ready lanes wait for the
    // oldest group in flight, the step takes as many as it may, and the lanes left over
    // join the next group the same way (3 + 3 + 2 becomes 4 + 4 in two steps).
    return in_flight.size() + 1 > static_cast<size_t>(options_.micro_batches);
}

std::chrono::microseconds lane_scheduler::merge_wait() const {
    const auto step = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(2.0 * decode_only_step_s_));
    return std::max(options_.gather, step);
}

std::vector<step_item> lane_scheduler::form_step(sched_clock::time_point & wait_until) {
    wait_until = sched_clock::time_point::max();
    std::vector<size_t> decodes, prefills;
    // Lanes decoding or about to (a prompt just done): those a prompt chunk makes wait. A
    // lane with a prompt of its own to run is not one of them (alone, its prompt takes
    // full chunks).
    int32_t n_decoding = 0;
    for (size_t i = 0; i < lanes_.size(); ++i) {
        const lane_work & w = lanes_[i];
        if (w.decoding && !(w.kind == work_kind::prefill && !w.done)) ++n_decoding;
        if (w.done || w.kind == work_kind::none) continue;
        (w.kind == work_kind::decode ? decodes : prefills).push_back(i);
    }
    auto by_order = [&](size_t a, size_t b) { return lanes_[a].order < lanes_[b].order; };
    std::sort(decodes.begin(), decodes.end(), by_order);
    std::sort(prefills.begin(), prefills.end(), by_order);
    if (decodes.empty() && prefills.empty()) return {};
    if (n_decoding == 0 && prefills.size() > 1) {
        // Nobody decodes, so no prompt chunk is held to a budget, and a prompt under way
        // (a long one: far into its sequence, its chunks are dear) yields for a step to
        // prompts that have not started: their first tokens would wait for its whole
        // chunk (bench --fairness-prompt-tokens 4000, streams starting their next
        // requests together: 1.4 s to their first tokens, steps of a 512-token chunk at
        // position 3,000). Once their prompts are in they decode, and the long prompt's
        // chunks beside them keep to the time budget.
        const auto started = std::stable_partition(prefills.begin(), prefills.end(),
                                                   [&](size_t i) { return !lanes_[i].prompt_started; });
        if (started != prefills.begin()) prefills.erase(started, prefills.end());
    }

    // A lane that ran in the step that just ended hands in its next token within
    // moments; so do the lanes of the ready head's previous step. Waiting a moment
    // (`gather`) for them keeps a step whole: otherwise lanes that once fell into two
    // steps (they finished their prompts at different times) stay split for good, each
    // step reading all the weights for a part of the lanes.
    const auto now = sched_clock::now();
    auto awaited = [&](uint64_t step) {
        return step != 0 && std::any_of(lanes_.begin(), lanes_.end(), [&](const lane_work & w) {
                   return w.decoding && w.last_step == step && (w.kind == work_kind::none || w.done);
               });
    };
    const uint64_t last = next_step_ - 1;
    const auto last_deadline = last_step_end_ + options_.gather;
    // With micro-batches the split is the point (stages work on different steps).
    const bool wait_last = options_.micro_batches == 1 && now < last_deadline && awaited(last);
    if (!decodes.empty()) {
        const lane_work & head = lanes_[decodes.front()];
        const auto head_deadline = head.ready_at + options_.gather;
        const bool wait_head = now < head_deadline && awaited(head.last_step);
        if (wait_head || wait_last) {
            wait_until = wait_head && wait_last ? std::max(head_deadline, last_deadline)
                                                : (wait_head ? head_deadline : last_deadline);
            return {};
        }
        if (const auto merge_deadline = head.ready_at + merge_wait(); now < merge_deadline && fragmented(decodes.size(), n_decoding)) {
            wait_until = merge_deadline;
            return {};
        }
    } else if (wait_last) {
        // Only prompts are ready: a prompt chunk run now would make the lanes that just
        // decoded wait a whole step (their inter-token latency would double).
        wait_until = last_deadline;
        return {};
    }

    std::vector<step_item> items;
    size_t n_take = decodes.size();
    if (options_.micro_batches > 1) n_take = std::min(n_take, micro_batch_lanes(n_decoding));
    for (size_t k = 0; k < n_take; ++k) {
        const size_t i = decodes[k];
        step_item it;
        it.lane = static_cast<int32_t>(i);
        it.kind = step_kind::decode;
        it.pos_start = lanes_[i].pos;
        it.tokens = std::span<const token_id>(&lanes_[i].token, 1);
        items.push_back(it);
    }
    // Prompt chunks fill the budget while anyone decodes; alone, a prompt takes its
    // own chunk size.
    int64_t left = std::numeric_limits<int64_t>::max();
    bool one_prompt = false;
    if (n_decoding > 0) {
        left = std::max<int64_t>(options_.step_tokens - static_cast<int64_t>(n_take), (options_.step_tokens + 3) / 4);
        if (options_.decode_step_time_factor > 0 && decode_only_step_s_ > 0 && !prefills.empty()) {
            // One prompt's chunk, sized from its own cost (see learn_step_cost).
            const double budget = chunk_budget(lanes_[prefills.front()]);
            left = std::min<int64_t>(left, std::max<int64_t>(1, static_cast<int64_t>(budget)));
            one_prompt = true;
            if (n_take > 0 && options_.decode_only_refresh_steps > 0 &&
                mixed_steps_since_decode_only_ >= options_.decode_only_refresh_steps) {
                left = 0;  // a decode-only step, to re-measure it
            }
        }
    }
    for (size_t i : prefills) {
        if (left <= 0 || (one_prompt && items.size() > n_take)) break;
        const lane_work & w = lanes_[i];
        const int64_t n = std::min<int64_t>({static_cast<int64_t>(w.tokens.size()), w.max_chunk, left});
        step_item it;
        it.lane = static_cast<int32_t>(i);
        it.kind = step_kind::prefill;
        it.pos_start = w.pos;
        it.tokens = w.tokens.first(static_cast<size_t>(n));
        items.push_back(it);
        left -= n;
    }
    return items;
}

void lane_scheduler::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        sched_clock::time_point wait_until;
        std::vector<step_item> items = form_step(wait_until);
        if (items.empty()) {
            if (wait_until == sched_clock::time_point::max()) {
                work_cv_.wait(lock);
            } else {
                work_cv_.wait_until(lock, wait_until);
            }
            continue;
        }
        const auto started = sched_clock::now();
        step_observation seen;
        seen.n_lanes = static_cast<int32_t>(items.size());
        for (const step_item & it : items) {
            seen.n_tokens += static_cast<int64_t>(it.tokens.size());
            seen.queue_wait_s.push_back(std::chrono::duration<double>(started - lanes_[static_cast<size_t>(it.lane)].ready_at).count());
        }
        const uint64_t step_id = next_step_++;
        // The items point into lanes_ and into the callers' token spans, which stay put:
        // each caller is blocked until its work is done.
        lock.unlock();
        run_(items);
        if (observe_) observe_(seen);
        lock.lock();
        const auto now = sched_clock::now();
        last_step_end_ = now;
        {
            size_t n_decodes = 0;
            int64_t n_prompt = 0;
            int32_t prompt_lane = -1, n_prompt_lanes = 0;
            int64_t prompt_pos = 0;
            for (const step_item & it : items) {
                if (it.kind == step_kind::decode) {
                    ++n_decodes;
                } else {
                    n_prompt += static_cast<int64_t>(it.tokens.size());
                    prompt_lane = it.lane;
                    prompt_pos = it.pos_start;
                    ++n_prompt_lanes;
                }
            }
            learn_step_cost(n_decodes, n_prompt, n_prompt_lanes == 1 ? prompt_lane : -1, prompt_pos,
                            std::chrono::duration<double>(now - started).count());
        }
        for (const step_item & it : items) {
            lane_work & w = lanes_[static_cast<size_t>(it.lane)];
            if (it.kind == step_kind::decode) {
                w.done = true;
                w.result = it.result;
                w.sampled = it.sampled;
                w.logprobs = it.logprobs;
                w.last_step = step_id;
                continue;
            }
            const size_t n = it.tokens.size();
            if (!it.result.is_ok() || n == w.tokens.size()) {
                w.done = true;
                w.result = it.result;
                // Its prompt is in: the lane's first decode (the prompt's last token)
                // comes within moments, so it counts as decoding from now on. Else, in
                // that moment, a long prompt beside it ran one chunk with no budget: all
                // 512 tokens in a step of a second (bench --fairness-prompt-tokens, four
                // streams starting their next requests together), and the lanes' first
                // decode waited for it.
                if (it.result.is_ok()) {
                    w.decoding = true;
                    w.last_step = step_id;
                }
                continue;
            }
            w.pos += static_cast<int64_t>(n);
            w.tokens = w.tokens.subspan(n);
            w.ready_at = now;
            w.prompt_started = true;
            // The next chunk queues behind the prompts that waited (round robin): by the
            // order of asking, a short prompt that came during a long one would get no
            // budget until the long one was done.
            w.order = next_order_++;
        }
        done_cv_.notify_all();
    }
}

}  // namespace skippy
