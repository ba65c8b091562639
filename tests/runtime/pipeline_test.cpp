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

// A pipeline that fails once where told (a lost connection, as a chain's stage 0
// reports one), and says whether such a failure may be retried.
class flaky_pipeline final : public pipeline_i {
public:
    enum class where { begin, prefill, decode };
    flaky_pipeline(pipeline_i & inner, where at, int32_t decode_index = 0) : inner_(inner), at_(at), decode_index_(decode_index) {}

    int32_t n_lanes() const override { return inner_.n_lanes(); }
    int32_t ctx_size() const override { return inner_.ctx_size(); }
    int32_t n_vocab() const override { return inner_.n_vocab(); }
    status begin(int32_t lane, const sampling_config & s, std::span<const token_id> prompt, std::string_view key) override {
        ++n_begins;
        n_decodes_ = 0;
        if (at_ == where::begin && fail()) return lost();
        return inner_.begin(lane, s, prompt, key);
    }
    status prefill(int32_t lane, int64_t pos, std::span<const token_id> tokens) override { return inner_.prefill(lane, pos, tokens); }
    status prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk, bool decodes) override {
        SKIPPY_TRY(inner_.prefill_prompt(lane, prompt, chunk, decodes));
        if (at_ == where::prefill && fail()) return lost();
        return status::ok();
    }
    result<token_id> decode(int32_t lane, int64_t pos, token_id token) override {
        if (at_ == where::decode && n_decodes_++ == decode_index_ && fail()) return lost();
        return inner_.decode(lane, pos, token);
    }
    void end(int32_t lane) override {
        ++n_ends;
        inner_.end(lane);
    }
    bool retry_before_first_token(int32_t, const status & failure) override {
        ++n_asked;
        EXPECT_EQ(failure.code(), error_code::peer_closed) << failure.to_string();
        return allow_retry;
    }

    int  n_failures_left = 1;
    bool allow_retry = true;
    int  n_begins = 0, n_ends = 0, n_asked = 0;

private:
    bool fail() {
        if (n_failures_left <= 0) return false;
        --n_failures_left;
        return true;
    }
    static status lost() { return make_error(error_code::peer_closed, "stage 1 (127.0.0.1:7101): connection closed by the peer"); }

    pipeline_i & inner_;
    const where  at_;
    const int32_t decode_index_;
    int32_t n_decodes_ = 0;
};

TEST(generation, AFailureBeforeTheFirstTokenIsRunOnceMoreAndGivesTheCleanTokens) {
    auto p = tiny_pipeline(128);
    auto req = greedy_request({1, 50, 60, 70, 80, 90}, 8);
    auto clean = run_generation(*p, 0, req);
    ASSERT_TRUE(clean.is_ok());
    for (auto at : {flaky_pipeline::where::begin, flaky_pipeline::where::prefill, flaky_pipeline::where::decode}) {
        flaky_pipeline flaky(*p, at);  // the first decode: it would have made the first token
        int n_seen = 0;
        req.on_token = [&](token_id) { return ++n_seen > 0; };
        auto again = run_generation(flaky, 0, req);
        ASSERT_TRUE(again.is_ok()) << again.error().to_string();
        EXPECT_EQ(again->tokens, clean->tokens);
        EXPECT_EQ(n_seen, 8) << "the failed attempt passed nothing on";
        EXPECT_EQ(flaky.n_asked, 1);
        EXPECT_EQ(flaky.n_begins, 2);
        // Every begin() that succeeded is ended: the failed one before the retry.
        EXPECT_EQ(flaky.n_ends, at == flaky_pipeline::where::begin ? 1 : 2);
    }
}

TEST(generation, AfterTheFirstTokenAFailureFailsTheRequest) {
    auto p = tiny_pipeline(128);
    flaky_pipeline flaky(*p, flaky_pipeline::where::decode, /*decode_index=*/2);
    auto req = greedy_request({1, 50, 60}, 8);
    int n_seen = 0;
    req.on_token = [&](token_id) { return ++n_seen > 0; };
    auto r = run_generation(flaky, 0, req);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::peer_closed);
    EXPECT_EQ(n_seen, 2) << "two tokens had been passed on";
    EXPECT_EQ(flaky.n_asked, 0) << "never retried once a token exists";
    EXPECT_EQ(flaky.n_ends, 1);
}

TEST(generation, ARetryIsAskedForOnceAndOnlyTakenWhenThePipelineSaysSo) {
    auto p = tiny_pipeline(128);
    auto req = greedy_request({1, 50, 60}, 4);
    flaky_pipeline refused(*p, flaky_pipeline::where::prefill);
    refused.allow_retry = false;
    EXPECT_EQ(run_generation(refused, 0, req).error().code(), error_code::peer_closed);
    EXPECT_EQ(refused.n_begins, 1);
    flaky_pipeline twice(*p, flaky_pipeline::where::prefill);
    twice.n_failures_left = 2;
    EXPECT_EQ(run_generation(twice, 0, req).error().code(), error_code::peer_closed);
    EXPECT_EQ(twice.n_asked, 1) << "one retry per request";
    EXPECT_EQ(twice.n_begins, 2);
    EXPECT_EQ(twice.n_ends, 2);
    EXPECT_TRUE(run_generation(*p, 0, req).is_ok()) << "the lane is usable after all of that";
}

}  // namespace
}  // namespace skippy::testing
