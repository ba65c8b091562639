#include "../model/model_fixture.h"
#include "runtime/pipeline.h"

#include <gtest/gtest.h>

namespace skippy::testing {
namespace {

std::unique_ptr<local_pipeline> tiny_pipeline(int32_t ctx_size, int32_t lanes = 1) {
    synthetic_model_options o;
    o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    auto file = synthetic_model(o);
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = ctx_size;
    so.n_lanes = lanes;
    auto st = stage::load(file, so);
    EXPECT_TRUE(st.is_ok());
    return std::make_unique<local_pipeline>(std::move(st).value());
}

generation_request greedy_request(std::vector<token_id> prompt, int32_t max_tokens) {
    generation_request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
}

TEST(generation, ChunkSizeDoesNotChangeGreedyTokens) {
    auto p = tiny_pipeline(128);
    std::vector<token_id> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 37) % 290);
    auto a_req = greedy_request(prompt, 12);
    a_req.prefill_chunk_tokens = 512;
    auto b_req = a_req;
    b_req.prefill_chunk_tokens = 3;
    auto a = run_generation(*p, 0, a_req);
    auto b = run_generation(*p, 0, b_req);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a->tokens.size(), 12u);
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_EQ(a->prompt_tokens, 40);
    EXPECT_EQ(a->finish, finish_reason::length);
}

TEST(generation, LanesAreIndependent) {
    auto p = tiny_pipeline(64, 2);
    auto req = greedy_request({1, 50, 60, 70, 80}, 8);
    auto alone = run_generation(*p, 0, req);
    auto other = run_generation(*p, 1, greedy_request({1, 9, 9, 9}, 8));
    auto again = run_generation(*p, 1, req);
    ASSERT_TRUE(alone.is_ok() && other.is_ok() && again.is_ok());
    EXPECT_EQ(alone->tokens, again->tokens);
}

TEST(generation, StopsAtEndOfGenerationAndOnCallback) {
    auto p = tiny_pipeline(64);
    auto req = greedy_request({1, 50, 60}, 10);
    auto full = run_generation(*p, 0, req);
    ASSERT_TRUE(full.is_ok());
    ASSERT_GE(full->tokens.size(), 3u);
    const token_id third = full->tokens[2];
    req.is_end_of_generation = [&](token_id t) { return t == third; };
    auto eog = run_generation(*p, 0, req);
    ASSERT_TRUE(eog.is_ok());
    EXPECT_EQ(eog->finish, finish_reason::end_of_generation);
    EXPECT_LE(eog->tokens.size(), 2u);
    int seen = 0;
    auto cb = greedy_request({1, 50, 60}, 10);
    cb.on_token = [&](token_id) { return ++seen < 4; };
    auto stopped = run_generation(*p, 0, cb);
    ASSERT_TRUE(stopped.is_ok());
    EXPECT_EQ(stopped->tokens.size(), 4u);
    EXPECT_EQ(stopped->finish, finish_reason::stop);
}

TEST(generation, BadRequestsAreErrorsNotCrashes) {
    auto p = tiny_pipeline(16);
    EXPECT_EQ(run_generation(*p, 0, greedy_request({}, 4)).error().code(), error_code::invalid_argument);
    EXPECT_EQ(run_generation(*p, 0, greedy_request({1, 5000}, 4)).error().code(), error_code::invalid_argument);
    std::vector<token_id> too_long(17, 5);
    EXPECT_EQ(run_generation(*p, 0, greedy_request(too_long, 4)).error().code(), error_code::invalid_argument);
    EXPECT_FALSE(run_generation(*p, 3, greedy_request({1, 2}, 4)).is_ok());
    // the context fills up: generation stops with "length" instead of failing
    auto full = run_generation(*p, 0, greedy_request(std::vector<token_id>(10, 5), 100));
    ASSERT_TRUE(full.is_ok());
    EXPECT_EQ(full->tokens.size(), 7u);  // positions 9..15 decode
    // the lane is usable after all of that
    EXPECT_TRUE(run_generation(*p, 0, greedy_request({1, 2, 3}, 2)).is_ok());
}

}  // namespace
}  // namespace skippy::testing
