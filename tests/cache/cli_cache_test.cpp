// End to end through the CLI, one process after another: `skippy generate --stages 2
// --kv-cache-disk D` run twice restores the second time from disk with identical
// tokens; two `generate` processes sharing one Redis: the second hits.
#include "common/test_data.h"
#include "loopback.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <unistd.h>
#include <fstream>
#include <sstream>
#include <thread>

namespace skippy::testing {
namespace {

// One HTTP/1.0 exchange with 127.0.0.1:port; the whole response, or "" on failure.
std::string http(int port, const std::string & method, const std::string & path, const std::string & body = "") {
    const int fd = cache::testing::connect_loopback(port);
    if (fd < 0) return "";
    const std::string req = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::string out;
    char buf[8192];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

class cli_cache : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = make_temp_dir("cli-cache");
        model_ = dir_ + "/tiny.gguf";
        auto r = run_command({skippy_binary_path(), "make-model", "--arch", "llama", "--n-embd", "64", "--n-layer", "4", "--n-head",
                              "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "400", "--type", "Q8_0", "--seed", "5", "-o",
                              model_});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        // Prompts long enough to be cached (min 32 tokens), sharing a long prefix.
        std::string shared;
        for (int i = 0; i < 12; ++i) shared += "the quick brown fox jumps over the lazy dog ";
        std::ofstream(dir_ + "/prompts.txt") << shared << "and then?\n" << shared << "and so on.\n";
        prompts_ = dir_ + "/prompts.txt";
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    static std::vector<nlohmann::json> generate(const std::vector<std::string> & extra, command_result * out = nullptr,
                                                bool expect_ok = true) {
        std::vector<std::string> args = {skippy_binary_path(), "generate", "-m", model_, "--prompts-file", prompts_, "-n", "8",
                                         "--greedy", "--json", "-t", "1", "--stages", "2", "--kv-cache-min-tokens", "16"};
        args.insert(args.end(), extra.begin(), extra.end());
        command_result r = run_command(args, 300);
        if (out) *out = r;
        if (expect_ok) {
            EXPECT_EQ(r.exit_code, 0) << r.err;
        }
        std::vector<nlohmann::json> lines;
        std::istringstream in(r.out);
        for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
        return lines;
    }
    static inline std::string dir_, model_, prompts_;
};

TEST_F(cli_cache, ASecondProcessRestoresFromDiskWithIdenticalTokens) {
    const std::string disk = dir_ + "/kv-disk";
    const auto cold = generate({"--kv-cache", "off"});
    const auto first = generate({"--kv-cache-disk", disk});
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[0]["cached_tokens"], 0);
    EXPECT_TRUE(std::filesystem::is_directory(disk + "/stage-0"));
    EXPECT_TRUE(std::filesystem::is_directory(disk + "/stage-1"));

    command_result second_run;
    const auto second = generate({"--kv-cache-disk", disk}, &second_run);
    ASSERT_EQ(second.size(), 2u);
    // The first prompt of the new process: nothing in memory, restored from disk.
    EXPECT_GT(second[0]["cached_tokens"].get<int>(), 32) << second_run.err;
    // --json names the stages that restored and recorded (bit i = stage i).
    EXPECT_EQ(second[0]["kv_hit_stage_mask"], 3) << "both stages restored from their own directory";
    EXPECT_EQ(first[0]["kv_hit_stage_mask"], 0);
    EXPECT_EQ(first[0]["kv_record_stage_mask"], 3) << "both stages recorded the cold prompt";
    EXPECT_EQ(cold[0]["kv_record_stage_mask"], 0) << "--kv-cache off records nothing";
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(second[i]["tokens"], first[i]["tokens"]) << "prompt " << i;
        EXPECT_EQ(second[i]["tokens"], cold[i]["tokens"]) << "prompt " << i << ": the cache never changes tokens";
    }
}

TEST_F(cli_cache, ASecondOwnerOfTheDirectoryIsRefused) {
    const std::string disk = dir_ + "/kv-owned";
    background_process holder({skippy_binary_path(), "serve", "-m", model_, "--port", "0", "-t", "1", "--kv-cache-disk", disk},
                              dir_ + "/holder.log");
    for (int i = 0; i < 200 && holder.log().find("listening on") == std::string::npos; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_NE(holder.log().find("listening on"), std::string::npos) << holder.log();
    command_result r;
    (void)generate({"--kv-cache-disk", disk}, &r, false);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("in use by another process"), std::string::npos) << r.err;
    holder.kill_now(15);  // SIGTERM: an orderly stop that releases the directory
    EXPECT_EQ(holder.wait(20000), 0) << holder.log();
}

