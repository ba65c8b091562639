// Chains of separate OS processes on loopback: `skippy serve-stage` for stages >= 1
// and stage 0 either as `skippy generate --topology` or in this test process.
#include "chain_fixture.h"
#include "common/test_data.h"

#include <nlohmann/json.hpp>

#include <csignal>
#include <condition_variable>
#include <mutex>
#include <fstream>
#include <functional>
#include <thread>

#include "transport/liveness.h"

namespace skippy::testing {
namespace {

using namespace std::chrono_literals;

bool wait_for_log(background_process & p, const std::string & needle, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
        if (p.log().find(needle) != std::string::npos) return true;
        if (!p.running()) return false;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

class chain_process : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = make_temp_dir("chain");
        model_ = dir_ + "/m.gguf";
        auto r = run_command({skippy_binary_path(), "make-model", "--arch", "llama", "--n-embd", "64", "--n-layer", "6",
                              "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "300", "--type", "Q8_0",
                              "-o", model_});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }

    // A 3-stage topology on free loopback ports.
    std::string write_topology(const std::string & name) {
        ports_ = {free_port(), free_port(), free_port()};
        nlohmann::json t;
        t["model"] = "m.gguf";  // relative to the topology file's folder
        t["stages"] = {{{"layers", {0, 2}}, {"endpoint", "127.0.0.1:" + std::to_string(ports_[0])}},
                       {{"layers", {2, 4}}, {"endpoint", "127.0.0.1:" + std::to_string(ports_[1])}},
                       {{"layers", {4, 6}}, {"endpoint", "127.0.0.1:" + std::to_string(ports_[2])}}};
        const std::string path = dir_ + "/" + name + ".json";
        std::ofstream(path) << t.dump();
        return path;
    }

    std::unique_ptr<background_process> start_stage(const std::string & topo, int index, std::vector<std::string> extra = {},
                                                    int lanes = 2) {
        std::vector<std::string> argv = {skippy_binary_path(), "serve-stage", "--topology", topo, "--stage", std::to_string(index),
                                         "-t", "1", "--lanes", std::to_string(lanes)};
        argv.insert(argv.end(), extra.begin(), extra.end());
        auto p = std::make_unique<background_process>(argv, dir_ + "/stage" + std::to_string(index) + "-" + std::to_string(++n_logs_) + ".log");
        EXPECT_TRUE(wait_for_log(*p, "listening on", 20000)) << p->log();
        return p;
    }

    std::vector<token_id> cli_tokens(const std::vector<std::string> & where) {
        std::vector<std::string> argv = {skippy_binary_path(), "generate", "-p", "the quick brown fox", "-n", "12", "--greedy",
                                         "--json", "-t", "1"};
        argv.insert(argv.end(), where.begin(), where.end());
        auto r = run_command(argv);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        if (r.exit_code != 0) return {};
        return nlohmann::json::parse(r.out)["tokens"].get<std::vector<token_id>>();
    }

    static inline std::string dir_, model_;
    std::vector<int> ports_;
    static inline int n_logs_ = 0;  // unique log names across the suite
};

TEST_F(chain_process, SeparateProcessesMatchTheMonolithicRun) {
    const std::string topo = write_topology("parity");
    auto s1 = start_stage(topo, 1);
    auto s2 = start_stage(topo, 2);
    const auto whole = cli_tokens({"-m", model_});
    ASSERT_EQ(whole.size(), 12u);
    EXPECT_EQ(cli_tokens({"--topology", topo}), whole);
    EXPECT_EQ(cli_tokens({"--topology", topo}), whole) << "a second request on the same stage processes";
    EXPECT_EQ(cli_tokens({"-m", model_, "--stages", "3"}), whole);
}

TEST_F(chain_process, KillingAMiddleStageFailsTheRequestAndARestartRecovers) {
    const std::string topo_path = write_topology("kill");
    auto s1 = start_stage(topo_path, 1);
    auto s2 = start_stage(topo_path, 2);
    transport::chain_options slow;
    slow.link.wire_delay_ms = 5;  // keeps generation going long enough to kill a stage in the middle
    auto chain = local_stage0(topo_path, 2, slow);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 40, 41, 42, 43, 44};
    const auto reference = greedy_tokens(*chain, prompt, 8);
    ASSERT_EQ(reference.size(), 8u);

