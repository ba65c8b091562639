// The CLI against the shared reference data (what ../shared/tools/check-golden runs).
#include "common/test_data.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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

// --kernels: every path this CPU runs prints the same positions (bitwise the same
// logits, as JSON numbers), a path it lacks is refused with exit 2 and the missing
// feature, and bench reports the path it ran.
TEST(cli_shared, EvalLogitsPrintsTheSamePositionsOnEveryKernelPath) {
    SKIPPY_REQUIRE_TEST_FILE(model, "models/synth-llama-Q4_K_M.gguf");
    std::string ids;
    for (int i = 0; i < 37; ++i) ids += (i ? "," : "") + std::to_string((i * 7919 + 11) % 500);
    const auto run_path = [&](const std::string & path) {
        return run_command({skippy_binary_path(), "eval-logits", "-m", model, "--tokens", ids, "--top", "8", "--json",
                            "--kernels", path});
    };
    const auto reference = run_path("scalar");
    ASSERT_EQ(reference.exit_code, 0) << reference.err;
    ASSERT_EQ(nlohmann::json::parse(reference.out)["positions"].size(), 37u);
    int n_run = 0;
    for (const std::string path : {"avx2", "avx512", "amx", "auto"}) {
        const auto r = run_path(path);
        if (r.exit_code == 2 && r.err.find("needs") != std::string::npos) {
            EXPECT_NE(r.err.find("this CPU or system lacks"), std::string::npos) << r.err;
            EXPECT_TRUE(r.out.empty());
            std::printf("--kernels %s refused here: %s", path.c_str(), r.err.c_str());
            continue;
        }
        ASSERT_EQ(r.exit_code, 0) << path << ": " << r.err;
        EXPECT_EQ(r.out, reference.out) << "--kernels " << path;
        ++n_run;
    }
    EXPECT_GE(n_run, 1) << "auto always runs";
    const auto bogus = run_path("avx9000");
    EXPECT_EQ(bogus.exit_code, 2);
    EXPECT_TRUE(bogus.out.empty());
    const auto bench = run_command({skippy_binary_path(), "bench", "-m", model, "--prompt-tokens", "16", "--gen-tokens", "2",
                                    "--repeat", "1", "-t", "1", "--kernels", "scalar", "--json"});
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    EXPECT_EQ(nlohmann::json::parse(bench.out)["kernels"], "scalar");
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

// The .inp strings of a shared vocabulary (split like ../shared/tools/check-golden)
// and the expected ids of each, as JSON arrays.
std::vector<std::pair<std::string, nlohmann::json>> vocab_cases(const std::string & inp_path, const std::string & out_path) {
    std::ifstream inp(inp_path), out(out_path);
    std::stringstream text;
    text << inp.rdbuf();
    const std::string all = text.str(), sep = "\n__ggml_vocab_test__\n", tail = "\n__ggml_vocab_test__";
    std::vector<std::string> inputs;
    for (size_t start = 0;;) {
        const size_t at = all.find(sep, start);
        inputs.push_back(all.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) break;
        start = at + sep.size();
    }
    if (inputs.back().size() >= tail.size() && inputs.back().compare(inputs.back().size() - tail.size(), tail.size(), tail) == 0) {
        inputs.back().resize(inputs.back().size() - tail.size());
    }
    std::vector<std::pair<std::string, nlohmann::json>> cases;
    std::string line;
    for (size_t i = 0; i < inputs.size() && std::getline(out, line); ++i) {
        nlohmann::json ids = nlohmann::json::array();
        std::stringstream fields(line);
        long long id = 0;
        while (fields >> id) ids.push_back(id);
        if (!inputs[i].empty()) cases.emplace_back(inputs[i], ids);
    }
    return cases;
}

// make-model --vocab-from copies a vocabulary: the model then tokenizes exactly as the
// vocabulary file is expected to (the shared vectors).
TEST(cli_shared, MakeModelVocabFromTokenizesLikeThatVocabulary) {
    const std::string dir = make_temp_dir("cli_vocab");
    for (const std::string name : {"gpt-2", "llama-spm"}) {
        SKIPPY_REQUIRE_TEST_FILE(vocab, "vocab/ggml-vocab-" + name + ".gguf");
        SKIPPY_REQUIRE_TEST_FILE(inp, "vocab/ggml-vocab-" + name + ".gguf.inp");
        SKIPPY_REQUIRE_TEST_FILE(out, "vocab/ggml-vocab-" + name + ".gguf.out");
        const std::string model = dir + "/" + name + ".gguf";
        auto made = run_command({skippy_binary_path(), "make-model", "--arch", "llama", "--n-embd", "32", "--n-layer", "1", "--n-head", "2",
                                 "--n-head-kv", "1", "--n-ff", "32", "--vocab-from", vocab, "--type", "Q8_0", "-o", model});
        ASSERT_EQ(made.exit_code, 0) << made.err;
        const auto cases = vocab_cases(inp, out);
        ASSERT_GE(cases.size(), 10u) << name;
        // Every case through the made file's tokenizer in process; every eighth also
        // through the CLI (a process per string costs most of a second under ASan).
        auto file = gguf::file::open(model);
        ASSERT_TRUE(file.is_ok()) << file.error().to_string();
        auto tok = tokenizer::from_gguf(**file);
        ASSERT_TRUE(tok.is_ok()) << tok.error().to_string();
        for (size_t k = 0; k < cases.size(); ++k) {
            const auto & [text, ids] = cases[k];
            EXPECT_EQ(nlohmann::json((*tok)->tokenize(text, false, false)), ids) << name << ": " << nlohmann::json(text).dump();
            if (k % 8 != 0) continue;
            auto r = run_command({skippy_binary_path(), "tokenize", "-m", model, "-p", text, "--ids", "--no-bos"});
            ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
            EXPECT_EQ(nlohmann::json::parse(r.out), ids) << name << ": " << nlohmann::json(text).dump();
        }
        // BOS as the vocabulary's metadata says (SPM adds it, GPT-2 does not).
        auto with_bos = run_command({skippy_binary_path(), "tokenize", "-m", model, "-p", "Hello world", "--ids"});
        auto of_vocab = run_command({skippy_binary_path(), "tokenize", "-m", vocab, "-p", "Hello world", "--ids"});
        ASSERT_EQ(with_bos.exit_code, 0) << with_bos.err;
        EXPECT_EQ(with_bos.out, of_vocab.out) << name;
        // The model runs with the copied vocabulary.
        auto gen = run_command({skippy_binary_path(), "generate", "-m", model, "-p", "Hello world", "-n", "3", "--greedy", "--json"});
        ASSERT_EQ(gen.exit_code, 0) << name << ": " << gen.err;
        const auto generated = nlohmann::json::parse(gen.out);  // a range-for over a temporary's member dangles
        for (const auto & t : generated["tokens"]) EXPECT_LT(t.get<int64_t>(), 60000) << name;
    }
}

// Split parity through the CLI: generate --json --greedy --stages N gives the tokens of
// the monolithic run (and, for stories260K, the reference's).
TEST(cli_shared, StageSplitsGiveTheMonolithicTokens) {
    for (const std::string name : {"stories260K", "synth-llama-Q4_K_M"}) {
        SKIPPY_REQUIRE_TEST_FILE(model, "models/" + name + ".gguf");
        SKIPPY_REQUIRE_TEST_FILE(golden_path, "golden/" + name + ".json");
        const auto golden = read_json(golden_path);
        size_t n_cases = 0;
        for (const auto & c : golden["cases"]) {
            if (n_cases++ == 2) break;  // two prompts per model keep this quick
            const std::string n = std::to_string(c["greedy_tokens"].size());
            auto gen = [&](const std::string & stages) {
                auto r = run_command({skippy_binary_path(), "generate", "-m", model, "-p", c["prompt"], "-n", n, "--greedy", "--json",
                                      "--stages", stages, "-t", "1"});
                EXPECT_EQ(r.exit_code, 0) << name << " --stages " << stages << ": " << r.err;
                return r.exit_code == 0 ? nlohmann::json::parse(r.out)["tokens"] : nlohmann::json();
            };
            const auto mono = gen("1");
            ASSERT_FALSE(mono.is_null());
            if (name == "stories260K") {
                EXPECT_EQ(mono, c["greedy_tokens"]);
            }
            for (const char * stages : {"2", "3"}) EXPECT_EQ(gen(stages), mono) << name << " --stages " << stages;
        }
    }
}

}  // namespace
}  // namespace skippy::testing
