// A chain across two network namespaces joined by a veth pair, with 20 ms added to
// every frame written (this kernel has no netem qdisc): stage 0 in one namespace,
// stages 1 and 2 in the other, as if on two machines. Needs root and iproute2; CI runs
// as root, so there a missing capability fails the test instead of skipping it.
#include "common/test_data.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>
#include <thread>

namespace skippy::testing {
namespace {

using namespace std::chrono_literals;

int sh(const std::string & cmd) {
    auto r = run_command({"/bin/sh", "-c", cmd + " >/dev/null 2>&1"}, 30);
    return r.exit_code;
}

class netns_chain : public ::testing::Test {
protected:
    void SetUp() override {
        if (geteuid() != 0 || sh("command -v ip") != 0) {
            if (running_in_ci()) FAIL() << "needs root and iproute2 (ip netns)";
            GTEST_SKIP() << "needs root and iproute2 (ip netns)";
        }
        const std::string id = std::to_string(getpid() % 100000);
        ns_a_ = "skpy_a" + id;
        ns_b_ = "skpy_b" + id;
        const std::string va = "skva" + id, vb = "skvb" + id;
        // Addresses in the benchmarking range (RFC 2544), never routed anywhere.
        ASSERT_EQ(sh("ip netns add " + ns_a_), 0);
        ASSERT_EQ(sh("ip netns add " + ns_b_), 0);
        created_ = true;
        ASSERT_EQ(sh("ip link add " + va + " type veth peer name " + vb), 0);
        ASSERT_EQ(sh("ip link set " + va + " netns " + ns_a_), 0);
        ASSERT_EQ(sh("ip link set " + vb + " netns " + ns_b_), 0);
        ASSERT_EQ(sh("ip -n " + ns_a_ + " addr add 198.18.77.1/24 dev " + va), 0);
        ASSERT_EQ(sh("ip -n " + ns_b_ + " addr add 198.18.77.2/24 dev " + vb), 0);
        for (const auto & [ns, dev] : {std::pair{ns_a_, va}, std::pair{ns_b_, vb}}) {
            ASSERT_EQ(sh("ip -n " + ns + " link set " + dev + " up"), 0);
            ASSERT_EQ(sh("ip -n " + ns + " link set lo up"), 0);
        }
    }
    void TearDown() override {
        stages_.clear();
        if (created_) {
            sh("ip netns del " + ns_a_);
            sh("ip netns del " + ns_b_);
        }
    }

    std::string ns_a_, ns_b_;
    bool created_ = false;
    std::vector<std::unique_ptr<background_process>> stages_;
};

TEST_F(netns_chain, TwoHostsWithASlowLinkGiveTheMonolithicTokens) {
    const std::string dir = make_temp_dir("netns");
    const std::string model = dir + "/m.gguf";
    auto made = run_command({skippy_binary_path(), "make-model", "--arch", "qwen2", "--n-embd", "64", "--n-layer", "3", "--n-head",
                             "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "300", "--type", "Q8_0", "-o", model});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    nlohmann::json t;
    t["model"] = model;
    t["stages"] = {{{"layers", {0, 1}}, {"endpoint", "198.18.77.1:7400"}},
                   {{"layers", {1, 2}}, {"endpoint", "198.18.77.2:7401"}},
                   {{"layers", {2, 3}}, {"endpoint", "198.18.77.2:7402"}}};
    const std::string topo = dir + "/topology.json";
    std::ofstream(topo) << t.dump();
    // The stages are on two hosts: links must be authenticated.
    const std::string key = dir + "/stage.key";
    std::ofstream(key) << "netns test stage key, 32+ bytes long\n";

    for (int i : {1, 2}) {
        stages_.push_back(std::make_unique<background_process>(
            std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", ns_b_, skippy_binary_path(), "serve-stage", "--topology", topo,
                                     "--stage", std::to_string(i), "-t", "1", "--wire-delay-ms", "20", "--stage-key-file", key},
            dir + "/stage" + std::to_string(i) + ".log"));
    }
    for (auto & s : stages_) {
        bool up = false;
        for (int i = 0; i < 500 && !up; ++i) {
            up = s->log().find("listening on") != std::string::npos;
            if (!up) std::this_thread::sleep_for(20ms);
        }
        ASSERT_TRUE(up) << s->log();
    }
    auto local = run_command({skippy_binary_path(), "generate", "-m", model, "-p", "across the wire", "-n", "6", "--greedy",
                              "--json", "-t", "1"});
    ASSERT_EQ(local.exit_code, 0) << local.err;
    auto remote = run_command({"/usr/sbin/ip", "netns", "exec", ns_a_, skippy_binary_path(), "generate", "--topology", topo, "-p",
                               "across the wire", "-n", "6", "--greedy", "--json", "-t", "1", "--wire-delay-ms", "20", "--stage-key-file", key});
    ASSERT_EQ(remote.exit_code, 0) << remote.err << stages_[0]->log() << stages_[1]->log();
    const auto want = nlohmann::json::parse(local.out)["tokens"];
    const auto got = nlohmann::json::parse(remote.out);
    EXPECT_EQ(got["tokens"], want);
    // Each decode crosses three delayed writes (0 -> 1 -> 2 -> 0): the delay is real.
    EXPECT_GE(got["total_ms"].get<double>(), 6 * 3 * 20.0);
}

}  // namespace
}  // namespace skippy::testing
