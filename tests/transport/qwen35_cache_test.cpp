// qwen35 and the prefix cache: a stage with recurrent layers cannot restore their state
// from KV, so every lookup is a miss and every record is skipped, each with the reason
// "recurrent layers cannot be restored from KV"; a run of prompts that share prefixes
// (and repeat) gives with the cache on exactly the tokens of the cache off, nothing
// cached; on 1 and 2 stages. A make-model qwen35 built in memory.
#include "cache_fixture.h"

#include "model/synthetic.h"

namespace skippy::testing {
namespace {

std::shared_ptr<const gguf::file> q35_chain_model() {
    synthetic_model_options o;
    o.arch = "qwen35";
    o.n_embd = 64; o.n_layer = 8; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    if (!w.is_ok()) return nullptr;
    auto f = gguf::file::from_bytes(w->to_bytes());
    EXPECT_TRUE(f.is_ok());
    return f.is_ok() ? std::shared_ptr<const gguf::file>(std::move(f).value()) : nullptr;
}

class qwen35_cache : public ::testing::TestWithParam<int32_t> {};

TEST_P(qwen35_cache, CacheOnGivesTheTokensOfCacheOffAndSaysWhyItMisses) {
    const int32_t n_stages = GetParam();
    auto file = q35_chain_model();
    ASSERT_NE(file, nullptr);
    const auto a = tokens_of(60, 1);
    const auto b = concat(std::vector<token_id>(a.begin(), a.begin() + 40), tokens_of(20, 2));
    const std::vector<std::vector<token_id>> prompts = {a, b, a, concat(a, tokens_of(10, 3))};

    cache_run_options off;
    off.n_stages = n_stages;
    off.cache_on = false;
    auto cold = cached_chain(file, off);
    ASSERT_NE(cold, nullptr);
    cache_run_options on = off;
    on.cache_on = true;
    on.sink = std::make_shared<memory_sink>();
    auto warm = cached_chain(file, on);
    ASSERT_NE(warm, nullptr);

    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto want = run_turn(*cold, prompts[i], 8, 7);
        const auto got = run_turn(*warm, prompts[i], 8, 7);
        ASSERT_EQ(want.tokens.size(), 8u);
        EXPECT_EQ(got.tokens, want.tokens) << "prompt " << i << ", " << n_stages << " stages";
        EXPECT_EQ(got.cached, 0) << "prompt " << i;
        EXPECT_EQ(got.stats.kv_hit_stage_mask, 0u) << "prompt " << i;
        wait_for_records(*warm);
    }
    const std::string reason(cache::recurrent_layers_reason);
    int lookups = 0, records = 0;
    for (const auto & e : on.sink->events()) {
        if (e.name == cache::lookup_event_name) {
            ++lookups;
            EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.reason"), reason) << memory_sink::text_attr(e, "skippy.kv.decision");
            EXPECT_NE(memory_sink::text_attr(e, "skippy.kv.decision").find("miss"), std::string::npos) << "stage " << e.stage;
        } else if (e.name == cache::record_event_name) {
            ++records;
            EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.decision"), "record_skipped");
            EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.reason"), reason);
        }
    }
    EXPECT_GT(lookups, 0) << "the stages looked the prompts up";
    EXPECT_GT(records, 0) << "the stages were asked to record";
    for (int32_t s = 0; s < n_stages; ++s) {
        cache::stage_cache * c = stage_cache_of(*warm, s);
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(c->stats().index.n_entries[static_cast<size_t>(cache::entry_kind::resident)], 0) << "stage " << s;
        EXPECT_EQ(c->stats().index.n_entries[static_cast<size_t>(cache::entry_kind::exact_state)], 0) << "stage " << s;
    }
}

INSTANTIATE_TEST_SUITE_P(stages, qwen35_cache, ::testing::Values(1, 2),
                         [](const auto & param_info) { return std::to_string(param_info.param) + "_stages"; });

}  // namespace
}  // namespace skippy::testing
