// End to end through the CLI, one process after another: `skippy generate --stages 2
// --kv-cache-disk D` run twice restores the second time from disk with identical
// tokens; `serve` killed with SIGKILL while it writes pages, 50 times, never serves a
// corrupt page; two `generate` processes sharing one Redis: the second hits; a hybrid
// model's second prompt restores at a checkpoint.
#include "common/test_data.h"
#include "loopback.h"
#include "tier_fakes.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <random>
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

// The port `serve` printed on its startup line, or 0 after 20 s without one.
int serve_port(background_process & serve) {
    std::smatch m;
    for (int i = 0; i < 400; ++i) {
        const std::string log = serve.log();
        if (std::regex_search(log, m, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"))) return std::stoi(m[1]);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
}

// A greedy completion's text, or "" when the request failed; `cached` (if given) gets
// usage.prompt_tokens_details.cached_tokens.
std::string complete(int port, const std::string & prompt, int64_t * cached = nullptr) {
    const std::string r = http(port, "POST", "/v1/completions",
                               nlohmann::json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}.dump());
    if (r.find("200 OK") == std::string::npos) return "";
    const auto body = nlohmann::json::parse(r.substr(r.find("\r\n\r\n") + 4), nullptr, false);
    if (body.is_discarded()) return "";
    if (cached) *cached = body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    return body["choices"][0]["text"].get<std::string>();
}

int64_t files_under(const std::string & dir) {
    int64_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
        n += it->is_regular_file(ec) ? 1 : 0;
    }
    return n;
}

// `serve --stages 2 --kv-cache-disk D`, killed with SIGKILL at a random point while a
// client keeps sending prompts that write new pages, 50 times. Every restart answers
// the checked prompts (sharing prefixes with everything written before) with the
// cache-off text, no page ever lands in quarantine (a crash never leaves a bad file
// under a final name), and each stage's directory stays within its bound.
TEST_F(cli_cache, ServeKilledAtRandomPointsWhileWritingNeverServesACorruptPage) {
    const std::string disk = dir_ + "/kv-killed";
    const int64_t bound = 512 << 10;  // per stage: a few dozen prompts, so eviction runs too
    std::string shared;
    for (int i = 0; i < 6; ++i) shared += "the quick brown fox jumps over the lazy dog ";
    std::vector<std::string> checked;
    for (const char * tail : {"and then?", "and so on.", "once more", "the end"}) checked.push_back(shared + tail);
    const std::vector<std::string> common = {"--port", "0", "-t", "1", "--lanes", "2", "--stages", "2", "--kv-cache-min-tokens", "16"};
    auto start = [&](const std::vector<std::string> & extra, const std::string & log) {
        std::vector<std::string> argv = {skippy_binary_path(), "serve", "-m", model_};
        argv.insert(argv.end(), common.begin(), common.end());
        argv.insert(argv.end(), extra.begin(), extra.end());
        return std::make_unique<background_process>(argv, dir_ + "/" + log);
    };
    std::vector<std::string> want;
    {
        auto off = start({"--kv-cache", "off"}, "serve-off.log");
        const int port = serve_port(*off);
        ASSERT_GT(port, 0) << off->log();
        for (const std::string & p : checked) want.push_back(complete(port, p));
        for (const std::string & w : want) ASSERT_FALSE(w.empty());
        off->kill_now(15);
        EXPECT_EQ(off->wait(20000), 0);
    }
    std::mt19937 rng(4242);
    int n_mid_write = 0, n_restored = 0;
    uint32_t next_prompt = 0;
    for (int round = 0; round < 50; ++round) {
        auto serve = start({"--kv-cache-disk", disk, "--kv-cache-disk-max-bytes", std::to_string(bound)},
                           "serve-kill-" + std::to_string(round) + ".log");
        const int port = serve_port(*serve);
        ASSERT_GT(port, 0) << "round " << round << ": the restart failed\n" << serve->log();
        for (size_t i = 0; i < checked.size(); ++i) {
            ASSERT_EQ(complete(port, checked[i]), want[i]) << "round " << round << " prompt " << i;
        }
        const std::string metrics = http(port, "GET", "/metrics");
        if (std::regex_search(metrics, std::regex(R"(skippy_cache_hits_total\{stage="\d",tier="disk"\} [1-9])"))) ++n_restored;
        // Writers: new prompts sharing the prefix, until the kill.
        std::atomic<bool> stop{false};
        std::thread client([&, first = next_prompt] {
            for (uint32_t i = first; !stop.load(); ++i) (void)complete(port, shared + "variant " + std::to_string(i) + " of many words");
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 600)(rng)));
        serve->kill_now(SIGKILL);
        EXPECT_EQ(serve->wait(20000), 128 + SIGKILL) << "round " << round;
        stop = true;
        client.join();
        next_prompt += 1000;
        for (const char * stage : {"/stage-0", "/stage-1"}) {
            ASSERT_LE(cache::testing::dir_bytes(disk + stage), bound) << "round " << round << stage;
            EXPECT_EQ(files_under(disk + stage + "/quarantine"), 0) << "round " << round << stage;
            n_mid_write += files_under(disk + stage + "/tmp") > 0;
        }
    }
    std::printf("serve killed 50 times: %d stage directories with a write in progress at the kill, %d restarts restored from disk\n",
                n_mid_write, n_restored);
    EXPECT_GT(n_mid_write, 0) << "no kill landed inside a page write";
    EXPECT_GT(n_restored, 25) << "the checked prompts should mostly come back from disk";
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
    // Both runs get a timeout that an ASan build under load meets: at the default 50 ms
    // the first run's publish can time out, and then the second finds nothing.
    const auto first = generate({"--kv-cache-redis", url, "--kv-cache-redis-timeout-ms", "2000"});
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[0]["cached_tokens"], 0);
    command_result second_run;
    const auto second = generate({"--kv-cache-redis", url, "--kv-cache-redis-timeout-ms", "2000"}, &second_run);
    ASSERT_EQ(second.size(), 2u);
    EXPECT_GT(second[0]["cached_tokens"].get<int>(), 32) << second_run.err;
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(second[i]["tokens"], first[i]["tokens"]) << "prompt " << i;
}