    generation_request req;
    req.prompt = prompt;
    req.max_tokens = 1000;
    req.sampling.temperature = 0;
    std::mutex m;
    std::condition_variable cv;
    int produced = 0;
    bool finished = false;
    req.on_token = [&](token_id) {
        {
            std::lock_guard<std::mutex> lock(m);
            ++produced;
        }
        cv.notify_all();
        return true;
    };
    std::chrono::steady_clock::time_point killed_at;
    bool killed = false;
    std::thread killer([&] {
        std::unique_lock<std::mutex> lock(m);
        // Bounded: if generation ends (or stalls) before 5 tokens, give up instead of hanging.
        if (!cv.wait_for(lock, 60s, [&] { return produced >= 5 || finished; }) || finished) return;
        killed_at = std::chrono::steady_clock::now();
        killed = true;
        s1->kill_now(9);
    });
    auto res = run_generation(*chain, 0, req);
    const auto failed_at = std::chrono::steady_clock::now();
    {
        std::lock_guard<std::mutex> lock(m);
        finished = true;
    }
    cv.notify_all();
    killer.join();
    ASSERT_TRUE(killed) << "generation ended before the stage could be killed";
    ASSERT_FALSE(res.is_ok()) << "generation continued after its middle stage died";
    // A clean close or a reset, both of the `unavailable` class.
    EXPECT_TRUE(res.error().code() == error_code::unavailable || res.error().code() == error_code::peer_closed)
        << res.error().to_string();
    // Stage 1 died; stage 2 only lost its upstream. The error names stage 1 — as stage 0's
    // forward peer ("stage 1 (127.0.0.1:p): connection closed by the peer") or, when stage
    // 2's link was reset and it sent its reason, as the peer stage 2 lost ("stage 2: stage 1:
    // recv failed: ...") — never stage 2's return link as if stage 2 had failed.
    EXPECT_NE(res.error().message().find("stage 1"), std::string::npos) << res.error().to_string();
    EXPECT_EQ(res.error().message().find("stage 2 (return)"), std::string::npos) << res.error().to_string();
    EXPECT_LT(failed_at - killed_at, 5s) << "the issue asks for a clear error within 5 s";

    // Reap the killed stage before reusing its port: the kernel closes a dying process's
    // listening socket only after unmapping its memory, which under TSan (terabytes of
    // shadow mappings) can outlast the restart below ("Address already in use").
    EXPECT_EQ(s1->wait(20000), 128 + 9) << "the killed stage has not exited";
    s1 = start_stage(topo_path, 1);
    auto again = greedy_tokens(*chain, prompt, 8);
    EXPECT_EQ(again, reference) << "the lane is rebuilt after the restart";
}

