// The cache scenario of cache_chain_test on the shared models: stories260K and two
// quantized synthetic models, on 1, 2 and 3 stages; then eviction under a tiny pool and
// exact-state restores after every resident entry was evicted.
#include "cache_fixture.h"
#include "common/test_data.h"

namespace skippy::testing {
namespace {

struct shared_case {
    const char * model;
    int32_t      n_stages;
};

class cache_shared_models : public ::testing::TestWithParam<shared_case> {};

std::shared_ptr<const gguf::file> open_shared(const std::string & path) {
    auto f = gguf::file::open(path);
    EXPECT_TRUE(f.is_ok()) << (f.is_ok() ? "" : f.error().to_string());
    if (!f.is_ok()) return nullptr;
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

TEST_P(cache_shared_models, CacheOnEqualsCacheOff) {
    const auto & c = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + c.model + ".gguf");
    auto f = gguf::file::open(path);
    ASSERT_TRUE(f.is_ok());
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    cache_run_options off;
    off.n_stages = c.n_stages;
    off.cache_on = false;
    cache_run_options on = off;
    on.cache_on = true;
    auto cold = cached_chain(file, off);
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    expect_scenario_exact(*cold, *warm, c.n_stages);
}

// Many prompts through a tiny pool and one resident entry: entries are evicted and
// demoted, later restored from the exact-state tier, and every output stays exact.
TEST_P(cache_shared_models, EvictionUnderATinyPoolStaysExact) {
    const auto & c = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + c.model + ".gguf");
    auto file = open_shared(path);
    ASSERT_NE(file, nullptr);
    const cache_run_options on = pressure_options(c.n_stages, true);
    auto cold = cached_chain(file, pressure_options(c.n_stages, false));
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    expect_pressure_exact(*cold, *warm, c.n_stages);
    for (int32_t s = 0; s < c.n_stages; ++s) {
        const auto st = stage_cache_of(*warm, s)->stats();
        EXPECT_GT(st.resident.n_evictions, 0) << "stage " << s << ": the pool never forced an eviction";
        EXPECT_GT(st.n_exact_restores, 0) << "stage " << s << ": no restore from the exact-state tier";
    }
    EXPECT_GT(on.sink->count_restores_from("exact_state"), 0);
}

// Every resident entry evicted after the records: a repeat restores the whole prompt
// from the exact-state tier on every stage, and the output stays exact.
TEST_P(cache_shared_models, ExactStateHitsAfterResidentEviction) {
    const auto & c = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("models/") + c.model + ".gguf");
    auto file = open_shared(path);
    ASSERT_NE(file, nullptr);
    cache_run_options off;
    off.n_stages = c.n_stages;
    off.cache_on = false;
    cache_run_options on = off;
    on.cache_on = true;
    on.sink = std::make_shared<memory_sink>();
    auto cold = cached_chain(file, off);
    auto warm = cached_chain(file, on);
    ASSERT_TRUE(cold && warm);
    const auto prompt = tokens_of(60, 2);
    const auto want = run_turn(*cold, prompt, 8);
    EXPECT_EQ(run_turn(*warm, prompt, 8).tokens, want.tokens);
    wait_for_records(*warm);
    on.sink->clear();
    // Stage 0 here (the test drives it); every server on its own thread when it answers
    // the probe, before the restore.
    forget_resident(*stage_cache_of(*warm, 0));
    std::vector<int32_t> servers;
    for (int32_t s = 1; s < c.n_stages; ++s) servers.push_back(s);
    if (!servers.empty()) forget_at_event(*on.sink, *warm, servers, "probe_", forget_what::resident);
    const auto got = run_turn(*warm, prompt, 8);
    on.sink->set_hook(nullptr);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.cached, 59);
    EXPECT_EQ(got.stats.kv_hit_stage_mask, (uint64_t(1) << c.n_stages) - 1);
    for (int32_t s = 0; s < c.n_stages; ++s) {
        int n = 0;
        for (const auto & e : on.sink->events()) {
            if (e.stage != s || e.name != cache::lookup_event_name) continue;
            if (memory_sink::text_attr(e, "skippy.kv.decision").rfind("probe_", 0) == 0) continue;
            if (memory_sink::int_attr(e, "skippy.kv.restored_tokens") <= 0) continue;
            EXPECT_EQ(memory_sink::text_attr(e, "skippy.kv.tier"), "exact_state") << "stage " << s;
            EXPECT_EQ(memory_sink::int_attr(e, "skippy.kv.restored_tokens"), 59) << "stage " << s;
            ++n;
        }
        EXPECT_EQ(n, 1) << "stage " << s << " restored once";
        EXPECT_EQ(stage_cache_of(*warm, s)->stats().n_exact_restores, 1) << "stage " << s;
    }
}

INSTANTIATE_TEST_SUITE_P(shared, cache_shared_models,
                         ::testing::Values(shared_case{"stories260K", 1}, shared_case{"stories260K", 2}, shared_case{"stories260K", 3},
                                           shared_case{"synth-llama-Q4_K_M", 1}, shared_case{"synth-llama-Q4_K_M", 2},
                                           shared_case{"synth-llama-Q4_K_M", 3}, shared_case{"synth-qwen2-Q8_0", 1},
                                           shared_case{"synth-qwen2-Q8_0", 2}, shared_case{"synth-qwen2-Q8_0", 3},
                                           shared_case{"synth-llama3-Q4_K_M", 2}, shared_case{"synth-qwen3-Q4_K_M", 2},
                                           shared_case{"synth-gemma3-Q4_K_M", 1}, shared_case{"synth-gemma3-Q4_K_M", 2},
                                           shared_case{"synth-phi3-Q4_K_M", 2}, shared_case{"synth-qwen3moe-Q4_K_M", 2},
                                           shared_case{"synth-gptoss-MXFP4", 2}),
                         [](const auto & param_info) {
                             std::string s = std::string(param_info.param.model) + "_" + std::to_string(param_info.param.n_stages);
                             for (char & ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

}  // namespace
}  // namespace skippy::testing
