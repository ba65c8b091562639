// The skippy command as users and tooling call it, on models it makes itself.
#include "common/test_data.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

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

// The weights on huge pages (the default) or on the file mapping compute the same
// tokens; two stages in one process share the file and move their own layers.
TEST_F(cli, HugePagesOrNotTheTokensAreTheSame) {
    const std::vector<std::string> base = {"generate", "-m", model_, "-p", "hello there", "-n", "8", "--greedy", "--json", "-t", "1"};
    auto run = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        auto r = skippy(args);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return r.exit_code == 0 ? nlohmann::json::parse(r.out)["tokens"] : nlohmann::json();
    };
    const auto mapped = run({"--no-huge-pages"});
    ASSERT_TRUE(mapped.is_array());
    EXPECT_FALSE(mapped.empty());
    EXPECT_EQ(run({}), mapped);
    EXPECT_EQ(run({"--stages", "2"}), mapped);
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
             {"generate", "-m", model_, "-p", "x", "--kv-cache-key", std::string(257, 'k')},  // over the wire's limit
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
    for (const char * cmd : {"generate", "eval-logits", "tokenize", "make-model", "bench", "bench-cache", "split-plan", "serve-stage",
                             "serve"}) {
        auto r = skippy({cmd, "--help"});
        EXPECT_EQ(r.exit_code, 0) << cmd << r.err;
        EXPECT_NE(r.out.find("Usage:"), std::string::npos) << cmd << ": " << r.out;
        EXPECT_NE(r.out.find(std::string(cmd) + " [OPTIONS]"), std::string::npos) << cmd << ": " << r.out;
        EXPECT_NE(r.out.find("--help"), std::string::npos) << cmd;
    }
}

// One numeric flag of one command and the interval it accepts.
struct numeric_flag {
    std::vector<std::string> command;  // everything else the command needs, valid
    std::string              flag;
    std::string              below, above;  // just outside [lo, hi]
    bool                     integer = true;
};

