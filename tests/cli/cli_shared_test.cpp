// The CLI against the shared reference data (what ../shared/tools/check-golden runs).
#include "common/test_data.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fstream>

namespace skippy::testing {
namespace {

nlohmann::json read_json(const std::string & path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

TEST(cli_shared, StoriesGreedyGenerationMatchesTheReference) {
    SKIPPY_REQUIRE_TEST_FILE(model, "models/stories260K.gguf");
    SKIPPY_REQUIRE_TEST_FILE(golden_path, "golden/stories260K.json");
    const auto golden = read_json(golden_path);
    for (const auto & c : golden["cases"]) {
        const std::string n = std::to_string(c["greedy_tokens"].size());
        auto text = run_command({skippy_binary_path(), "generate", "-m", model, "-p", c["prompt"], "-n", n, "--greedy"});
        ASSERT_EQ(text.exit_code, 0) << text.err;
        EXPECT_EQ(trim(text.out), trim(c["greedy_text"]));
        auto json = run_command({skippy_binary_path(), "generate", "-m", model, "-p", c["prompt"], "-n", n, "--greedy", "--json"});
        ASSERT_EQ(json.exit_code, 0) << json.err;
        auto j = nlohmann::json::parse(json.out);
        EXPECT_EQ(j["tokens"], c["greedy_tokens"]);
        EXPECT_EQ(j["prompt_tokens"], c["prompt_tokens"].size());
        EXPECT_EQ(j["text"], c["greedy_text"]) << "the continuation keeps its leading space";
    }
}

TEST(cli_shared, EvalLogitsMatchesTheReferenceTopTokens) {
    SKIPPY_REQUIRE_TEST_FILE(model, "models/synth-llama-f32.gguf");
    SKIPPY_REQUIRE_TEST_FILE(golden_path, "golden/synth-llama-f32.json");
    const auto golden = read_json(golden_path);
    const auto & c = golden["cases"][0];
    std::string ids;
    std::vector<int> seq = c["prompt_tokens"];
    for (int t : c["greedy_tokens"]) seq.push_back(t);
    for (size_t i = 0; i < seq.size(); ++i) ids += (i ? "," : "") + std::to_string(seq[i]);
    auto r = run_command({skippy_binary_path(), "eval-logits", "-m", model, "--tokens", ids, "--top", "8", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = nlohmann::json::parse(r.out)["positions"];
    ASSERT_EQ(got.size(), seq.size());
    for (size_t p = 0; p < seq.size(); ++p) {
        EXPECT_EQ(got[p]["top"][0][0], c["top_logits"][p]["top"][0][0]) << "position " << p;
        EXPECT_NEAR(got[p]["top"][0][1].get<double>(), c["top_logits"][p]["top"][0][1].get<double>(), 2e-3);
    }
}

TEST(cli_shared, TokenizeMatchesTheSharedVectors) {
    SKIPPY_REQUIRE_TEST_FILE(vocab, "vocab/ggml-vocab-gpt-2.gguf");
    auto r = run_command({skippy_binary_path(), "tokenize", "-m", vocab, "-p", "Hello world", "--ids", "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse("[15496, 995]"));
}

}  // namespace
}  // namespace skippy::testing
