// The skippy command as users and tooling call it, on models it makes itself.
#include "common/test_data.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace skippy::testing {
namespace {

class cli : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = make_temp_dir("cli");
        model_ = dir_ + "/tiny.gguf";
        auto r = run_command({skippy_binary_path(), "make-model", "--arch", "llama", "--n-embd", "64", "--n-layer", "2",
                              "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "400", "--type", "Q8_0",
                              "--seed", "3", "-o", model_});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    static command_result skippy(std::vector<std::string> args) {
        args.insert(args.begin(), skippy_binary_path());
        return run_command(args);
    }
    static std::vector<uint8_t> model_bytes() {
        std::ifstream in(model_, std::ios::binary);
        return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
    }
    static std::string write_file(const std::string & name, const std::vector<uint8_t> & bytes) {
        const std::string path = dir_ + "/" + name;
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        return path;
    }
    static inline std::string dir_, model_;
};

TEST_F(cli, GenerateJsonHasTheDocumentedShape) {
    auto r = skippy({"generate", "-m", model_, "-p", "hello there", "-n", "6", "--greedy", "--json", "-t", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto lines = r.out;
    ASSERT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << "exactly one JSON line on stdout";
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["index"], 0);
    EXPECT_TRUE(j["text"].is_string());
    ASSERT_TRUE(j["tokens"].is_array());
    EXPECT_LE(j["tokens"].size(), 6u);
    EXPECT_TRUE(j["prompt_tokens"].is_number_integer());
    EXPECT_GT(j["prompt_tokens"].get<int>(), 1);
    EXPECT_TRUE(j["cached_tokens"].is_number_integer());
    EXPECT_EQ(j["cached_tokens"], 0);
    EXPECT_TRUE(j["ttft_ms"].is_number());
    EXPECT_TRUE(j["total_ms"].is_number());
    EXPECT_GE(j["total_ms"].get<double>(), j["ttft_ms"].get<double>());
}

TEST_F(cli, GreedyTextMatchesJsonTextAndSeedsAreReproducible) {
    auto plain = skippy({"generate", "-m", model_, "-p", "abc", "-n", "5", "--greedy"});
    auto json = skippy({"generate", "-m", model_, "-p", "abc", "-n", "5", "--greedy", "--json"});
    ASSERT_EQ(plain.exit_code, 0);
    ASSERT_EQ(json.exit_code, 0);
    std::string text = plain.out;
    ASSERT_FALSE(text.empty());
    text.pop_back();  // the newline after the continuation
    // stdout carries the raw bytes; JSON text replaces invalid UTF-8 per byte
    EXPECT_EQ(sanitize_utf8(text), nlohmann::json::parse(json.out)["text"].get<std::string>());
    auto s1 = skippy({"generate", "-m", model_, "-p", "abc", "-n", "8", "--temp", "1.5", "--seed", "11", "--json"});
    auto s2 = skippy({"generate", "-m", model_, "-p", "abc", "-n", "8", "--temp", "1.5", "--seed", "11", "--json"});
    ASSERT_EQ(s1.exit_code, 0);
    EXPECT_EQ(nlohmann::json::parse(s1.out)["tokens"], nlohmann::json::parse(s2.out)["tokens"]);
}

TEST_F(cli, EvalLogitsPrintsTopKDescendingPerPosition) {
    auto r = skippy({"eval-logits", "-m", model_, "--tokens", "1,300,301", "--top", "5", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["positions"].size(), 3u);
    for (size_t p = 0; p < 3; ++p) {
        const auto & pos = j["positions"][p];
        EXPECT_EQ(pos["pos"], p);
        ASSERT_EQ(pos["top"].size(), 5u);
        for (size_t k = 1; k < 5; ++k) EXPECT_GE(pos["top"][k - 1][1].get<double>(), pos["top"][k][1].get<double>());
    }
}

TEST_F(cli, TokenizeIdsIsAJsonArray) {
    auto with_bos = skippy({"tokenize", "-m", model_, "-p", "hi", "--ids"});
    auto no_bos = skippy({"tokenize", "-m", model_, "-p", "hi", "--ids", "--no-bos"});
    ASSERT_EQ(with_bos.exit_code, 0);
    auto a = nlohmann::json::parse(with_bos.out), b = nlohmann::json::parse(no_bos.out);
    ASSERT_TRUE(a.is_array());
    EXPECT_EQ(a[0], 1);
    EXPECT_EQ(a.size(), b.size() + 1);
}

TEST_F(cli, UsageErrorsAreClearAndExitNonZero) {
    for (const auto & args : std::vector<std::vector<std::string>>{
             {"generate", "-m", model_, "-p", "x", "--bogus-flag"},
             {"generate", "-m", model_, "-p", "x", "--temp", "-1"},
             {"generate", "-m", model_, "-p", "x", "-n", "many"},
             {"generate", "-m", dir_ + "/missing.gguf", "-p", "x"},
             {"generate", "-m", model_},
             {"eval-logits", "-m", model_, "--tokens", "1,abc", "--json"},
             {"eval-logits", "-m", model_, "--tokens", "1,999999", "--json"},
             {"make-model", "--n-embd", "64", "-o", dir_ + "/x.gguf"},
             {"make-model", "--preset", "tiny", "--type", "Q5_Q", "-o", dir_ + "/x.gguf"},
             {"no-such-command"},
             {}}) {
        auto r = skippy(args);
        EXPECT_NE(r.exit_code, 0) << ::testing::PrintToString(args);
        EXPECT_LT(r.exit_code, 128) << "crashed: " << ::testing::PrintToString(args) << r.err;
        EXPECT_TRUE(r.out.empty()) << "stdout is for results only: " << r.out;
        EXPECT_FALSE(r.err.empty()) << ::testing::PrintToString(args);
    }
}

TEST_F(cli, EveryCommandHasHelp) {
    for (const char * cmd : {"generate", "eval-logits", "tokenize", "make-model", "bench"}) {
        auto r = skippy({cmd, "--help"});
        EXPECT_EQ(r.exit_code, 0) << cmd;
        EXPECT_NE(r.out.find("--"), std::string::npos) << cmd;
    }
}

// Malformed model files through the CLI: a clear error and exit 1, never a crash.
TEST_F(cli, MalformedModelFilesAreRefusedCleanly) {
    const auto good = model_bytes();
    ASSERT_GT(good.size(), 4096u);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> cases;
    for (size_t cut : {0ul, 3ul, 7ul, 15ul, 23ul, 40ul, 200ul, 5000ul, good.size() / 2, good.size() - 1}) {
        cases.emplace_back("truncated_" + std::to_string(cut), std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut)));
    }
    auto patched = [&](size_t offset, std::vector<uint8_t> bytes) {
        auto b = good;
        std::copy(bytes.begin(), bytes.end(), b.begin() + static_cast<long>(offset));
        return b;
    };
    cases.emplace_back("bad_magic", patched(0, {'G', 'G', 'U', 'X'}));
    cases.emplace_back("version_1", patched(4, {1, 0, 0, 0}));
    cases.emplace_back("version_9", patched(4, {9, 0, 0, 0}));
    cases.emplace_back("absurd_tensor_count", patched(8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}));
    cases.emplace_back("absurd_kv_count", patched(16, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}));
    cases.emplace_back("absurd_key_length", patched(24, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}));
    for (const auto & [name, bytes] : cases) {
        const std::string path = write_file(name + ".gguf", bytes);
        auto r = skippy({"generate", "-m", path, "-p", "x", "-n", "2"});
        EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
        EXPECT_NE(r.err.find("error"), std::string::npos) << name;
        EXPECT_TRUE(r.out.empty()) << name;
    }
}

TEST_F(cli, MakeModelPresetsAndTypesProduceLoadableModels) {
    for (const char * type : {"f32", "F16", "bf16", "Q8_0", "q4_0", "Q4_K", "Q6_K", "Q4_K_M"}) {
        const std::string path = dir_ + "/m_" + type + ".gguf";
        auto made = skippy({"make-model", "--arch", "qwen2", "--n-embd", "256", "--n-layer", "2", "--n-head", "4",
                            "--n-head-kv", "2", "--n-ff", "512", "--n-vocab", "300", "--type", type, "-o", path});
        ASSERT_EQ(made.exit_code, 0) << type << made.err;
        auto gen = skippy({"generate", "-m", path, "-p", "ab", "-n", "3", "--greedy", "--json"});
        EXPECT_EQ(gen.exit_code, 0) << type << gen.err;
    }
    auto tiny = skippy({"make-model", "--preset", "tiny", "-o", dir_ + "/preset.gguf"});
    EXPECT_EQ(tiny.exit_code, 0) << tiny.err;
}

}  // namespace
}  // namespace skippy::testing