// Every numeric flag of every command refuses values outside its range, negative
// values for unsigned types, overflow, fractions for integers and non-finite reals:
// a usage error naming the flag (exit 2), nothing on stdout.
TEST_F(cli, NumericFlagsRefuseOutOfRangeAndOverflowingValues) {
    const std::string topo = dir_ + "/numeric_topology.json";
    {
        std::ofstream out(topo);
        out << R"({"model": ")" << model_ << R"(", "stages": [{"layers": [0, 1], "endpoint": "127.0.0.1:1"},)"
            << R"( {"layers": [1, 2], "endpoint": "127.0.0.1:2"}]})";
    }
    const std::vector<std::string> gen = {"generate", "-m", model_, "-p", "x", "-n", "1"};
    const std::vector<std::string> ev = {"eval-logits", "-m", model_, "--tokens", "1,2"};
    const std::vector<std::string> mm = {"make-model", "--preset", "tiny", "-o", dir_ + "/numeric.gguf"};
    const std::vector<std::string> bench = {"bench", "-m", model_, "--prompt-tokens", "4", "--gen-tokens", "1", "--repeat", "1"};
    const std::vector<std::string> bc = {"bench-cache", "-m", model_};
    const std::vector<std::string> plan = {"split-plan", "-m", model_, "--stages", "1"};
    const std::vector<std::string> stage = {"serve-stage", "--topology", topo, "--stage", "1"};
    const std::vector<std::string> serve = {"serve", "-m", model_, "--port", "0"};
    auto i = [](std::vector<std::string> cmd, std::string flag, std::string below, std::string above) {
        return numeric_flag{std::move(cmd), std::move(flag), std::move(below), std::move(above), true};
    };
    auto r = [](std::vector<std::string> cmd, std::string flag, std::string below, std::string above) {
        return numeric_flag{std::move(cmd), std::move(flag), std::move(below), std::move(above), false};
    };
    std::vector<numeric_flag> flags = {
        i(gen, "--n-predict", "-1", "1048577"), r(gen, "--temp", "-0.5", "100.5"), i(gen, "--top-k", "-1", "16777217"),
        r(gen, "--top-p", "-0.1", "1.1"), r(gen, "--min-p", "-0.1", "1.1"), r(gen, "--repeat-penalty", "0.001", "100.5"),
        r(gen, "--presence-penalty", "-100.5", "100.5"), r(gen, "--frequency-penalty", "-100.5", "100.5"),
        i(gen, "--repeat-last-n", "-1", "1048577"), i(gen, "--seed", "-1", "9223372036854775808"),
        i(gen, "--batch-size", "0", "65537"), i(gen, "--stages", "0", "65"),
        i(ev, "--top", "0", "16777217"), i(ev, "--threads", "0", "1025"), i(ev, "--batch-size", "0", "16777217"),
        i(mm, "--n-embd", "0", "65537"), i(mm, "--n-layer", "0", "1025"), i(mm, "--n-head", "0", "4097"),
        i(mm, "--n-head-kv", "0", "4097"), i(mm, "--n-ff", "0", "1048577"), i(mm, "--n-vocab", "266", "4194305"),
        i(mm, "--seed", "-1", "18446744073709551616"),
        i(bench, "--threads", "0", "1025"), i(bench, "--prompt-tokens", "0", "1048577"), i(bench, "--gen-tokens", "-1", "1048577"),
        i(bench, "--repeat", "0", "1001"), i(bench, "--batch-size", "0", "65537"), i(bench, "--stages", "0", "65"),
        i(bc, "--stages", "0", "65"), i(bc, "--threads", "0", "1025"), i(bc, "--prefix-tokens", "7", "1048577"),
        i(bc, "--suffix-tokens", "0", "1048577"), i(bc, "--prefixes", "0", "1001"), i(bc, "--questions", "0", "1001"),
        i(bc, "--repeat", "0", "1001"), i(bc, "--batch-size", "0", "65537"), i(bc, "--check-tokens", "0", "4097"),
        i(bc, "--kv-cache-checkpoint-tokens", "-1", "16777217"),
        i(plan, "--base-port", "0", "65536"),
        i(serve, "--stages", "0", "65"),
    };
    for (auto f : {i(stage, "--stage", "0", "64"), i(stage, "--metrics-port", "-1", "65536"), i(serve, "--port", "-1", "65536"),
                   i(serve, "--queue", "-1", "4097"), i(serve, "--max-body-bytes", "1023", "4294967297"),
                   i(serve, "--batch-size", "0", "65537"), r(serve, "--queue-timeout-s", "-0.5", "86400.5")}) {
        flags.push_back(f);
    }
    // The run-time flags every stage-running command shares.
    for (const auto & cmd : {gen, stage, serve}) {
        flags.push_back(i(cmd, "--threads", "0", "1025"));
        flags.push_back(i(cmd, "--ctx-size", "0", "16777217"));
        flags.push_back(i(cmd, "--lanes", "0", "1025"));
        flags.push_back(i(cmd, "--wire-delay-ms", "-1", "60001"));
        flags.push_back(i(cmd, "--kv-cache-min-tokens", "0", "1073741825"));
        flags.push_back(i(cmd, "--kv-cache-max-entries", "-1", "1073741825"));
        flags.push_back(i(cmd, "--kv-cache-exact-max-bytes", "-1", "1125899906842625"));
        flags.push_back(i(cmd, "--kv-cache-resident-tokens", "-1", "17179869185"));
        flags.push_back(i(cmd, "--kv-cache-checkpoint-tokens", "-1", "16777217"));
    }
    // Every flag gets its two bounds; the malformed values (one parser for all flags of
    // a kind, in common.cpp) rotate over the flags, so each is tried on several flags of
    // several commands without a process per flag and value (most of a second under ASan).
    const std::vector<std::string> malformed_any = {"99999999999999999999999", "-99999999999999999999999", "x", ""};
    std::vector<std::string> malformed_int = malformed_any, malformed_real = malformed_any;
    malformed_int.insert(malformed_int.end(), {"1.5", "1e3", "0x10"});
    malformed_real.insert(malformed_real.end(), {"nan", "inf", "-inf", "1e400", "0x1p-2"});
    size_t n_int = 0, n_real = 0;
    for (const auto & f : flags) {
        const std::vector<std::string> & pool = f.integer ? malformed_int : malformed_real;
        size_t & turn = f.integer ? n_int : n_real;
        std::vector<std::string> bad = {f.below, f.above, pool[turn++ % pool.size()]};
        if (!f.integer) bad.push_back(pool[turn++ % pool.size()]);  // fewer real flags: two each
        for (const auto & value : bad) {
            auto args = f.command;
            args.push_back(f.flag);
            args.push_back(value);
            auto res = run_command([&] { args.insert(args.begin(), skippy_binary_path()); return args; }(), 30);
            const std::string what = ::testing::PrintToString(args);
            EXPECT_EQ(res.exit_code, 2) << what << "\n" << res.err;
            EXPECT_TRUE(res.out.empty()) << what << " printed: " << res.out;
            EXPECT_NE(res.err.find(f.flag), std::string::npos) << what << ": the error names the flag: " << res.err;
        }
    }
    EXPECT_GE(n_int, 2 * malformed_int.size()) << "each malformed integer tried on at least two flags";
    EXPECT_GE(n_real, malformed_real.size()) << "each malformed real tried at least once";
}