// Two `serve` replicas of the same 2-stage model and one Redis: a prefix computed
// through replica A is a hit on replica B, with A's text; with Redis stopped, both
// still answer (misses), with the same text.
TEST_F(cli_cache, TwoServeReplicasShareAPrefixThroughRedisAndSurviveItsStop) {
    if (!std::filesystem::exists("/usr/bin/redis-server")) {
        if (running_in_ci()) FAIL() << "redis-server missing";
        GTEST_SKIP() << "redis-server not installed (scripts/setup.sh installs it)";
    }
    const int redis_port = free_port();
    auto redis = std::make_unique<background_process>(
        std::vector<std::string>{"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", dir_},
        dir_ + "/redis-replicas.log");
    ASSERT_TRUE(wait_for_port("127.0.0.1", redis_port, 10000)) << redis->log();
    const std::string url = "redis://127.0.0.1:" + std::to_string(redis_port) + "/0";
    auto replica = [&](const char * name) {
        return std::make_unique<background_process>(
            std::vector<std::string>{skippy_binary_path(), "serve", "-m", model_, "--port", "0", "-t", "1", "--lanes", "1", "--stages", "2",
                                     "--kv-cache-min-tokens", "16", "--kv-cache-redis", url, "--kv-cache-redis-timeout-ms", "500"},
            dir_ + "/serve-" + name + ".log");
    };
    auto a = replica("a"), b = replica("b");
    const int port_a = serve_port(*a), port_b = serve_port(*b);
    ASSERT_GT(port_a, 0) << a->log();
    ASSERT_GT(port_b, 0) << b->log();
    std::string prompt;
    for (int i = 0; i < 10; ++i) prompt += "the quick brown fox jumps over the lazy dog ";
    int64_t cached_a = -1, cached_b = -1;
    const std::string text_a = complete(port_a, prompt + "first", &cached_a);
    ASSERT_FALSE(text_a.empty());
    EXPECT_EQ(cached_a, 0);
    // A publishes in the background: B hits once the pages are there.
    std::string text_b;
    for (int i = 0; i < 100 && cached_b <= 0; ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        text_b = complete(port_b, prompt + "first", &cached_b);
    }
    EXPECT_GT(cached_b, 32) << "B restored A's prefix from Redis\n" << b->log();
    EXPECT_EQ(text_b, text_a);

    redis->kill_now(SIGKILL);
    (void)redis->wait(5000);
    for (auto * r : {&port_a, &port_b}) {
        int64_t cached = -1;
        const std::string text = complete(*r, prompt + "second", &cached);
        EXPECT_FALSE(text.empty()) << "a request failed because Redis is gone";
        EXPECT_EQ(text, complete(port_a, prompt + "second")) << "the same answer on both replicas";
    }
    a->kill_now(15);
    b->kill_now(15);
    EXPECT_EQ(a->wait(20000), 0) << a->log();
    EXPECT_EQ(b->wait(20000), 0) << b->log();
}