TEST_F(chain_process, DownstreamFailuresReachStageZeroWithTheirReason) {
    const std::string topo = write_topology("ctx");
    auto s1 = start_stage(topo, 1);
    auto s2 = start_stage(topo, 2, {"--ctx-size", "8"});  // smaller context than stage 0's
    auto r = run_command({skippy_binary_path(), "generate", "--topology", topo, "-p", "a b c d e f g h i j k l m n o p",
                          "-n", "4", "-t", "1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("stage 2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
    auto ok = run_command({skippy_binary_path(), "generate", "--topology", topo, "-p", "a", "-n", "2", "-t", "1"});
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(chain_process, StageKeyIsRequiredWhenConfigured) {
    const std::string topo = write_topology("auth");
    const std::string key = dir_ + "/stage.key", wrong = dir_ + "/wrong.key";
    std::ofstream(key) << "a stage key of more than sixteen bytes\n";
    std::ofstream(wrong) << "another key, also long enough\n";
    auto s1 = start_stage(topo, 1, {"--stage-key-file", key});
    auto s2 = start_stage(topo, 2, {"--stage-key-file", key});
    EXPECT_NE(s1->log().find("stage links authenticated"), std::string::npos) << s1->log();
    for (const std::vector<std::string> & flags : {std::vector<std::string>{}, std::vector<std::string>{"--stage-key-file", wrong}}) {
        std::vector<std::string> argv = {skippy_binary_path(), "generate", "--topology", topo, "-p", "a", "-n", "2"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        auto refused = run_command(argv);
        EXPECT_EQ(refused.exit_code, 1);
        EXPECT_NE(refused.err.find("permission"), std::string::npos) << refused.err;
        EXPECT_EQ(refused.err.find("sixteen"), std::string::npos) << "a key must never be printed";
    }
    auto accepted = run_command({skippy_binary_path(), "generate", "--topology", topo, "-p", "a", "-n", "2", "--stage-key-file", key});
    EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
    EXPECT_NE(accepted.err.find("stage links authenticated"), std::string::npos) << accepted.err;
}

TEST_F(chain_process, ALaneCannotBeTakenOverWithoutTheKey) {
    const std::string topo_path = write_topology("takeover");
    const std::string key_path = dir_ + "/takeover.key";
    const std::string key = "the takeover test's stage key";
    std::ofstream(key_path) << key << "\n";
    auto s1 = start_stage(topo_path, 1, {"--stage-key-file", key_path});
    auto s2 = start_stage(topo_path, 2, {"--stage-key-file", key_path});
    transport::chain_options co;
    co.link.stage_key = key;
    auto chain = local_stage0(topo_path, 2, co);
    ASSERT_NE(chain, nullptr);
    auto topo = transport::topology::load(topo_path);
    ASSERT_TRUE(topo.is_ok());
    const std::vector<token_id> prompt = {1, 40, 41, 42, 43, 44};
    const auto reference = greedy_tokens(*chain, prompt, 8);
    ASSERT_EQ(reference.size(), 8u);

    // An attacker dials stage 1 for lane 0 as stage 0: without a key, and with a wrong one.
    protocol::hello h;
    h.lane = 0;
    h.sender_stage = 0;
    for (const std::string & attacker_key : {std::string(), std::string("a guessed key, long enough")}) {
        transport::link_options o;
        o.stage_key = attacker_key;
        auto taken = transport::connect_link(topo->stages[1].address, h, o, "stage 1");
        ASSERT_FALSE(taken.is_ok()) << "a lane was taken over " << (attacker_key.empty() ? "without a key" : "with a wrong key");
        EXPECT_EQ(taken.error().code(), error_code::permission) << taken.error().to_string();
    }
    // The live lanes were not replaced: the chain answers as before, twice (both lanes).
    EXPECT_EQ(greedy_tokens(*chain, prompt, 8, 0), reference);
    EXPECT_EQ(greedy_tokens(*chain, prompt, 8, 1), reference);
    EXPECT_NE(s1->log().find("refused a connection"), std::string::npos) << s1->log();
}

TEST_F(chain_process, AHandshakeFloodDoesNotKeepARestartedStageFromBeingRedialed) {
    const std::string topo_path = write_topology("flood");
    auto s1 = start_stage(topo_path, 1);
    auto s2 = start_stage(topo_path, 2);
    transport::chain_options co;
    co.retry_wait = std::chrono::milliseconds(300);  // the request below is to fail on the dead stage
    auto chain = local_stage0(topo_path, 2, co);
    ASSERT_NE(chain, nullptr);
    auto topo = transport::topology::load(topo_path);
    ASSERT_TRUE(topo.is_ok());
    const std::vector<token_id> prompt = {1, 40, 41, 42, 43, 44};
    const auto reference = greedy_tokens(*chain, prompt, 8);
    ASSERT_EQ(reference.size(), 8u);

    s1->kill_now(9);
    EXPECT_EQ(s1->wait(20000), 128 + 9);
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = 8;
    req.sampling.temperature = 0;
    const int64_t retries_before = chain->n_retries();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(run_generation(*chain, 0, req).is_ok()) << "a request went through a dead stage";
    EXPECT_EQ(chain->n_retries(), retries_before + 1) << "a refused connection before the first token is retried";
    EXPECT_GE(std::chrono::steady_clock::now() - t0, co.retry_wait) << "the retry gave up before retry_wait";
    s1 = start_stage(topo_path, 1);
    // 100 idle connections that never say a word, held open while stage 0 re-dials.
    std::vector<transport::tcp_socket> idle;
    for (int i = 0; i < 100; ++i) {
        auto s = transport::dial(topo->stages[1].address, 2000ms);
        ASSERT_TRUE(s.is_ok()) << s.error().to_string();
        idle.push_back(std::move(s).value());
    }
    EXPECT_EQ(greedy_tokens(*chain, prompt, 8), reference) << "the flood kept stage 0 from re-dialing stage 1";
    EXPECT_EQ(greedy_tokens(*chain, prompt, 8), reference);
}

TEST_F(chain_process, ANonLoopbackTopologyDoesNotStartWithoutAKey) {
    nlohmann::json t;
    t["model"] = "m.gguf";
    t["stages"] = {{{"layers", {0, 3}}, {"endpoint", "127.0.0.1:" + std::to_string(free_port())}},
                   {{"layers", {3, 6}}, {"endpoint", "198.18.0.2:7101"}}};
    const std::string topo = dir_ + "/remote.json";
    std::ofstream(topo) << t.dump();
    auto stage = run_command({skippy_binary_path(), "serve-stage", "--topology", topo, "--stage", "1", "-t", "1"});
    EXPECT_EQ(stage.exit_code, 1);
    EXPECT_NE(stage.err.find("198.18.0.2:7101 is not loopback"), std::string::npos) << stage.err;
    EXPECT_NE(stage.err.find("--stage-key-file"), std::string::npos) << stage.err;
    auto chain = run_command({skippy_binary_path(), "generate", "--topology", topo, "-p", "a", "-n", "2"});
    EXPECT_EQ(chain.exit_code, 1);
    EXPECT_NE(chain.err.find("is not loopback"), std::string::npos) << chain.err;
}

TEST_F(chain_process, StageProcessesStopCleanlyOnSigterm) {
    const std::string topo = write_topology("term");
    auto s1 = start_stage(topo, 1);
    s1->kill_now(15);
    EXPECT_EQ(s1->wait(5000), 0) << s1->log();
}

// Runs `prompt` greedily on lanes 0..n-1 at once; the tokens of each, or empty on a failure.
std::vector<std::vector<token_id>> concurrent_greedy(transport::chain_pipeline & chain, const std::vector<token_id> & prompt, int n,
                                                     int32_t n_tokens, std::vector<std::string> * errors) {
    std::vector<std::vector<token_id>> out(static_cast<size_t>(n));
    std::vector<std::string> why(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int lane = 0; lane < n; ++lane) {
        threads.emplace_back([&, lane] {
            generation_request req;
            req.prompt = prompt;
            req.max_tokens = n_tokens;
            req.sampling.temperature = 0;
            auto res = run_generation(chain, lane, req);
            if (res.is_ok()) {
                out[static_cast<size_t>(lane)] = res->tokens;
            } else {
                why[static_cast<size_t>(lane)] = "lane " + std::to_string(lane) + ": " + res.error().to_string();
            }
        });
    }
    for (auto & t : threads) t.join();
    for (auto & w : why) {
        if (!w.empty() && errors) errors->push_back(w);
    }
    return out;
}

// Stage links with a short step deadline on every process of the chain.
const std::vector<std::string> k_fast_deadline_flags = {"--stage-step-timeout-ms", "1000", "--stage-step-ms-per-token", "20"};

transport::chain_options fast_deadline_options() {
    transport::chain_options co;
    co.link.liveness.step_base = std::chrono::milliseconds(1000);
    co.link.liveness.step_per_token = std::chrono::milliseconds(20);
    return co;
}

TEST_F(chain_process, AFrozenStageFailsTheStreamWithinTheDeadlineAndTheChainRecoversAfterSigcont) {
    const std::string topo_path = write_topology("sigstop");
    auto s1 = start_stage(topo_path, 1, k_fast_deadline_flags, 8);
    auto s2 = start_stage(topo_path, 2, k_fast_deadline_flags, 8);
    transport::chain_options co = fast_deadline_options();
    co.link.wire_delay_ms = 5;  // keeps generation going long enough to freeze a stage in the middle
    auto chain = local_stage0(topo_path, 8, co);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 40, 41, 42, 43, 44};
    const auto reference = greedy_tokens(*chain, prompt, 8);
    ASSERT_EQ(reference.size(), 8u);

    generation_request req;
    req.prompt = prompt;
    req.max_tokens = 1000;
    req.sampling.temperature = 0;
    std::mutex m;
    std::condition_variable cv;
    int produced = 0;
    bool finished = false;
    req.on_token = [&](token_id) {
        {
            std::lock_guard<std::mutex> lock(m);
            ++produced;
        }
        cv.notify_all();
        return true;
    };
    std::chrono::steady_clock::time_point stopped_at;
    bool stopped = false;
    std::thread freezer([&] {
        std::unique_lock<std::mutex> lock(m);
        if (!cv.wait_for(lock, 60s, [&] { return produced >= 5 || finished; }) || finished) return;
        stopped_at = std::chrono::steady_clock::now();
        stopped = true;
        s2->kill_now(SIGSTOP);
    });
    auto res = run_generation(*chain, 0, req);
    const auto failed_at = std::chrono::steady_clock::now();
    {
        std::lock_guard<std::mutex> lock(m);
        finished = true;
    }
    cv.notify_all();
    freezer.join();
    ASSERT_TRUE(stopped) << "generation ended before the stage could be frozen";
    s2->kill_now(SIGCONT);
    ASSERT_FALSE(res.is_ok()) << "generation went on through a frozen stage";
    EXPECT_EQ(res.error().code(), error_code::timed_out) << res.error().to_string();
    // The deadline of the steps in flight: each one hop, a handful of tokens. The bound
    // checked is the (10 s), far above it, so a loaded machine does not flake.
    EXPECT_LT(failed_at - stopped_at, 10s) << res.error().to_string();

    // After SIGCONT the frozen stage's old links are gone; the next requests get fresh ones.
    std::vector<std::string> errors;
    const auto outs = concurrent_greedy(*chain, prompt, 8, 8, &errors);
    EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
    for (const auto & o : outs) EXPECT_EQ(o, reference);
}


TEST_F(chain_process, HeartbeatsFindAnIdleBatchLinkToAFrozenStageBeforeARequestUsesIt) {
    const std::string topo_path = write_topology("heartbeat");
    const std::vector<std::string> flags = {"--stage-step-timeout-ms", "1000", "--stage-heartbeat-ms", "100"};
    auto s1 = start_stage(topo_path, 1, flags);
    auto s2 = start_stage(topo_path, 2, flags);
    transport::chain_options co = fast_deadline_options();
    co.link.liveness.heartbeat_interval = std::chrono::milliseconds(100);
    auto chain = local_stage0(topo_path, 2, co);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 60, 61, 62};
    const auto reference = greedy_tokens(*chain, prompt, 6);  // dials the batch link
    ASSERT_EQ(reference.size(), 6u);
    // Idle and alive: heartbeats go out and are answered.
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (chain->n_heartbeats_sent() < 3 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
    ASSERT_GE(chain->n_heartbeats_sent(), 3);
    EXPECT_EQ(chain->n_heartbeat_failures(), 0) << "a live stage answers its heartbeats";

    s1->kill_now(SIGSTOP);
    while (chain->n_heartbeat_failures() < 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
    EXPECT_EQ(chain->n_heartbeat_failures(), 1) << "no request was sent: only a heartbeat can have found the frozen stage";
    s1->kill_now(SIGCONT);
    EXPECT_EQ(greedy_tokens(*chain, prompt, 6), reference) << "the link is re-dialed after SIGCONT";
}

// Waits (bounded) until `counter()` reaches `n`; returns its last value.
int64_t wait_for_count(const std::function<int64_t()> & counter, int64_t n) {
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (counter() < n && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
    return counter();
}

// Stage 1 frozen, then thawed (SIGCONT); stage 2 frozen, then killed and restarted.
class chain_idle_freeze : public chain_process, public ::testing::WithParamInterface<int> {};

TEST_P(chain_idle_freeze, HeartbeatsFindIdleLanesToAFrozenStageBeforeAnyRequestAndTheNextEightSucceed) {
    const int frozen = GetParam();
    const std::string topo_path = write_topology("idle-freeze" + std::to_string(frozen));
    const std::vector<std::string> flags = {"--stage-step-timeout-ms", "1000", "--stage-heartbeat-ms", "100"};
    std::unique_ptr<background_process> stages[3];
    stages[1] = start_stage(topo_path, 1, flags, 8);
    stages[2] = start_stage(topo_path, 2, flags, 8);
    transport::chain_options co = fast_deadline_options();
    co.link.liveness.heartbeat_interval = std::chrono::milliseconds(100);
    auto chain = local_stage0(topo_path, 8, co);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 70, 71, 72, 73};
    const auto reference = greedy_tokens(*chain, prompt, 6);
    ASSERT_EQ(reference.size(), 6u);
    std::vector<std::string> errors;
    for (const auto & o : concurrent_greedy(*chain, prompt, 8, 6, &errors)) EXPECT_EQ(o, reference);
    ASSERT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
    // Every lane is connected and idle; its heartbeats go out and are answered.
    EXPECT_GE(wait_for_count([&] { return chain->n_lane_heartbeats_sent(); }, 16), 16);
    EXPECT_EQ(chain->n_lane_heartbeat_failures(), 0) << "a live chain answers its lanes' heartbeats";
    const int64_t stale_before = chain->n_stale_redials();

    stages[frozen]->kill_now(SIGSTOP);
    // No request is sent: only heartbeats can find the frozen stage. Stage 1 frozen
    // misses stage 0's; stage 2 frozen misses stage 1's, which fails each lane upstream
    // with the reason.
    EXPECT_EQ(wait_for_count([&] { return chain->n_lane_heartbeat_failures(); }, 8), 8)
        << "every idle lane is found dead by its heartbeat";
    EXPECT_EQ(chain->n_stale_redials(), stale_before) << "nothing closed: the stage is frozen";
    if (frozen == 1) {
        stages[frozen]->kill_now(SIGCONT);
    } else {
        stages[frozen]->kill_now(9);
        EXPECT_EQ(stages[frozen]->wait(20000), 128 + 9);
        stages[frozen] = start_stage(topo_path, frozen, flags, 8);
    }
    const int64_t retries_before = chain->n_retries();
    const auto outs = concurrent_greedy(*chain, prompt, 8, 6, &errors);
    EXPECT_TRUE(errors.empty()) << "no request may fail on a lane found dead: " << ::testing::PrintToString(errors);
    for (const auto & o : outs) EXPECT_EQ(o, reference);
    EXPECT_EQ(chain->n_retries(), retries_before) << "the lanes were re-dialed before use, not retried";
}

INSTANTIATE_TEST_SUITE_P(stages, chain_idle_freeze, ::testing::Values(1, 2));

// Tokens stage 0 has put into steps so far (its step_tokens histogram's sum).
double stage0_step_tokens(transport::chain_pipeline & chain) {
    const auto snaps = chain.stage_snapshots();
    return snaps.empty() || !snaps[0].steps ? 0 : snaps[0].steps->tokens.sum;
}

// The stage killed (and restarted) while stage 0 is in the middle of a long prompt.
class chain_prefill_kill : public chain_process, public ::testing::WithParamInterface<int> {};

TEST_P(chain_prefill_kill, AStageKilledDuringPrefillIsRetriedOnAFreshLaneWithExactTokensAndACacheThatServesThem) {
    const int killed = GetParam();
    const std::string topo_path = write_topology("prefill-kill" + std::to_string(killed));
    std::unique_ptr<background_process> stages[3];
    stages[1] = start_stage(topo_path, 1);
    stages[2] = start_stage(topo_path, 2);
    transport::chain_options co;
    co.link.wire_delay_ms = 5;           // every step frame of the prompt takes a while
    co.retry_wait = std::chrono::seconds(30);  // a restart under a sanitizer can take seconds
    auto chain = local_stage0(topo_path, 1, co);
    ASSERT_NE(chain, nullptr);
    std::vector<token_id> prompt;  // 960 tokens: 15 steps of 64
    for (int i = 0; i < 960; ++i) prompt.push_back(static_cast<token_id>(3 + (i * 37) % 290));
    auto run = [&](const std::string & key, const std::function<bool(token_id)> & on_token) {
        generation_request req;
        req.prompt = prompt;
        req.max_tokens = 8;
        req.sampling.temperature = 0;
        req.cache_key = key;  // a key of its own: nothing cached for it yet
        req.on_token = on_token;
        return run_generation(*chain, 0, req);
    };
    const auto clean = run("clean", nullptr);
    ASSERT_TRUE(clean.is_ok()) << clean.error().to_string();
    ASSERT_EQ(clean->tokens.size(), 8u);
    EXPECT_EQ(clean->cached_tokens, 0);

    // Kill the stage once stage 0 has sent 3 of the prompt's 15 steps, then restart it.
    const double tokens_before = stage0_step_tokens(*chain);
    std::atomic<bool> killed_in_prefill{false}, restarted{false};
    std::atomic<bool> token_seen{false};
    std::thread killer([&] {
        const auto give_up = std::chrono::steady_clock::now() + 60s;
        while (stage0_step_tokens(*chain) < tokens_before + 3 * 64 && std::chrono::steady_clock::now() < give_up) {
            std::this_thread::sleep_for(1ms);
        }
        killed_in_prefill = !token_seen.load() && stage0_step_tokens(*chain) < tokens_before + static_cast<double>(prompt.size()) - 1;
        stages[killed]->kill_now(9);
        EXPECT_EQ(stages[killed]->wait(20000), 128 + 9);
        stages[killed] = start_stage(topo_path, killed);
        restarted = true;
    });
    const int64_t retries_before = chain->n_retries();
    const auto retried = run("retried", [&](token_id) {
        token_seen = true;
        return true;
    });
    killer.join();
    ASSERT_TRUE(restarted.load());
    ASSERT_TRUE(killed_in_prefill.load()) << "the prompt's prefill was over before the stage could be killed";
    ASSERT_TRUE(retried.is_ok()) << "a failure before the first token was not retried: " << retried.error().to_string();
    EXPECT_EQ(retried->tokens, clean->tokens) << "the retried request differs from a clean run";
    EXPECT_EQ(chain->n_retries(), retries_before + 1);
    EXPECT_EQ(retried->cached_tokens, 0) << "nothing was cached under this key before";

    // What the failed attempt left in the caches (stage 0's and the surviving stage's
    // entries of a half-done prompt) does not break the all-or-none restore: the
    // retried run recorded the prompt on every stage, and it now comes from the cache
    // with the same tokens.
    const auto cached = run("retried", nullptr);
    ASSERT_TRUE(cached.is_ok()) << cached.error().to_string();
    EXPECT_GT(cached->cached_tokens, 0) << "the retried run's prompt was not cached on every stage";
    EXPECT_EQ(cached->tokens, clean->tokens);
}

INSTANTIATE_TEST_SUITE_P(stages, chain_prefill_kill, ::testing::Values(1, 2));

class chain_restart : public chain_process, public ::testing::WithParamInterface<int> {};

TEST_P(chain_restart, IdleLanesToARestartedStageAreRedialedAndTheNextEightRequestsSucceed) {
    const int restarted = GetParam();
    const std::string topo_path = write_topology("restart" + std::to_string(restarted));
    std::unique_ptr<background_process> stages[3];
    stages[1] = start_stage(topo_path, 1, {}, 8);
    stages[2] = start_stage(topo_path, 2, {}, 8);
    auto chain = local_stage0(topo_path, 8);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 50, 51, 52, 53};
    const auto reference = greedy_tokens(*chain, prompt, 6);
    ASSERT_EQ(reference.size(), 6u);
    std::vector<std::string> errors;
    for (const auto & o : concurrent_greedy(*chain, prompt, 8, 6, &errors)) EXPECT_EQ(o, reference);
    ASSERT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
    const int64_t redials_before = chain->n_stale_redials();

    // Every lane is connected and idle now. Kill the stage and restart it on its port.
    stages[restarted]->kill_now(9);
    EXPECT_EQ(stages[restarted]->wait(20000), 128 + 9);
    stages[restarted] = start_stage(topo_path, restarted, {}, 8);
    const auto outs = concurrent_greedy(*chain, prompt, 8, 6, &errors);
    EXPECT_TRUE(errors.empty()) << "no request may fail on a stale lane: " << ::testing::PrintToString(errors);
    for (const auto & o : outs) EXPECT_EQ(o, reference);
    // Each lane found its links closed while idle (or failed while being configured
    // and was retried): none took a request on a dead link.
    EXPECT_EQ(chain->n_stale_redials() - redials_before + chain->n_retries(), 8);
}

INSTANTIATE_TEST_SUITE_P(stages, chain_restart, ::testing::Values(1, 2));

}  // namespace
}  // namespace skippy::testing
