// The prefix cache over real chains (DESIGN §6): with the cache on, every output equals
// the cache-off output token for token, on 1, 2 and 3 stages; cached_tokens is the
// restored prefix; a chain hit sets every stage's bit.
#include "../model/model_fixture.h"
#include "cache_fixture.h"

namespace skippy::testing {
namespace {

std::shared_ptr<const gguf::file> model(const char * arch, const char * type) {
    synthetic_model_options o;
    o.arch = arch;
    o.n_embd = 256; o.n_layer = 3; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 512; o.n_vocab = 300; o.type = type;
    return synthetic_model(o);
}

struct cache_case {
    const char * name;
    const char * arch;
    const char * type;
    int32_t      n_stages;
};

class cache_exactness : public ::testing::TestWithParam<cache_case> {};

TEST_P(cache_exactness, CacheOnEqualsCacheOffAndReportsRestoredPrefixes) {
    const auto & c = GetParam();
    auto file = model(c.arch, c.type);
    ASSERT_NE(file, nullptr);
    cache_run_options off;
    off.n_stages = c.n_stages;
    off.cache_on = false;
    auto cold = cached_chain(file, off);
    cache_run_options on = off;
    on.cache_on = true;
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    expect_scenario_exact(*cold, *warm, c.n_stages);
}

INSTANTIATE_TEST_SUITE_P(chains, cache_exactness,
                         ::testing::Values(cache_case{"llama_q4_k_m_1", "llama", "Q4_K_M", 1},
                                           cache_case{"llama_q4_k_m_2", "llama", "Q4_K_M", 2},
                                           cache_case{"llama_q4_k_m_3", "llama", "Q4_K_M", 3},
                                           cache_case{"qwen2_q8_0_1", "qwen2", "Q8_0", 1},
                                           cache_case{"qwen2_q8_0_2", "qwen2", "Q8_0", 2},
                                           cache_case{"qwen2_q8_0_3", "qwen2", "Q8_0", 3}),
                         [](const auto & info) { return std::string(info.param.name); });

class cache_pressure : public ::testing::TestWithParam<int32_t> {};

// Many prompts through a tiny pool and one resident entry: entries are evicted and
// demoted to the exact-state tier, later restored from it, and outputs stay exact.
TEST_P(cache_pressure, EvictionAndExactStateHitsStayExact) {
    const int32_t n_stages = GetParam();
    auto file = model("llama", "Q8_0");
    cache_run_options off;
    off.n_stages = n_stages;
    off.cache_on = false;
    off.ctx = 128;
    cache_run_options on = off;
    on.cache_on = true;
    on.max_entries = 1;
    on.resident_tokens = 32;
    on.sink = std::make_shared<memory_sink>();
    auto cold = cached_chain(file, off);
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    std::vector<std::vector<token_id>> prompts;
    for (int i = 0; i < 4; ++i) prompts.push_back(tokens_of(70, 10 + i));
    for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto want = run_turn(*cold, prompts[i], 6);
            const auto got = run_turn(*warm, prompts[i], 6);
            EXPECT_EQ(got.tokens, want.tokens) << "round " << round << " prompt " << i;
            if (round == 1) EXPECT_EQ(got.cached, 69) << "round 1 prompt " << i << " restores from some tier";
            wait_for_records(*warm);
        }
    }
    EXPECT_GT(on.sink->count("skippy.kv.tier", "exact_state"), 0) << "no restore came from the exact-state tier";
}

INSTANTIATE_TEST_SUITE_P(stages, cache_pressure, ::testing::Values(1, 2, 3));

// A flipped byte in a stored exact-state block: detected, the entry quarantined, the
// error counted, and the answer still the cache-off answer.
TEST(cache_corruption, FlippedExactStateByteIsQuarantinedAndTheAnswerStaysCorrect) {
    auto file = model("qwen2", "Q4_K_M");
    cache_run_options off;
    off.cache_on = false;
    cache_run_options on;
    on.max_entries = 0;  // resident tier off: restores come from serialized pages
    auto cold = cached_chain(file, off);
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    const auto prompt = tokens_of(80, 5);
    const auto want = run_turn(*cold, prompt, 8);
    ASSERT_EQ(run_turn(*warm, prompt, 8).tokens, want.tokens);
    wait_for_records(*warm);
    auto & store = warm->cache_host()->cache()->exact_store_for_testing();
    const auto entries = store.entries_for_testing();
    ASSERT_FALSE(entries.empty());
    for (auto e : entries) {
        const auto blobs = store.blobs_for_testing(e);
        ASSERT_FALSE(blobs.empty());
        ASSERT_TRUE(store.corrupt_for_testing(blobs.front(), 100));
    }
    const auto got = run_turn(*warm, prompt, 8);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.cached, 0);
    EXPECT_GE(got.stats.kv_lookup_errors, 1u);
    EXPECT_GE(warm->cache_host()->cache()->stats().n_quarantines, 1);
    wait_for_records(*warm);
    const auto again = run_turn(*warm, prompt, 8);  // recorded afresh after the quarantine
    EXPECT_EQ(again.tokens, want.tokens);
    EXPECT_EQ(again.cached, 79);
}

// A full-prompt hit normally rides on the first decode; a request for no tokens has no
// decode, so the restore happens at once and cached_tokens counts what was restored.
TEST(cache_zero_tokens, AFullHitWithoutDecodeIsRestoredAndCounted) {
    auto file = model("llama", "Q8_0");
    for (int32_t n_stages : {1, 2, 3}) {
        cache_run_options on;
        on.n_stages = n_stages;
        auto p = cached_chain(file, on);
        ASSERT_NE(p, nullptr);
        const auto prompt = tokens_of(40, 4);
        generation_request req;
        req.prompt = prompt;
        req.max_tokens = 0;
        req.sampling.temperature = 0;
        auto first = run_generation(*p, 0, req);
        ASSERT_TRUE(first.is_ok()) << first.error().to_string();
        EXPECT_EQ(first->cached_tokens, 0);
        wait_for_records(*p);
        auto second = run_generation(*p, 0, req);
        ASSERT_TRUE(second.is_ok()) << second.error().to_string();
        EXPECT_EQ(second->cached_tokens, 39) << n_stages << " stages";
        EXPECT_TRUE(second->tokens.empty());
        const uint64_t all_stages = (uint64_t(1) << n_stages) - 1;
        EXPECT_EQ(p->last_stats(0).kv_hit_stage_mask, all_stages) << n_stages << " stages";
    }
}

TEST(cache_isolation, ClientKeysNeverShareEntries) {
    auto file = model("llama", "Q8_0");
    cache_run_options on;
    on.n_stages = 2;
    auto p = cached_chain(file, on);
    ASSERT_NE(p, nullptr);
    const auto prompt = tokens_of(40, 3);
    auto run_keyed = [&](const std::string & key) {
        generation_request req;
        req.prompt = prompt;
        req.max_tokens = 4;
        req.sampling.temperature = 0;
        req.cache_key = key;
        auto r = run_generation(*p, 0, req);
        EXPECT_TRUE(r.is_ok());
        return r.is_ok() ? r->cached_tokens : -1;
    };
    EXPECT_EQ(run_keyed("tenant-a"), 0);
    EXPECT_EQ(run_keyed("tenant-a"), 39);
    EXPECT_EQ(run_keyed("tenant-b"), 0) << "another tenant's prefix was served";
    EXPECT_EQ(run_keyed(""), 0);
}

}  // namespace
}  // namespace skippy::testing