TEST_F(cli_cache, TwoProcessesSharingRedisShareAPrefix) {
    const std::string bin = std::filesystem::exists("/usr/bin/redis-server") ? "/usr/bin/redis-server" : "";
    if (bin.empty()) {
        if (running_in_ci()) FAIL() << "redis-server missing";
        GTEST_SKIP() << "redis-server not installed (scripts/setup.sh installs it)";
    }
    const int port = free_port();
    background_process redis({bin, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                              dir_},
                             dir_ + "/redis.log");
    ASSERT_TRUE(wait_for_port("127.0.0.1", port, 10000)) << redis.log();
    const std::string url = "redis://127.0.0.1:" + std::to_string(port) + "/0";
    const auto first = generate({"--kv-cache-redis", url});
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[0]["cached_tokens"], 0);
    command_result second_run;
    const auto second = generate({"--kv-cache-redis", url, "--kv-cache-redis-timeout-ms", "2000"}, &second_run);
    ASSERT_EQ(second.size(), 2u);
    EXPECT_GT(second[0]["cached_tokens"].get<int>(), 32) << second_run.err;
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(second[i]["tokens"], first[i]["tokens"]) << "prompt " << i;
}

TEST_F(cli_cache, MetricsReportTheDiskAndRedisTiersAndPassPromtool) {
    if (!std::filesystem::exists("/usr/bin/promtool") || !std::filesystem::exists("/usr/bin/redis-server")) {
        if (running_in_ci()) FAIL() << "promtool or redis-server missing (scripts/setup.sh)";
        GTEST_SKIP() << "promtool or redis-server not installed";
    }
    const int redis_port = free_port();
    background_process redis({"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", dir_},
                             dir_ + "/redis-metrics.log");
    ASSERT_TRUE(wait_for_port("127.0.0.1", redis_port, 10000)) << redis.log();
    const std::string disk = dir_ + "/kv-metrics";
    background_process serve({skippy_binary_path(), "serve", "-m", model_, "--port", "0", "-t", "1", "--lanes", "1", "--stages", "2",
                              "--kv-cache-min-tokens", "16", "--kv-cache-disk", disk, "--kv-cache-redis",
                              "redis://127.0.0.1:" + std::to_string(redis_port)},
                             dir_ + "/serve-metrics.log");
    std::smatch m;
    std::string log;
    for (int i = 0; i < 400; ++i) {
        log = serve.log();
        if (std::regex_search(log, m, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"))) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(m.empty()) << log;
    const int port = std::stoi(m[1]);
    std::string prompt;
    for (int i = 0; i < 12; ++i) prompt += "the quick brown fox jumps over the lazy dog ";
    for (const char * tail : {"one", "two"}) {
        const std::string r = http(port, "POST", "/v1/completions",
                                   R"({"prompt": ")" + prompt + tail + R"(", "max_tokens": 2, "temperature": 0})");
        ASSERT_NE(r.find("200 OK"), std::string::npos) << r;
    }
    const std::string response = http(port, "GET", "/metrics");
    const std::string text = response.substr(response.find("\r\n\r\n") + 4);
    for (const char * series : {"skippy_cache_misses_total{stage=\"0\",tier=\"disk\"}", "skippy_cache_misses_total{stage=\"1\",tier=\"redis\"}",
                                "skippy_cache_bytes{stage=\"1\",tier=\"disk\"}", "skippy_cache_hits_total{stage=\"1\",tier=\"resident\"}"}) {
        EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
    }
    const std::string file = dir_ + "/metrics.txt";
    std::ofstream(file) << text;
    const command_result check = run_command({"/bin/sh", "-c", "promtool check metrics < " + file}, 60);
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    EXPECT_EQ(check.out + check.err, "") << "promtool lint findings";
    serve.kill_now(15);
    EXPECT_EQ(serve.wait(20000), 0) << serve.log();
}

}  // namespace
}  // namespace skippy::testing
