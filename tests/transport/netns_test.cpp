// A chain across two network namespaces joined by a veth pair, with 20 ms added to
// every frame written (this kernel has no netem qdisc): stage 0 in one namespace,
// stages 1 and 2 in the other, as if on two machines. Needs root and iproute2; CI runs
// as root, so there a missing capability fails the test instead of skipping it.
#include "common/test_data.h"
#include "tls_test_certs.h"

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

    // A 3-layer model of `arch`/`type` in a fresh directory, and a topology with stage 0
    // on host a and stages 1 and 2 on host b (ports base_port + i). Returns the directory.
    std::string make_chain_files(const std::string & name, const std::string & arch, const std::string & type, int base_port) {
        dir_ = make_temp_dir(name);
        model_ = dir_ + "/m.gguf";
        auto made = run_command({skippy_binary_path(), "make-model", "--arch", arch, "--n-embd", "64", "--n-layer", "3", "--n-head",
                                 "4", "--n-head-kv", "2", "--n-ff", "128", "--n-vocab", "300", "--type", type, "-o", model_});
        EXPECT_EQ(made.exit_code, 0) << made.err;
        nlohmann::json t;
        t["model"] = model_;
        t["stages"] = {{{"layers", {0, 1}}, {"endpoint", "198.18.77.1:" + std::to_string(base_port)}},
                       {{"layers", {1, 2}}, {"endpoint", "198.18.77.2:" + std::to_string(base_port + 1)}},
                       {{"layers", {2, 3}}, {"endpoint", "198.18.77.2:" + std::to_string(base_port + 2)}}};
        topo_ = dir_ + "/topology.json";
        std::ofstream(topo_) << t.dump();
        return dir_;
    }

    // Starts stages 1 and 2 in host b with `flags` and waits for them to listen.
    void start_stages(const std::vector<std::string> & flags) {
        for (int i : {1, 2}) {
            std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns_b_, skippy_binary_path(), "serve-stage", "--topology",
                                             topo_, "--stage", std::to_string(i), "-t", "1"};
            argv.insert(argv.end(), flags.begin(), flags.end());
            stages_.push_back(std::make_unique<background_process>(argv, dir_ + "/stage" + std::to_string(i) + ".log"));
        }
        for (auto & s : stages_) {
            bool up = false;
            for (int i = 0; i < 500 && !up; ++i) {
                up = s->log().find("listening on") != std::string::npos;
                if (!up) std::this_thread::sleep_for(20ms);
            }
            ASSERT_TRUE(up) << s->log();
        }
    }

    // `generate` of `prompt` on one process (no chain), and as stage 0 in host a with `flags`.
    command_result generate_local(const std::string & prompt, int n) {
        return run_command({skippy_binary_path(), "generate", "-m", model_, "-p", prompt, "-n", std::to_string(n), "--greedy", "--json",
                            "-t", "1"});
    }
    command_result generate_in_a(const std::string & prompt, int n, const std::vector<std::string> & flags) {
        std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns_a_, skippy_binary_path(), "generate", "--topology", topo_,
                                         "-p", prompt, "-n", std::to_string(n), "--greedy", "--json", "-t", "1"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        return run_command(argv);
    }

    std::string ns_a_, ns_b_;
    bool created_ = false;
    std::string dir_, model_, topo_;
    std::vector<std::unique_ptr<background_process>> stages_;
};

TEST_F(netns_chain, TwoHostsWithASlowLinkGiveTheMonolithicTokens) {
    const std::string dir = make_chain_files("netns", "qwen2", "Q8_0", 7400);
    // The stages are on two hosts: links must be authenticated.
    const std::string key = dir + "/stage.key";
    std::ofstream(key) << "netns test stage key, 32+ bytes long\n";
    const std::vector<std::string> flags = {"--wire-delay-ms", "20", "--stage-key-file", key};
    ASSERT_NO_FATAL_FAILURE(start_stages(flags));
    auto local = generate_local("across the wire", 6);
    ASSERT_EQ(local.exit_code, 0) << local.err;
    auto remote = generate_in_a("across the wire", 6, flags);
    ASSERT_EQ(remote.exit_code, 0) << remote.err << stages_[0]->log() << stages_[1]->log();
    const auto want = nlohmann::json::parse(local.out)["tokens"];
    const auto got = nlohmann::json::parse(remote.out);
    EXPECT_EQ(got["tokens"], want);
    // Each decode crosses three delayed writes (0 -> 1 -> 2 -> 0): the delay is real.
    EXPECT_GE(got["total_ms"].get<double>(), 6 * 3 * 20.0);
}

// The same two hosts with TLS alone (no stage key): mutual certificates authenticate
// the links, so the non-loopback topology is allowed, and the startup lines say TLS.
TEST_F(netns_chain, TwoHostsOverTlsGiveTheMonolithicTokens) {
    make_chain_files("netns-tls", "llama", "Q4_K_M", 7410);
    transport::test_util::test_pki pki;
    ASSERT_NO_FATAL_FAILURE(start_stages({"--stage-tls", pki.flag("stage-b")}));
    for (auto & s : stages_) {
        EXPECT_NE(s->log().find("stage links TLS 1.3 with mutual certificates"), std::string::npos) << s->log();
    }
    auto local = generate_local("sealed wire", 6);
    ASSERT_EQ(local.exit_code, 0) << local.err;
    auto remote = generate_in_a("sealed wire", 6, {"--stage-tls", pki.flag("stage-a")});
    ASSERT_EQ(remote.exit_code, 0) << remote.err << stages_[0]->log() << stages_[1]->log();
    EXPECT_EQ(nlohmann::json::parse(remote.out)["tokens"], nlohmann::json::parse(local.out)["tokens"]);
    // Without TLS (or a key) stage 0 refuses the non-loopback topology before dialing.
    auto plain = generate_in_a("sealed wire", 2, {});
    EXPECT_NE(plain.exit_code, 0);
    EXPECT_NE(plain.err.find("--stage-tls"), std::string::npos) << plain.err;
    // A stage 0 whose certificate another CA signed is refused by stage 1.
    auto stranger = generate_in_a("sealed wire", 2, {"--stage-tls", pki.flag("stranger", "ca.pem")});
    EXPECT_NE(stranger.exit_code, 0) << stranger.out;
    EXPECT_NE(stranger.err.find("TLS"), std::string::npos) << stranger.err;
}

}  // namespace
}  // namespace skippy::testing
