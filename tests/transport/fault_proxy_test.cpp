// A 3-stage chain of serve-stage processes with a fault proxy on every hop (stage 0 ->
// 1 -> 2 -> 0): each process gets its own topology file, where its own endpoint is
// real and every other stage's is the proxy in front of it.
#include "chain_fixture.h"
#include "common/test_data.h"
#include "fault_proxy.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <thread>

namespace skippy::testing {
namespace {

using namespace std::chrono_literals;

class fault_proxy_chain : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = make_temp_dir("proxy");
        model_ = dir_ + "/m.gguf";
        auto r = run_command({skippy_binary_path(), "make-model", "--arch", "llama", "--n-embd", "64", "--n-layer", "6", "--n-head",
                              "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "300", "--type", "Q8_0", "-o", model_});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        for (int i = 0; i < 3; ++i) real_.push_back({"127.0.0.1", static_cast<uint16_t>(free_port())});
        for (int i = 0; i < 3; ++i) proxies_.push_back(std::make_unique<fault_proxy>(real_[static_cast<size_t>(i)]));
        for (int i = 1; i < 3; ++i) {
            stages_.push_back(std::make_unique<background_process>(
                std::vector<std::string>{skippy_binary_path(), "serve-stage", "--topology", topology_for(i), "--stage", std::to_string(i),
                                         "-t", "1", "--lanes", "1"},
                dir_ + "/stage" + std::to_string(i) + ".log"));
        }
        for (auto & s : stages_) {
            bool up = false;
            for (int i = 0; i < 1000 && !up && s->running(); ++i) {
                up = s->log().find("listening on") != std::string::npos;
                if (!up) std::this_thread::sleep_for(20ms);
            }
            ASSERT_TRUE(up) << s->log();
        }
    }

    // The topology as process `me` sees it: its own endpoint real, the others proxied.
    std::string topology_for(int me) {
        nlohmann::json t;
        t["model"] = model_;
        t["stages"] = nlohmann::json::array();
        for (int i = 0; i < 3; ++i) {
            const transport::endpoint ep = i == me ? real_[static_cast<size_t>(i)] : proxies_[static_cast<size_t>(i)]->address();
            t["stages"].push_back({{"layers", {2 * i, 2 * i + 2}}, {"endpoint", ep.to_string()}});
        }
        const std::string path = dir_ + "/topology" + std::to_string(me) + ".json";
        std::ofstream(path) << t.dump();
        return path;
    }

    std::string                                    dir_, model_;
    std::vector<transport::endpoint>               real_;
    std::vector<std::unique_ptr<fault_proxy>>      proxies_;
    std::vector<std::unique_ptr<background_process>> stages_;
};

struct timed_tokens {
    std::vector<token_id> tokens;
    double                ms = 0;
};

timed_tokens timed_greedy(pipeline_i & chain, const std::vector<token_id> & prompt, int32_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    timed_tokens out;
    out.tokens = greedy_tokens(chain, prompt, n);
    out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

TEST_F(fault_proxy_chain, A20MsRoundTripOnEveryHopKeepsGreedyOutputsExact) {
    auto chain = local_stage0(topology_for(0), 1);
    ASSERT_NE(chain, nullptr);
    auto f = gguf::file::open(model_);
    ASSERT_TRUE(f.is_ok());
    auto whole = embedded_chain(std::shared_ptr<const gguf::file>(std::move(f).value()), 1);
    const std::vector<token_id> prompt = {1, 40, 41, 42, 43, 44, 45, 46};
    constexpr int32_t n = 16;
    const auto reference = greedy_tokens(*whole, prompt, n);
    ASSERT_EQ(reference.size(), static_cast<size_t>(n));

    const timed_tokens fast = timed_greedy(*chain, prompt, n);
    EXPECT_EQ(fast.tokens, reference) << "proxied loopback chain differs from the whole model";
    for (auto & p : proxies_) p->set_delay(10ms);  // 10 ms each way: a 20 ms round trip per hop
    const timed_tokens slow = timed_greedy(*chain, prompt, n);
    EXPECT_EQ(slow.tokens, reference) << "a 20 ms RTT changed the greedy output";
    // Reported, not asserted (no timed assertions): the cost per generated token.
    std::printf("[fault proxy] %d tokens: %.1f ms over loopback, %.1f ms at 20 ms RTT per hop: %.1f ms per token overhead\n", n,
                fast.ms, slow.ms, (slow.ms - fast.ms) / n);
}

TEST_F(fault_proxy_chain, ACutLinkFailsTheRequestCleanlyAndTheChainRecovers) {
    auto chain = local_stage0(topology_for(0), 1);
    ASSERT_NE(chain, nullptr);
    const std::vector<token_id> prompt = {1, 40, 41, 42};
    const auto reference = greedy_tokens(*chain, prompt, 6);
    ASSERT_EQ(reference.size(), 6u);
    proxies_[2]->cut();  // stage 1 -> stage 2 is gone
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = 6;
    req.sampling.temperature = 0;
    // The lane was idle when its links were cut. A request either fails with an error
    // naming a stage or runs on rebuilt links and returns exactly the reference; never
    // other tokens. Today the lane link and the batch link each fail one request before
    // they are rebuilt (re-dialing idle lanes before they take a request is not done
    // yet), so recovery is asked for within three requests.
    int n_failed = 0;
    bool recovered = false;
    for (int attempt = 0; attempt < 3 && !recovered; ++attempt) {
        auto r = run_generation(*chain, 0, req);
        if (r.is_ok()) {
            EXPECT_EQ(r->tokens, reference);
            recovered = true;
        } else {
            ++n_failed;
            EXPECT_NE(r.error().message().find("stage"), std::string::npos) << r.error().to_string();
        }
    }
    EXPECT_TRUE(recovered) << "the chain did not recover after the cut";
    std::printf("[fault proxy] requests failed after the cut before recovery: %d\n", n_failed);
}

}  // namespace
}  // namespace skippy::testing