// A full disk: a 160 KiB tmpfs (one stage's pages of a prompt fit, not both stages'),
// mounted in a private mount namespace, under a bound of 64 MiB. Page writes fail as
// the disk does (refused or error decisions), generation does not: the tokens of this
// process and of a second one over the same directory equal the cache-off run.
TEST_F(cli_cache, AFullDiskCostsCacheWritesNotAnswers) {
    if (::geteuid() != 0 || !std::filesystem::exists("/usr/bin/unshare")) {
        if (running_in_ci()) FAIL() << "needs root and unshare (util-linux) to mount a tmpfs";
        GTEST_SKIP() << "needs root and unshare to mount a tmpfs";
    }
    const std::string mnt = dir_ + "/full-disk";
    std::filesystem::create_directories(mnt);
    const auto cold = generate({"--kv-cache", "off"});
    ASSERT_EQ(cold.size(), 2u);
    std::string gen = skippy_binary_path() + " generate -m " + model_ + " --prompts-file " + prompts_ +
                      " -n 8 --greedy --json -t 1 --stages 2 --kv-cache-min-tokens 16 --kv-cache-disk " + mnt +
                      "/kv --kv-cache-disk-max-bytes 67108864 --telemetry-file " + dir_ + "/full-disk-events.jsonl";
    const command_result r = run_command(
        {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
         "mount -t tmpfs -o size=160k tmpfs " + mnt + " && " + gen + " && echo SECOND && " + gen + " && df -k " + mnt + " >&2"},
        300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<nlohmann::json> first, second;
    bool after = false;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        if (line == "SECOND") {
            after = true;
            continue;
        }
        (after ? second : first).push_back(nlohmann::json::parse(line));
    }
    ASSERT_EQ(first.size(), 2u);
    ASSERT_EQ(second.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(first[i]["tokens"], cold[i]["tokens"]) << "prompt " << i;
        EXPECT_EQ(second[i]["tokens"], cold[i]["tokens"]) << "prompt " << i;
    }
    // The writes that did not fit failed as the disk does (ENOSPC), each a summary-level
    // error decision, never a request error.
    std::ifstream events(dir_ + "/full-disk-events.jsonl");
    int n_write_errors = 0;
    for (std::string line; std::getline(events, line);) {
        const auto e = nlohmann::json::parse(line, nullptr, false);
        if (e.is_discarded()) continue;
        if (e.value("event", "") != "stage.kv_disk_record_done" || !e.contains("attrs")) continue;
        const std::string state = e["attrs"].value("skippy.disk_cache.record", "");
        if (state == "error" || state == "refused") ++n_write_errors;
    }
    EXPECT_GT(n_write_errors, 0) << "the tmpfs did not fill up:\n" << r.err;
    EXPECT_FALSE(std::filesystem::exists(mnt + "/kv")) << "the tmpfs was private to the namespace";
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

// The shared hybrid model (gated delta-net + attention) through the CLI, as issue 12
// states it: `generate --stages 2 --prompts-file F -n 16 --greedy --json` with two
// prompts sharing their first ~180 tokens: the second restores at least 128 (the last
// checkpoint inside the shared part, every 64 tokens) on both stages, with exactly the
// tokens of `--kv-cache off`.
TEST(cli_cache_hybrid, ASecondPromptRestoresAtACheckpointWithTheTokensOfCacheOff) {
    SKIPPY_REQUIRE_TEST_FILE(model, "models/synth-qwen35-f32.gguf");
    const std::string dir = make_temp_dir("cli-cache-hybrid");
    std::string shared;
    for (int i = 0; i < 6; ++i) shared += "Once upon a time there was a little girl named Lily who loved to play in the park with her dog. ";
    const std::string prompts = dir + "/prompts.txt";
    std::ofstream(prompts) << shared << "One day she found a red ball under a big tree.\n"
                           << shared << "Then the sun went down and everyone went home to sleep.\n";
    auto run = [&](const std::vector<std::string> & extra) {
        std::vector<std::string> args = {skippy_binary_path(), "generate", "-m", model, "--stages", "2", "--prompts-file", prompts,
                                         "-n", "16", "--greedy", "--json", "-t", "2"};
        args.insert(args.end(), extra.begin(), extra.end());
        const command_result r = run_command(args, 300);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        std::vector<nlohmann::json> lines;
        std::istringstream in(r.out);
        for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
        return lines;
    };
    const auto off = run({"--kv-cache", "off"});
    const auto on = run({});
    ASSERT_EQ(off.size(), 2u);
    ASSERT_EQ(on.size(), 2u);
    EXPECT_GT(on[1]["prompt_tokens"].get<int64_t>(), 190);
    EXPECT_EQ(on[0]["cached_tokens"].get<int64_t>(), 0);
    EXPECT_GE(on[1]["cached_tokens"].get<int64_t>(), 128);
    EXPECT_EQ(on[1]["kv_hit_stage_mask"].get<uint64_t>(), 3u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(off[i]["cached_tokens"].get<int64_t>(), 0);
        EXPECT_EQ(on[i]["tokens"], off[i]["tokens"]) << "prompt " << i;
        EXPECT_EQ(on[i]["tokens"].size(), 16u);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace skippy::testing