TEST_F(cli, NumericFlagsTakePlainDecimalValuesAtTheirBounds) {
    // Leading zeros are decimal (not octal), and the bounds themselves are accepted.
    auto top = skippy({"eval-logits", "-m", model_, "--tokens", "1,2", "--top", "010", "--json"});
    ASSERT_EQ(top.exit_code, 0) << top.err;
    EXPECT_EQ(nlohmann::json::parse(top.out)["positions"][0]["top"].size(), 10u) << "--top 010 is ten, not octal eight";
    auto a = skippy({"generate", "-m", model_, "-p", "abc", "-n", "2", "--greedy", "--json", "-t", "1", "--seed", "9223372036854775807"});
    EXPECT_EQ(a.exit_code, 0) << a.err;
    auto b = skippy({"make-model", "--preset", "tiny", "--n-layer", "1", "--seed", "18446744073709551615", "-o", dir_ + "/max_seed.gguf"});
    EXPECT_EQ(b.exit_code, 0) << b.err;
    auto c = skippy({"generate", "-m", model_, "-p", "abc", "-n", "2", "--temp", "1e-3", "--top-p", "1", "--min-p", "0", "--json"});
    EXPECT_EQ(c.exit_code, 0) << c.err;
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

// Parses every line of `text` as JSON.
std::vector<nlohmann::json> json_lines(const std::string & text) {
    std::vector<nlohmann::json> out;
    std::stringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
}

std::set<std::string> keys_of(const nlohmann::json & j) {
    std::set<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
    return keys;
}

TEST_F(cli, BenchJsonHasExactlyTheDocumentedKeys) {
    const std::set<std::string> want = {"model", "weight_type", "threads", "kernels", "stages", "prompt_tokens", "gen_tokens",
                                        "prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "peak_rss_bytes",
                                        "read_bandwidth_bytes_per_s", "decode_bandwidth_ratio"};
    for (int stages : {1, 2}) {
        auto r = skippy({"bench", "-m", model_, "--prompt-tokens", "8", "--gen-tokens", "3", "--repeat", "1", "-t", "1", "--stages",
                         std::to_string(stages), "--json"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one JSON object on one line: " << r.out;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(keys_of(j), want) << r.out;
        EXPECT_EQ(j["stages"], stages);
        EXPECT_EQ(j["threads"], 1);
        EXPECT_EQ(j["prompt_tokens"], 8);
        EXPECT_EQ(j["gen_tokens"], 3);
        EXPECT_EQ(j["model"], model_);
        EXPECT_EQ(j["weight_type"], "Q8_0");
        const std::set<std::string> paths = {"scalar", "avx2", "avx512", "amx"};
        EXPECT_TRUE(paths.count(j["kernels"].get<std::string>())) << j["kernels"];
        EXPECT_TRUE(j["peak_rss_bytes"].is_number_integer());
        for (const char * k : {"prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "read_bandwidth_bytes_per_s",
                               "decode_bandwidth_ratio"}) {
            EXPECT_TRUE(j[k].is_number()) << k;
        }
    }
}

// bench --concurrency N --fairness-prompt-tokens T: the concurrent figures and the
// inter-token latency of the running streams while a long prompt is prefilled.
TEST_F(cli, BenchConcurrencyReportsAggregateAndFairness) {
    // Chunks of 16 spread the long prompt over many steps, each with the streams' decodes:
    // on this tiny model one 200-token chunk takes about 2 ms, less than a request.
    auto r = skippy({"bench", "-m", model_, "--prompt-tokens", "8", "--gen-tokens", "4", "--repeat", "1", "-t", "1", "--concurrency",
                     "2", "--fairness-prompt-tokens", "200", "-b", "16", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["concurrency"], 2);
    for (const char * k : {"single_decode_tokens_per_s", "prefill_tokens_per_s"}) EXPECT_GT(j[k].get<double>(), 0.0) << k << ": " << r.out;
    // The aggregate is over the time both streams decode; 4 tokens each may not overlap
    // (aggregate_rounds 0, the figures null: BenchConcurrencyWithoutOverlapSaysSo).
    ASSERT_TRUE(j["aggregate_rounds"].is_number_integer()) << r.out;
    for (const char * k : {"aggregate_decode_tokens_per_s", "aggregate_over_single", "aggregate_over_prefill"}) {
        if (j["aggregate_rounds"] == 1) {
            EXPECT_GT(j[k].get<double>(), 0.0) << k << ": " << r.out;
        } else {
            EXPECT_TRUE(j[k].is_null()) << k << ": " << r.out;
        }
    }
    ASSERT_EQ(j["streams"].size(), 2u) << r.out;
    const auto & f = j["fairness"];
    EXPECT_EQ(f["long_prompt_tokens"], 200);
    EXPECT_GT(f["long_prompt_ms"].get<double>(), 0.0);
    EXPECT_GT(f["itl_median_ms_without"].get<double>(), 0.0);
    EXPECT_GE(f["itl_p99_ms_during"].get<double>(), f["itl_median_ms_during"].get<double>());
    EXPECT_GT(f["p99_during_over_median_without"].get<double>(), 0.0);
    EXPECT_GT(f["itl_samples_during"].get<int64_t>(), 0) << r.out;
    // Every stream's second request was made before the long prompt: its time to first
    // token is the baseline; those made while it ran may be none on this tiny model.
    EXPECT_GT(f["ttft_median_ms_before"].get<double>(), 0.0) << r.out;
    ASSERT_TRUE(f["ttft_samples_during"].is_number_integer()) << r.out;
    if (f["ttft_samples_during"].get<int64_t>() > 0) {
        EXPECT_GE(f["ttft_p99_ms_during"].get<double>(), f["ttft_median_ms_during"].get<double>()) << r.out;
    } else {
        EXPECT_TRUE(f["ttft_median_ms_during"].is_null()) << r.out;
    }
    // Streams of one token have no gaps to measure: refused, not looped forever.
    auto refused = skippy({"bench", "-m", model_, "--prompt-tokens", "8", "--gen-tokens", "1", "--repeat", "1", "-t", "1",
                           "--concurrency", "2", "--fairness-prompt-tokens", "20"});
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_NE(refused.err.find("--gen-tokens 2 or more"), std::string::npos) << refused.err;
}

// bench --micro-batches m on one stage runs what each stage of an m-stage chain runs:
// the decoding lanes spread over m steps, none with more than ceil(n / m) lanes (how
// two stages compare with one, without a second machine: docs/transport.md).
TEST_F(cli, BenchMicroBatchesCapTheLanesPerStep) {
    // Prompts of one token: every step is a step of decodes (a prompt's chunks would join
    // them as lanes of their own). Without the flag the mean is 4.
    auto r = skippy({"bench", "-m", model_, "--prompt-tokens", "1", "--gen-tokens", "16", "--repeat", "1", "-t", "1", "--concurrency",
                     "4", "--micro-batches", "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["micro_batches"], 2) << r.out;
    ASSERT_TRUE(j["concurrent_step_lanes_mean"].is_number()) << r.out;
    EXPECT_GE(j["concurrent_step_lanes_mean"].get<double>(), 1.0) << r.out;
    EXPECT_LE(j["concurrent_step_lanes_mean"].get<double>(), 2.0) << r.out;

    // The default on one stage is one step in flight.
    auto one = skippy({"bench", "-m", model_, "--prompt-tokens", "8", "--gen-tokens", "2", "--repeat", "1", "-t", "1", "--concurrency", "2",
                       "--json"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(nlohmann::json::parse(one.out)["micro_batches"], 1) << one.out;

    auto refused = skippy({"bench", "-m", model_, "--concurrency", "2", "--micro-batches", "65"});
    EXPECT_NE(refused.exit_code, 0);
}

// Streams of one token never all decode at once: no aggregate is measured, and the
// output says so (null figures, a warning) rather than printing a rate of 0.
TEST_F(cli, BenchConcurrencyWithoutOverlapSaysSo) {
    auto r = skippy({"bench", "-m", model_, "--prompt-tokens", "8", "--gen-tokens", "1", "--repeat", "2", "-t", "1", "--concurrency",
                     "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["aggregate_rounds"], 0) << r.out;
    for (const char * k : {"aggregate_decode_tokens_per_s", "aggregate_over_single", "aggregate_over_prefill"}) {
        EXPECT_TRUE(j[k].is_null()) << k << ": " << r.out;
    }
    EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0.0) << r.out;
    EXPECT_NE(r.err.find("2 of 2 rounds had no time when all 2 streams decoded at once"), std::string::npos) << r.err;
}

// The plan tiles [0, n_layer), names ports base + i, and carries an absolute model
// path, so a plan saved in another folder still finds the model.
TEST_F(cli, SplitPlanTilesTheLayersWithAnAbsoluteModelPath) {
    const std::string relative = std::filesystem::relative(model_).string();
    ASSERT_FALSE(std::filesystem::path(relative).is_absolute());
    const int port = free_port();
    auto r = skippy({"split-plan", "-m", relative, "--stages", "2", "--base-port", std::to_string(port)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto plan = nlohmann::json::parse(r.out);
    const std::string model = plan["model"];
    EXPECT_TRUE(std::filesystem::path(model).is_absolute()) << model;
    EXPECT_EQ(std::filesystem::canonical(model), std::filesystem::canonical(model_));
    ASSERT_EQ(plan["stages"].size(), 2u);
    int32_t next = 0;
    for (size_t i = 0; i < 2; ++i) {
        const auto & st = plan["stages"][i];
        EXPECT_EQ(st["layers"][0], next) << "stage " << i;
        EXPECT_GT(st["layers"][1].get<int32_t>(), next) << "stage " << i;
        next = st["layers"][1];
        EXPECT_EQ(st["endpoint"], "127.0.0.1:" + std::to_string(port + static_cast<int>(i)));
    }
    EXPECT_EQ(next, 2) << "the tiny model has 2 layers";
    // By compute unless asked otherwise, with the stages' multiply-adds.
    EXPECT_EQ(plan["split"], "compute") << r.out;
    ASSERT_EQ(plan["stage_multiply_adds_per_token"].size(), 2u) << r.out;
    for (const auto & m : plan["stage_multiply_adds_per_token"]) EXPECT_GT(m.get<int64_t>(), 0) << r.out;
    auto compute = skippy({"split-plan", "-m", relative, "--stages", "2", "--base-port", std::to_string(port), "--balance", "compute"});
    ASSERT_EQ(compute.exit_code, 0) << compute.err;
    EXPECT_EQ(compute.out, r.out);

    // --balance bytes: the tiny model's layers hold the same bytes, so an even split by
    // count; anything else is refused.
    auto bytes = skippy({"split-plan", "-m", relative, "--stages", "2", "--balance", "bytes"});
    ASSERT_EQ(bytes.exit_code, 0) << bytes.err;
    const auto by_bytes = nlohmann::json::parse(bytes.out);
    EXPECT_EQ(by_bytes["split"], "layers") << bytes.out;
    ASSERT_EQ(by_bytes["stage_weight_bytes"].size(), 2u) << bytes.out;
    auto bad = skippy({"split-plan", "-m", relative, "--stages", "2", "--balance", "flops"});
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.err.find("--balance"), std::string::npos) << bad.err;

    // A one-stage plan saved elsewhere runs with no other process: the model is found.
    const std::string elsewhere = make_temp_dir("cli_plan");
    auto one = skippy({"split-plan", "-m", relative, "--stages", "1", "--base-port", std::to_string(free_port())});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const std::string plan_path = elsewhere + "/plan.json";
    std::ofstream(plan_path) << one.out;
    auto gen = skippy({"generate", "--topology", plan_path, "-p", "abc", "-n", "3", "--greedy", "--json"});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    auto mono = skippy({"generate", "-m", model_, "-p", "abc", "-n", "3", "--greedy", "--json"});
    ASSERT_EQ(mono.exit_code, 0) << mono.err;
    EXPECT_EQ(nlohmann::json::parse(gen.out)["tokens"], nlohmann::json::parse(mono.out)["tokens"]);

    // -m naming another file than the topology's model is refused; the same file under
    // another spelling is not.
    const std::string other = dir_ + "/other_model.gguf";
    auto made = skippy({"make-model", "--preset", "tiny", "--n-layer", "2", "-o", other});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    auto wrong = skippy({"generate", "--topology", plan_path, "-m", other, "-p", "abc", "-n", "3"});
    EXPECT_EQ(wrong.exit_code, 1);
    EXPECT_TRUE(wrong.out.empty()) << wrong.out;
    EXPECT_NE(wrong.err.find("is not the model of topology"), std::string::npos) << wrong.err;
    const std::string same = std::filesystem::path(model_).parent_path().string() + "/./" + std::filesystem::path(model_).filename().string();
    auto ok = skippy({"generate", "--topology", plan_path, "-m", same, "-p", "abc", "-n", "3", "--greedy", "--json"});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_EQ(nlohmann::json::parse(ok.out)["tokens"], nlohmann::json::parse(mono.out)["tokens"]);
}

TEST_F(cli, MakeModelBench200mPresetHasTheDocumentedShape) {
    const std::string path = dir_ + "/bench200m_q4_0.gguf";
    auto made = skippy({"make-model", "--preset", "bench-200m", "--type", "Q4_0", "-o", path});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    auto f = gguf::file::open(path);
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    const gguf::file & g = **f;
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("llama.embedding_length"), 1024);
    EXPECT_EQ(g.get_int("llama.block_count"), 12);
    EXPECT_EQ(g.get_int("llama.feed_forward_length"), 2816);
    EXPECT_EQ(g.get_int("llama.attention.head_count"), 16);
    EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 4);
    EXPECT_EQ(g.get_int("llama.context_length"), 4096);
    const gguf::value * tokens = g.find("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens && tokens->as_array());
    EXPECT_EQ(tokens->as_array()->size(), 32000u);
    int64_t blocks = 0, embd_head = 0;
    for (const auto & t : g.tensors()) {
        if (t.name.rfind("blk.", 0) == 0) blocks += t.n_elements();
        else if (t.name == "token_embd.weight" || t.name == "output.weight") embd_head += t.n_elements();
        if (t.dims.size() == 2) {
            EXPECT_EQ(t.type, t.name == "output.weight" ? tensor_type::q6_k : tensor_type::q4_0) << t.name;
        }
    }
    // Per layer: q, o 1024x1024; k, v 1024x256; gate, up, down 1024x2816; two norms.
    EXPECT_EQ(blocks, 12 * (2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2816 + 2 * 1024));
    EXPECT_NEAR(static_cast<double>(blocks), 135e6, 0.5e6);
    EXPECT_EQ(embd_head, 2 * 32000 * 1024);
    EXPECT_NEAR(static_cast<double>(embd_head), 65.5e6, 0.05e6);
    ASSERT_NE(g.find_tensor("output.weight"), nullptr) << "untied head";
}

// llama.cpp's Q4_K_M: Q6_K for output.weight, and for attn_v and ffn_down in the first
// and last eighth of the layers and every third layer between; Q4_K elsewhere.
TEST_F(cli, MakeModelQ4KMGivesMoreBitsWhereLlamaCppDoes) {
    const std::map<int, std::set<int>> more_bits = {{4, {2, 3}}, {16, {0, 1, 4, 7, 10, 13, 14, 15}}};
    for (const auto & [n_layer, layers] : more_bits) {
        const std::string path = dir_ + "/q4km_" + std::to_string(n_layer) + ".gguf";
        auto made = skippy({"make-model", "--arch", "llama", "--n-embd", "256", "--n-layer", std::to_string(n_layer), "--n-head", "4",
                            "--n-head-kv", "2", "--n-ff", "256", "--n-vocab", "300", "--type", "Q4_K_M", "-o", path});
        ASSERT_EQ(made.exit_code, 0) << made.err;
        auto f = gguf::file::open(path);
        ASSERT_TRUE(f.is_ok()) << f.error().to_string();
        EXPECT_EQ((*f)->get_int("general.file_type"), 15) << "LLAMA_FTYPE_MOSTLY_Q4_K_M";
        int checked = 0;
        for (const auto & t : (*f)->tensors()) {
            if (t.dims.size() != 2) {
                EXPECT_EQ(t.type, tensor_type::f32) << t.name;
                continue;
            }
            tensor_type want = tensor_type::q4_k;
            if (t.name == "output.weight") want = tensor_type::q6_k;
            int il = -1;
            if (std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 && layers.count(il) &&
                (t.name.find(".attn_v.") != std::string::npos || t.name.find(".ffn_down.") != std::string::npos)) {
                want = tensor_type::q6_k;
            }
            EXPECT_EQ(t.type, want) << n_layer << " layers: " << t.name;
            ++checked;
        }
        EXPECT_EQ(checked, 2 + 7 * n_layer);
    }
}

TEST_F(cli, KvTypeF32AndF16BothGenerate) {
    for (const char * kv : {"f32", "f16"}) {
        auto r = skippy({"generate", "-m", model_, "-p", "hello there", "-n", "6", "--greedy", "--json", "--kv-type", kv});
        ASSERT_EQ(r.exit_code, 0) << kv << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_FALSE(j["tokens"].empty()) << kv;
        EXPECT_LE(j["tokens"].size(), 6u) << kv;
        auto e = skippy({"eval-logits", "-m", model_, "--tokens", "1,300,301", "--kv-type", kv, "--json"});
        EXPECT_EQ(e.exit_code, 0) << kv << e.err;
    }
    for (const auto & cmd : std::vector<std::vector<std::string>>{{"generate", "-m", model_, "-p", "x", "--kv-type", "q8_0"},
                                                                  {"eval-logits", "-m", model_, "--tokens", "1", "--kv-type", "F32 "},
                                                                  {"bench", "-m", model_, "--kv-type", "bf16"}}) {
        auto r = skippy(cmd);
        EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(cmd);
        EXPECT_TRUE(r.out.empty());
        EXPECT_NE(r.err.find("--kv-type"), std::string::npos) << r.err;
    }
}

// Multi-prompt runs (the shape tooling relies on), with and without the prefix cache.
class cli_prompts : public cli {
protected:
    static std::string prompts_file() {
        const std::string base = "the quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun and birds sing";
        const std::string path = dir_ + "/prompts.txt";
        std::ofstream out(path);
        out << base << "\n" << base << " then it rains\n" << base << "\n";
        return path;
    }
    static std::vector<nlohmann::json> run(std::vector<std::string> extra) {
        std::vector<std::string> args = {"generate", "-m", model_, "--prompts-file", prompts_file(), "-n", "4", "--greedy", "--json", "-t", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        auto r = skippy(args);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return json_lines(r.out);
    }
};

TEST_F(cli_prompts, OneJsonLinePerPromptAndTheCacheChangesNoToken) {
    const std::set<std::string> want_keys = {"index",         "text",    "tokens",  "prompt_tokens",    "cached_tokens",
                                             "ttft_ms",       "total_ms", "kv_hit_stage_mask", "kv_record_stage_mask"};
    for (const char * stages : {"1", "2"}) {
        const auto off = run({"--stages", stages, "--kv-cache", "off"});
        const auto on = run({"--stages", stages});
        ASSERT_EQ(off.size(), 3u);
        ASSERT_EQ(on.size(), 3u);
        for (size_t i = 0; i < 3; ++i) {
            for (const auto * lines : {&off, &on}) {
                const auto & j = (*lines)[i];
                EXPECT_EQ(keys_of(j), want_keys) << j.dump();
                EXPECT_EQ(j["index"], i);
                EXPECT_TRUE(j["text"].is_string());
                EXPECT_TRUE(j["prompt_tokens"].is_number_integer());
                EXPECT_TRUE(j["cached_tokens"].is_number_integer());
                EXPECT_TRUE(j["ttft_ms"].is_number());
                EXPECT_TRUE(j["total_ms"].is_number());
                for (const auto & t : j["tokens"]) EXPECT_TRUE(t.is_number_integer());
            }
            EXPECT_EQ(on[i]["tokens"], off[i]["tokens"]) << "stages " << stages << " prompt " << i;
            EXPECT_EQ(on[i]["text"], off[i]["text"]);
            EXPECT_EQ(on[i]["prompt_tokens"], off[i]["prompt_tokens"]);
            EXPECT_EQ(off[i]["cached_tokens"], 0) << "cache off restores nothing";
        }
        const int64_t n0 = on[0]["prompt_tokens"];
        ASSERT_GT(n0, 33) << "the shared prefix must reach --kv-cache-min-tokens (32)";
        EXPECT_EQ(on[0]["cached_tokens"], 0) << "a cold cache";
        EXPECT_GT(on[1]["cached_tokens"].get<int64_t>(), 0) << "prompt 1 extends prompt 0";
        EXPECT_LT(on[1]["cached_tokens"].get<int64_t>(), on[1]["prompt_tokens"].get<int64_t>());
        EXPECT_EQ(on[2]["cached_tokens"], n0 - 1) << "a repeated prompt restores all but its last token";
    }
}

TEST_F(cli_prompts, MinTokensAboveThePromptRestoresNothing) {
    const auto on = run({"--kv-cache-min-tokens", "1000"});
    ASSERT_EQ(on.size(), 3u);
    for (const auto & j : on) EXPECT_EQ(j["cached_tokens"], 0) << j.dump();
}

TEST_F(cli_prompts, TelemetryFileHasOneDecisionEventPerLine) {
    const std::string path = dir_ + "/telemetry.jsonl";
    std::filesystem::remove(path);
    const auto on = run({"--stages", "2", "--telemetry-file", path, "--telemetry-level", "summary"});
    ASSERT_EQ(on.size(), 3u);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const auto events = json_lines(text.str());
    ASSERT_FALSE(events.empty());
    std::set<std::string> names;
    std::set<int> stages;
    for (const auto & e : events) {
        EXPECT_EQ(keys_of(e), (std::set<std::string>{"ts_us", "event", "stage", "attrs"})) << e.dump();
        EXPECT_TRUE(e["ts_us"].is_number_integer());
        EXPECT_TRUE(e["stage"].is_number_integer());
        EXPECT_TRUE(e["attrs"].is_object());
        names.insert(e["event"].get<std::string>());
        stages.insert(e["stage"].get<int>());
    }
    EXPECT_TRUE(names.count("stage.binary_kv_lookup_decision")) << text.str();
    EXPECT_TRUE(names.count("stage.binary_kv_record_decision")) << text.str();
    EXPECT_EQ(stages, (std::set<int>{0, 1})) << "both stages report";
}

}  // namespace
}  // namespace skippy::testing
