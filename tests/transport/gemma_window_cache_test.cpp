// Gemma 3 and the prefix cache: sliding-window layers mask keys per absolute position
// while every position's K/V stays in the pool, so a prompt longer than the window
// gives the reference's greedy tokens cold, after a full cache hit (a restored prefix
// far longer than the window), and after a partial hit that ends inside the window of
// the first computed token; on 1 and 2 stages.
#include "cache_fixture.h"
#include "common/test_data.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace skippy::testing {
namespace {

class gemma_window_cache : public ::testing::TestWithParam<int32_t> {};

TEST_P(gemma_window_cache, ColdFullHitAndPartialHitGiveTheReferenceTokens) {
    const int32_t n_stages = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(model_path, "models/synth-gemma3-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(golden_path, "golden/synth-gemma3-f32.json");
    auto f = gguf::file::open(model_path);
    ASSERT_TRUE(f.is_ok());
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    const int64_t window = *file->get_int("gemma3.attention.sliding_window");
    std::ifstream in(golden_path);
    const auto golden = nlohmann::json::parse(in);
    const auto & c = golden["cases"][3];
    const std::vector<token_id> prompt = c["prompt_tokens"];
    const std::vector<token_id> greedy = c["greedy_tokens"];
    ASSERT_GT(static_cast<int64_t>(prompt.size()), 4 * window) << "the prompt must be much longer than the window";
    const int32_t n = 12;
    const std::vector<token_id> want(greedy.begin(), greedy.begin() + n);

    cache_run_options o;
    o.n_stages = n_stages;
    o.min_tokens = 8;
    auto warm = cached_chain(file, o);
    ASSERT_NE(warm, nullptr);

    const auto cold = run_turn(*warm, prompt, n, 7);
    EXPECT_EQ(cold.tokens, want) << "cold";
    EXPECT_EQ(cold.cached, 0);
    wait_for_records(*warm);

    const auto full = run_turn(*warm, prompt, n, 7);
    EXPECT_EQ(full.tokens, want) << "full hit";
    EXPECT_EQ(full.cached, static_cast<int64_t>(prompt.size()) - 1);
    EXPECT_EQ(full.stats.kv_hit_stage_mask, (uint64_t(1) << n_stages) - 1);

    // A fresh chain learns a prompt sharing the first 30 tokens, then runs the
    // reference prompt: 30 tokens restored, and the window of position 30 reaches back
    // over restored positions [30 - window + 1, 30).
    auto partial_chain = cached_chain(file, o);
    ASSERT_NE(partial_chain, nullptr);
    const int64_t shared = 30;
    std::vector<token_id> other(prompt.begin(), prompt.begin() + shared);
    for (int i = 0; i < 10; ++i) other.push_back(static_cast<token_id>(300 + i));
    (void)run_turn(*partial_chain, other, 2, 7);
    wait_for_records(*partial_chain);
    const auto partial = run_turn(*partial_chain, prompt, n, 7);
    EXPECT_EQ(partial.cached, shared);
    EXPECT_EQ(partial.tokens, want) << "partial hit inside the window";
}

INSTANTIATE_TEST_SUITE_P(stages, gemma_window_cache, ::testing::Values(1, 2),
                         [](const auto & param_info) { return std::to_string(param_info.param) + "_stages"; });

}  // namespace
}  // namespace skippy::testing
