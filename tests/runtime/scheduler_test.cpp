// The lane scheduler's step forming, against a fake step whose cost is a sleep: a
// decode-only step takes about 4 ms and each prompt token 1 ms more. The assertions
// are about which items the steps held, with wide margins, not about time.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace skippy {
namespace {

struct step_record {
    int     n_decodes = 0;
    int64_t n_prompt = 0;
};

class recording_step {
public:
    // A decode-only step costs decode_ms (4 unless set); each prompt token 1 ms more.
    std::atomic<int> decode_ms{4};
    // Optional, set before the steps run: more milliseconds for a step (called on the
    // scheduler's thread, before the step sleeps).
    std::function<int(const step_record &)> extra_ms;

    void operator()(std::span<step_item> items) {
        step_record r;
        for (step_item & it : items) {
            if (it.kind == step_kind::decode) {
                ++r.n_decodes;
                it.sampled = 1;
            } else {
                r.n_prompt += static_cast<int64_t>(it.tokens.size());
            }
        }
        const int64_t extra = extra_ms ? extra_ms(r) : 0;
        std::this_thread::sleep_for(std::chrono::microseconds(1000 * (decode_ms.load() + r.n_prompt + extra)));
        std::lock_guard<std::mutex> lock(mutex_);
        steps_.push_back(r);
    }
    std::vector<step_record> steps() {
        std::lock_guard<std::mutex> lock(mutex_);
        return steps_;
    }

private:
    std::mutex               mutex_;
    std::vector<step_record> steps_;
};

// The time-budget tests' options: a 64-token budget, a decode-only step's time twice
// per step, and a generous gather (the test machine may be loaded).
scheduler_options budget_options() {
    scheduler_options o;
    o.step_tokens = 64;
    o.gather = std::chrono::milliseconds(50);
    o.decode_step_time_factor = 2.0;
    return o;
}

// Lanes 0 and 1 decode alone for 150 ms (the scheduler learns a decode-only step),
// then `before_prompt` runs and lane 2 prefills a 300-token prompt; the lanes decode
// until it is done and `after_prompt` has returned (and at least `min_decodes` tokens
// each).
void decode_beside_a_long_prompt(lane_scheduler & sched, const std::function<void()> & before_prompt, int64_t min_decodes,
                                 const std::function<void()> & after_prompt = {}) {
    std::atomic<bool> prompt_done{false};
    std::vector<std::thread> decoders;
    for (int32_t lane = 0; lane < 2; ++lane) {
        decoders.emplace_back([&, lane] {
            int64_t pos = 0;
            while (!prompt_done.load() || pos < min_decodes) {
                ASSERT_TRUE(sched.decode(lane, pos, 1).is_ok());
                ++pos;
            }
            sched.end(lane);
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    before_prompt();
    std::vector<token_id> prompt(300, 7);
    EXPECT_TRUE(sched.prefill(2, 0, prompt, 512).is_ok());
    if (after_prompt) after_prompt();
    prompt_done.store(true);
    for (auto & t : decoders) t.join();
    sched.stop();
}

// Two lanes decode without pause while a third prefills 300 tokens: the prompt is cut
// into chunks far below the 60-token budget, sized so that a step stays near twice a
// decode-only step, and (gathering for the decoding lanes) almost no step runs a prompt
// chunk without them.
TEST(lane_scheduler, LongPromptBesideDecodingLanesIsChunkedToTheTimeBudget) {
    recording_step rec;
    scheduler_options o = budget_options();
    lane_scheduler sched(3, o, [&](std::span<step_item> items) { rec(items); });
    decode_beside_a_long_prompt(sched, [] {}, 40);

    std::vector<int64_t> mixed_chunks;
    int64_t prompt_total = 0;
    int prompt_only = 0;
    for (const step_record & r : rec.steps()) {
        prompt_total += r.n_prompt;
        if (r.n_prompt > 0 && r.n_decodes > 0) mixed_chunks.push_back(r.n_prompt);
        if (r.n_prompt > 0 && r.n_decodes == 0) ++prompt_only;
    }
    EXPECT_EQ(prompt_total, 300) << "every prompt token ran once";
    ASSERT_GE(mixed_chunks.size(), 10u);
    std::sort(mixed_chunks.begin(), mixed_chunks.end());
    const int64_t median_chunk = mixed_chunks[mixed_chunks.size() / 2];
    // Budget: 2 x 4 ms per step, so about 4 prompt tokens; without the time budget the
    // chunks would be 62 tokens.
    EXPECT_LE(median_chunk, 16) << "the chunk follows the time budget";
    EXPECT_GE(median_chunk, 1);
    EXPECT_LE(prompt_only, 3) << "prompt chunks wait for the lanes that just decoded";
}

// The decoding lanes' own steps get dearer while the prompt runs (their contexts grow;
// here a decode-only step goes from 4 ms to 16 ms when the prompt arrives): the
// scheduler re-measures a decode-only step every few mixed steps, so the prompt's
// chunks follow the new budget (2 x 16 ms, about 16 tokens at 1 ms each) instead of
// charging the growth to the prompt and shrinking it to one token a step.
TEST(lane_scheduler, TheBudgetFollowsDecodeStepsThatGetDearer) {
    recording_step rec;
    scheduler_options o = budget_options();
    o.decode_only_refresh_steps = 4;
    lane_scheduler sched(3, o, [&](std::span<step_item> items) { rec(items); });
    decode_beside_a_long_prompt(sched, [&] { rec.decode_ms = 16; }, 30);

    std::vector<int64_t> mixed_chunks;
    int decode_only_during_prompt = 0;
    bool prompt_seen = false;
    int64_t prompt_total = 0;
    for (const step_record & r : rec.steps()) {
        prompt_total += r.n_prompt;
        if (r.n_prompt > 0) prompt_seen = true;
        if (r.n_prompt > 0 && r.n_decodes > 0) mixed_chunks.push_back(r.n_prompt);
        if (prompt_seen && prompt_total < 300 && r.n_prompt == 0 && r.n_decodes > 0) ++decode_only_during_prompt;
    }
    EXPECT_EQ(prompt_total, 300);
    EXPECT_GE(decode_only_during_prompt, 1) << "decode-only steps are re-measured while the prompt runs";
    ASSERT_GE(mixed_chunks.size(), 4u);
    std::sort(mixed_chunks.begin(), mixed_chunks.end());
    // With the stale 4 ms figure a 1-token chunk looks like 13 ms a token and the
    // chunks stay at 1; re-measured, they grow towards 16.
    EXPECT_GE(mixed_chunks[mixed_chunks.size() / 2], 6) << "the chunk follows the re-measured budget";
}

// Prompts take turns: a 20-token prompt that arrives while a 300-token one is chunked
// beside two decoding lanes is done long before it, instead of getting no budget
// until the long prompt is over.
TEST(lane_scheduler, AShortPromptDuringALongOneIsNotHeldUntilItEnds) {
    recording_step rec;
    scheduler_options o = budget_options();
    lane_scheduler sched(4, o, [&](std::span<step_item> items) { rec(items); });
    std::atomic<int64_t> short_done_at{-1};
    std::thread short_prompt;
    decode_beside_a_long_prompt(
        sched,
        [&] {
            short_prompt = std::thread([&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the long prompt is under way
                std::vector<token_id> prompt(20, 5);
                EXPECT_TRUE(sched.prefill(3, 0, prompt, 512).is_ok());
                short_done_at = static_cast<int64_t>(rec.steps().size());
            });
        },
        30);
    short_prompt.join();
    const int64_t n_steps = static_cast<int64_t>(rec.steps().size());
    int64_t long_done_at = 0, prompt_total = 0;
    for (const step_record & r : rec.steps()) {
        ++long_done_at;
        prompt_total += r.n_prompt;
        if (prompt_total >= 320) break;
    }
    EXPECT_EQ(prompt_total, 320) << "every prompt token ran once";
    ASSERT_GT(short_done_at.load(), 0);
    // By the order of asking, the short prompt would end in the same step as the long
    // one (it got only what the long one left); taking turns, it ends well before.
    EXPECT_LT(short_done_at.load() + 10, long_done_at) << n_steps << " steps";
}

// A step that costs 4 ms plus, per prompt token, 4 ms from position 1000 on (attention
// over a long prefix) or 0.25 ms before it; it records every prompt chunk that ran
// beside decodes as (lane, tokens).
struct position_cost_step {
    std::mutex                               m;
    std::vector<std::pair<int32_t, int64_t>> chunks;

    void operator()(std::span<step_item> items) {
        double cost_ms = 4.0;
        bool decodes = false;
        for (step_item & it : items) {
            if (it.kind == step_kind::decode) {
                decodes = true;
                it.sampled = 1;
            } else {
                cost_ms += static_cast<double>(it.tokens.size()) * (it.pos_start >= 1000 ? 4.0 : 0.25);
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(1000 * cost_ms)));
        std::lock_guard<std::mutex> lock(m);
        for (const step_item & it : items) {
            if (decodes && it.kind == step_kind::prefill) chunks.emplace_back(it.lane, static_cast<int64_t>(it.tokens.size()));
        }
    }
    std::vector<std::pair<int32_t, int64_t>> chunks_seen() {
        std::lock_guard<std::mutex> lock(m);
        return chunks;
    }
};

// Two prompts take turns beside two decoding lanes, one far into its sequence (4 ms a
// token, as attention over a long prefix makes it) and one at its start (0.25 ms a
// token): each prompt's chunks are sized from its own cost, so the dear prompt's stay
// near its budget (2 x 4 ms a step: about 1 token) instead of taking the size the cheap
// prompt's chunks earned (about 16), and the cheap prompt is not held to the dear one's.
TEST(lane_scheduler, EachPromptsChunksFollowItsOwnCost) {
    position_cost_step step;
    lane_scheduler sched(4, budget_options(), [&](std::span<step_item> items) { step(items); });
    std::thread dear_prompt;
    decode_beside_a_long_prompt(
        sched,
        [&] {
            // Lane 2's 300 tokens (see decode_beside_a_long_prompt) are the cheap ones;
            // lane 3's 30 tokens sit at position 1000.
            dear_prompt = std::thread([&] {
                std::vector<token_id> prompt(30, 9);
                EXPECT_TRUE(sched.prefill(3, 1000, prompt, 512).is_ok());
            });
        },
        30, [&] { dear_prompt.join(); });
    std::vector<int64_t> dear, cheap_chunks;
    for (const auto & [lane, n] : step.chunks_seen()) (lane == 3 ? dear : cheap_chunks).push_back(n);
    ASSERT_GE(dear.size(), 5u);
    ASSERT_GE(cheap_chunks.size(), 5u);
    std::sort(dear.begin(), dear.end());
    std::sort(cheap_chunks.begin(), cheap_chunks.end());
    EXPECT_LE(dear[dear.size() / 2], 4) << "the dear prompt's chunks follow its own cost";
    EXPECT_GE(cheap_chunks[cheap_chunks.size() / 2], 8) << "the cheap prompt's chunks follow its own cost";
}

// A short prompt at the start of its sequence arrives while a prompt far into its own
// (4 ms a token) is chunked beside two decoding lanes, at about 1 token a step: the
// short prompt's first chunk takes a size learnt near a sequence's start (here the
// initial quarter of step_tokens, 16; its tokens cost 0.25 ms), not the dear prompt's.
TEST(lane_scheduler, APromptStartingBesideADeepOneTakesAStartsChunkSize) {
    position_cost_step step;
    lane_scheduler sched(4, budget_options(), [&](std::span<step_item> items) { step(items); });
    std::atomic<bool> prompts_done{false};
    std::vector<std::thread> decoders;
    for (int32_t lane = 0; lane < 2; ++lane) {
        decoders.emplace_back([&, lane] {
            for (int64_t pos = 0; !prompts_done.load(); ++pos) ASSERT_TRUE(sched.decode(lane, pos, 1).is_ok());
            sched.end(lane);
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // a decode-only step is learnt
    std::thread deep([&] {
        std::vector<token_id> prompt(60, 9);
        EXPECT_TRUE(sched.prefill(2, 1000, prompt, 512).is_ok());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // its chunks are down to about 1
    std::vector<token_id> prompt(20, 5);
    EXPECT_TRUE(sched.prefill(3, 0, prompt, 512).is_ok());
    deep.join();
    prompts_done.store(true);
    for (auto & t : decoders) t.join();
    sched.stop();
    std::vector<int64_t> deep_chunks;
    int64_t first_start_chunk = -1;
    for (const auto & [lane, n] : step.chunks_seen()) {
        if (lane == 2) deep_chunks.push_back(n);
        if (lane == 3 && first_start_chunk < 0) first_start_chunk = n;
    }
    ASSERT_GE(deep_chunks.size(), 5u);
    std::sort(deep_chunks.begin(), deep_chunks.end());
    EXPECT_LE(deep_chunks[deep_chunks.size() / 2], 4) << "the deep prompt's chunks follow its own cost";
    EXPECT_GE(first_start_chunk, 8) << "the new prompt's first chunk took the deep prompt's size";
}

// With nobody decoding, a prompt under way (100-token chunks at 1 ms a token) yields a
// step to a prompt that has not started: the new prompt's step holds none of the long
// prompt's tokens, so its first token does not wait for a whole long chunk.
TEST(lane_scheduler, APromptUnderWayYieldsToANewOneWhenNobodyDecodes) {
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> steps;  // (lane 2's tokens, lane 3's tokens) per step
    lane_scheduler sched(4, budget_options(), [&](std::span<step_item> items) {
        std::pair<int64_t, int64_t> r{0, 0};
        int64_t n_prompt = 0;
        for (step_item & it : items) {
            if (it.kind == step_kind::decode) {
                it.sampled = 1;
                continue;
            }
            n_prompt += static_cast<int64_t>(it.tokens.size());
            if (it.lane == 2) r.first += static_cast<int64_t>(it.tokens.size());
            if (it.lane == 3) r.second += static_cast<int64_t>(it.tokens.size());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2 + n_prompt));
        std::lock_guard<std::mutex> lock(m);
        steps.push_back(r);
    });
    std::thread long_prompt([&] {
        std::vector<token_id> prompt(400, 7);
        EXPECT_TRUE(sched.prefill(2, 0, prompt, 100).is_ok());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // its first chunk is under way
    const std::vector<token_id> turn(8, 4);
    ASSERT_TRUE(sched.prefill(3, 0, turn, 512).is_ok());
    for (int64_t pos = 8; pos < 12; ++pos) ASSERT_TRUE(sched.decode(3, pos, 1).is_ok());
    sched.end(3);
    long_prompt.join();
    sched.stop();

    std::lock_guard<std::mutex> lock(m);
    int64_t long_total = 0, short_total = 0;
    for (const auto & [l, sh] : steps) {
        long_total += l;
        short_total += sh;
    }
    EXPECT_EQ(long_total, 400);
    EXPECT_EQ(short_total, 8);
    const auto first_short = std::find_if(steps.begin(), steps.end(), [](const auto & r) { return r.second > 0; });
    ASSERT_NE(first_short, steps.end());
    EXPECT_GT(first_short - steps.begin(), 0) << "the long prompt was under way first";
    EXPECT_EQ(first_short->first, 0) << "the new prompt's step also ran " << first_short->first << " long-prompt tokens";
}

// A lane's new request arrives while a long prompt runs with nobody decoding (its
// chunks unbudgeted, as a lone prompt's are). When the lane's prompt is done it counts as
// decoding at once: the next step waits for its first decode and holds the long
// prompt to the time budget, instead of running a whole long-prompt chunk first that
// the lane's first token would wait for.
TEST(lane_scheduler, ALaneWhosePromptIsDoneCountsAsDecoding) {
    struct step_seen {
        bool    lane0_prompt = false, lane0_decode = false;
        int64_t long_tokens = 0;
    };
    std::mutex m;
    std::vector<step_seen> steps;
    lane_scheduler sched(3, budget_options(), [&](std::span<step_item> items) {
        step_seen r;
        int64_t n_prompt = 0;
        for (step_item & it : items) {
            if (it.kind == step_kind::decode) {
                it.sampled = 1;
                if (it.lane == 0) r.lane0_decode = true;
            } else {
                n_prompt += static_cast<int64_t>(it.tokens.size());
                if (it.lane == 0) r.lane0_prompt = true;
                if (it.lane == 2) r.long_tokens += static_cast<int64_t>(it.tokens.size());
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(4 + n_prompt));
        std::lock_guard<std::mutex> lock(m);
        steps.push_back(r);
    });
    // Lane 1 decodes alone first, so the scheduler knows a decode-only step's time.
    for (int64_t pos = 0; pos < 20; ++pos) ASSERT_TRUE(sched.decode(1, pos, 1).is_ok());
    sched.end(1);
    std::thread long_prompt([&] {
        std::vector<token_id> prompt(300, 7);
        EXPECT_TRUE(sched.prefill(2, 0, prompt, 16).is_ok());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // a few long-prompt steps
    const std::vector<token_id> turn(8, 4);
    ASSERT_TRUE(sched.prefill(0, 0, turn, 8).is_ok());
    for (int64_t pos = 8; pos < 28; ++pos) ASSERT_TRUE(sched.decode(0, pos, 1).is_ok());
    sched.end(0);
    long_prompt.join();
    sched.stop();

    std::lock_guard<std::mutex> lock(m);
    size_t k = 0;
    while (k < steps.size() && !steps[k].lane0_prompt) ++k;
    ASSERT_LT(k + 1, steps.size()) << "lane 0's prompt ran, and a step after it";
    EXPECT_TRUE(steps[k + 1].lane0_decode) << "the step after the prompt waited for the lane's first decode (it held "
                                           << steps[k + 1].long_tokens << " long-prompt tokens)";
    // The first chunk beside the lane takes the size last learnt (here the initial
    // quarter of step_tokens, 16); from its cost the budget is about 4 tokens a step (2 x
    // 4 ms), where the long prompt's own chunk size is 16.
    int64_t largest_beside = 0;
    for (size_t i = k + 2; i < steps.size(); ++i) {
        if (steps[i].lane0_decode) largest_beside = std::max(largest_beside, steps[i].long_tokens);
    }
    EXPECT_LE(largest_beside, 8) << "long-prompt chunks beside the lane keep to the time budget";
}

// One decode-only re-measurement while a prompt runs is slow (40 ms instead of 4, as a
// step preempted on a loaded machine): the budget does not follow that one sample, so
// the prompt's chunks stay near 4 tokens instead of growing towards 40.
TEST(lane_scheduler, OneSlowDecodeOnlyStepDoesNotSetTheBudget) {
    recording_step rec;
    std::atomic<bool> prompt_running{false};
    std::atomic<int> decode_only_during_prompt{0};
    rec.extra_ms = [&](const step_record & r) {
        const bool decode_only = r.n_prompt == 0 && r.n_decodes > 0;
        return prompt_running.load() && decode_only && ++decode_only_during_prompt == 2 ? 36 : 0;
    };
    scheduler_options o = budget_options();
    o.decode_only_refresh_steps = 4;
    lane_scheduler sched(3, o, [&](std::span<step_item> items) { rec(items); });
    decode_beside_a_long_prompt(sched, [&] { prompt_running = true; }, 30);

    ASSERT_GE(decode_only_during_prompt.load(), 3) << "the slow step and one re-measurement after it";
    int64_t prompt_total = 0, largest_mixed = 0;
    for (const step_record & r : rec.steps()) {
        prompt_total += r.n_prompt;
        if (r.n_decodes > 0) largest_mixed = std::max(largest_mixed, r.n_prompt);
    }
    EXPECT_EQ(prompt_total, 300);
    // Taken as the decode-only time, 40 ms would make the budget 80 ms: chunks doubling
    // up to 40 tokens before the next re-measurement.
    EXPECT_LE(largest_mixed, 16) << "the budget followed one slow step";
}

// Six lanes start decoding, two more while the first step runs: the first steps are
// split, but the groups merge (a step waits a moment for the lanes of the step that
// just ended) instead of alternating between six and two lanes for good.
TEST(lane_scheduler, DecodingLanesThatStartedApartShareOneStep) {
    recording_step rec;
    scheduler_options o;
    o.gather = std::chrono::milliseconds(50);  // generous: the test machine may be loaded
    constexpr int32_t n_lanes = 8;
    constexpr int n_decodes = 30;
    lane_scheduler sched(n_lanes, o, [&](std::span<step_item> items) { rec(items); });
    auto decode_lane = [&](int32_t lane) {
        for (int64_t pos = 0; pos < n_decodes; ++pos) ASSERT_TRUE(sched.decode(lane, pos, 1).is_ok());
        sched.end(lane);
    };
    std::vector<std::thread> lanes;
    for (int32_t lane = 0; lane < 6; ++lane) lanes.emplace_back(decode_lane, lane);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (int32_t lane = 6; lane < n_lanes; ++lane) lanes.emplace_back(decode_lane, lane);
    for (auto & t : lanes) t.join();
    sched.stop();

    int total = 0, whole = 0;
    const auto steps = rec.steps();
    for (const step_record & r : steps) {
        total += r.n_decodes;
        if (r.n_decodes == n_lanes) ++whole;
    }
    EXPECT_EQ(total, n_lanes * n_decodes) << "every decode ran once";
    // Split for good, no step would hold all eight; merged, nearly all do.
    EXPECT_GE(whole, n_decodes - 5) << "steps: " << steps.size();
}

// Two micro-batches (two stages, each working on one step while the other runs the
// next): eight lanes that start in three groups (3, 3 and 2, as when prompts end at
// different times) end up in two steps of four, not in three short steps for good. The
// step here stands for stage 0 (4 ms); each lane's token comes back 10 ms after its
// step (the rest of the chain), so the groups return one at a time.
TEST(lane_scheduler, MicroBatchesMergeLanesThatStartedInMoreGroups) {
    recording_step rec;
    scheduler_options o;
    o.micro_batches = 2;
    o.gather = std::chrono::milliseconds(1);
    constexpr int32_t n_lanes = 8;
    constexpr int n_decodes = 40;
    lane_scheduler sched(n_lanes, o, [&](std::span<step_item> items) { rec(items); });
    auto decode_lane = [&](int32_t lane) {
        for (int64_t pos = 0; pos < n_decodes; ++pos) {
            ASSERT_TRUE(sched.decode(lane, pos, 1).is_ok());
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        sched.end(lane);
    };
    std::vector<std::thread> lanes;
    for (int32_t lane = 0; lane < n_lanes; ++lane) {
        if (lane == 3 || lane == 6) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        lanes.emplace_back(decode_lane, lane);
    }
    for (auto & t : lanes) t.join();
    sched.stop();

    int total = 0, of_four = 0;
    const auto steps = rec.steps();
    std::string sizes;
    for (const step_record & r : steps) {
        total += r.n_decodes;
        if (r.n_decodes == 4) ++of_four;
        sizes += std::to_string(r.n_decodes) + " ";
    }
    EXPECT_EQ(total, n_lanes * n_decodes) << "every decode ran once";
    // Perfectly merged: 80 steps of four. In three groups for good: about 120 steps of
    // 3, 3 and 2.
    EXPECT_GE(of_four, 60) << "steps: " << sizes;
    EXPECT_LE(steps.size(), 95u) << "steps: " << sizes;
}

// With nobody decoding, a prompt takes its own chunk size, whatever the budget.
TEST(lane_scheduler, LonePromptTakesItsFullChunks) {
    recording_step rec;
    scheduler_options o;
    o.step_tokens = 64;
    lane_scheduler sched(2, o, [&](std::span<step_item> items) { rec(items); });
    std::vector<token_id> prompt(100, 3);
    ASSERT_TRUE(sched.prefill(1, 0, prompt, 40).is_ok());
    sched.stop();
    const auto steps = rec.steps();
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(steps[0].n_prompt, 40);
    EXPECT_EQ(steps[1].n_prompt, 40);
    EXPECT_EQ(steps[2].n_prompt, 20);
}

}  // namespace
}  // namespace skippy
