// The cache scenario of cache_chain_test on the shared models: stories260K and two
// quantized synthetic models, on 1, 2 and 3 stages.
#include "cache_fixture.h"
#include "common/test_data.h"

namespace skippy::testing {
namespace {

struct shared_case {
    const char * model;
    int32_t      n_stages;
};

class cache_shared_models : public ::testing::TestWithParam<shared_case> {};

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

INSTANTIATE_TEST_SUITE_P(shared, cache_shared_models,
                         ::testing::Values(shared_case{"stories260K", 1}, shared_case{"stories260K", 2}, shared_case{"stories260K", 3},
                                           shared_case{"synth-llama-Q4_K_M", 1}, shared_case{"synth-llama-Q4_K_M", 2},
                                           shared_case{"synth-llama-Q4_K_M", 3}, shared_case{"synth-qwen2-Q8_0", 1},
                                           shared_case{"synth-qwen2-Q8_0", 2}, shared_case{"synth-qwen2-Q8_0", 3}),
                         [](const auto & info) {
                             std::string s = std::string(info.param.model) + "_" + std::to_string(info.param.n_stages);
                             for (char & ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

}  // namespace
}  // namespace skippy::testing
