// Split parity: every split of every shared model gives the tokens of the monolithic
// run, bit for bit; stories260K also matches the reference greedy tokens.
#include "chain_fixture.h"
#include "common/test_data.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace skippy::testing {
namespace {

class chain_parity : public ::testing::TestWithParam<std::string> {};

TEST_P(chain_parity, EverySplitMatchesTheMonolithicRun) {
    const std::string name = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(model_path, "models/" + name + ".gguf");
    SKIPPY_REQUIRE_TEST_FILE(golden_path, "golden/" + name + ".json");
    auto f = gguf::file::open(model_path);
    ASSERT_TRUE(f.is_ok());
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    std::ifstream in(golden_path);
    const auto golden = nlohmann::json::parse(in);
    const int32_t n_layer = static_cast<int32_t>(*file->get_int(*file->get_string("general.architecture") + ".block_count"));

    auto whole = embedded_chain(file, 1);
    ASSERT_NE(whole, nullptr);
    std::vector<std::vector<token_id>> reference;
    for (const auto & c : golden["cases"]) {
        reference.push_back(greedy_tokens(*whole, c["prompt_tokens"], static_cast<int32_t>(c["greedy_tokens"].size())));
        if (name == "stories260K") {
            EXPECT_EQ(reference.back(), c["greedy_tokens"].get<std::vector<token_id>>());
        }
    }
    std::vector<int32_t> splits = {2, 3};
    if (name == "stories260K") splits.push_back(5);
    for (const char * family : {"synth-llama3-", "synth-qwen3-", "synth-gemma3-", "synth-phi3-", "synth-gptoss-", "synth-qwen35-"}) {
        if (name.starts_with(family)) splits.push_back(4);
    }
    for (int32_t n_stages : splits) {
        if (n_stages > n_layer) continue;
        auto chain = embedded_chain(file, n_stages, 1, 2);
        ASSERT_NE(chain, nullptr);
        for (size_t i = 0; i < golden["cases"].size(); ++i) {
            const auto & c = golden["cases"][i];
            // chunks of 3 exercise the credit window and pipelined prefill
            EXPECT_EQ(greedy_tokens(*chain, c["prompt_tokens"], static_cast<int32_t>(c["greedy_tokens"].size()), 0, 3),
                      reference[i])
                << name << ", " << n_stages << " stages, case " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(shared, chain_parity,
                         ::testing::Values("stories260K", "synth-llama-f32", "synth-llama-F16", "synth-llama-BF16",
                                           "synth-llama-Q8_0", "synth-llama-Q4_0", "synth-llama-Q4_K-pure",
                                           "synth-llama-Q4_K_M", "synth-llama-Q6_K", "synth-qwen2-f32",
                                           "synth-qwen2-Q8_0", "synth-qwen2-Q4_K_M", "synth-llama-Q5_0",
                                           "synth-llama-Q5_1", "synth-llama-Q5_K_M", "synth-llama-Q3_K_M",
                                           "synth-llama-Q2_K", "synth-llama-IQ4_NL", "synth-llama-IQ4_XS",
                                           "synth-llama3-f32", "synth-llama3-Q4_K_M", "synth-qwen3-f32",
                                           "synth-qwen3-Q4_K_M", "synth-gemma3-f32", "synth-gemma3-Q4_K_M",
                                           "synth-phi3-f32", "synth-phi3-Q4_K_M", "synth-qwen3moe-f32",
                                           "synth-qwen3moe-Q4_K_M", "synth-gptoss-f32", "synth-gptoss-MXFP4", "synth-qwen35-f32"),
                         [](const auto & param_info) {
                             std::string s = param_info.param;
                             for (char & ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return s;
                         });

}  // namespace
}  // namespace skippy::testing
