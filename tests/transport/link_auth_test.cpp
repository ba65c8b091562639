// Stage-link authentication: the key file, the loopback rule, frame MACs with their
// sequence numbers, and attacks on a live keyed link through a recording proxy.
#include "fault_proxy.h"
#include "link_test_util.h"
#include "transport/link.h"
#include "transport/link_auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <thread>

namespace skippy::transport {
namespace {

using test_util::k_key;
using test_util::stop_request;

using namespace std::chrono_literals;


std::string write_temp(const std::string & name, const std::string & text) {
    const std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

TEST(link_auth, KeyFileLosesItsTrailingNewlineAndMustBeLongEnough) {
    auto key = load_stage_key(write_temp("key_ok", k_key + "\n"));
    ASSERT_TRUE(key.is_ok()) << key.error().to_string();
    EXPECT_EQ(*key, k_key);
    auto short_key = load_stage_key(write_temp("key_short", "0123456789\n"));
    ASSERT_FALSE(short_key.is_ok());
    EXPECT_EQ(short_key.error().code(), error_code::invalid_argument);
    EXPECT_EQ(short_key.error().message().find("0123456789"), std::string::npos) << "never prints key bytes";
    EXPECT_EQ(load_stage_key(::testing::TempDir() + "/no_such_key").error().code(), error_code::invalid_argument);
}

TEST(link_auth, OnlyLoopbackTopologiesRunWithoutAKey) {
    EXPECT_TRUE(is_loopback_host("127.0.0.1"));
    EXPECT_TRUE(is_loopback_host("127.9.8.7"));
    EXPECT_TRUE(is_loopback_host("::1"));
    EXPECT_TRUE(is_loopback_host("localhost"));
    EXPECT_FALSE(is_loopback_host("10.0.0.1"));
    EXPECT_FALSE(is_loopback_host("stage2.example"));
    EXPECT_FALSE(is_loopback_host("::ffff:10.0.0.1"));
    auto local = even_split("m", 4, 2, "127.0.0.1", 7100);
    ASSERT_TRUE(local.is_ok());
    EXPECT_TRUE(check_stage_auth(*local, "", false).is_ok());
    topology spread = *local;
    spread.stages[1].address.host = "198.18.0.2";
    const status st = check_stage_auth(spread, "", false);
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("198.18.0.2:7101"), std::string::npos) << st.to_string();
    EXPECT_NE(st.message().find("--stage-key-file"), std::string::npos) << st.to_string();
    EXPECT_TRUE(check_stage_auth(spread, k_key, false).is_ok());
    EXPECT_TRUE(check_stage_auth(spread, "", true).is_ok()) << "mutual TLS authenticates the peers too";
    EXPECT_NE(st.message().find("--stage-tls"), std::string::npos) << st.to_string();
    EXPECT_EQ(stage_auth_summary("", false), "not authenticated (no --stage-key-file)");
    EXPECT_EQ(stage_auth_summary("", true).rfind("TLS 1.3 with mutual certificates", 0), 0u);
}

TEST(link_auth, FrameMacsRefuseReplayReorderAndAlteration) {
    const protocol::auth_nonce nonce{};
    const std::vector<uint8_t> hello(protocol::hello_bytes, 7);
    link_macs dialer = derive_link_macs(k_key, link_role::dialer, hello, nonce);
    link_macs listener = derive_link_macs(k_key, link_role::listener, hello, nonce);
    ASSERT_TRUE(dialer.on() && listener.on());
    const std::vector<uint8_t> a = {1, 2, 3}, b = {4, 5, 6};
    auto tag_a = dialer.send.seal(a);
    auto tag_b = dialer.send.seal(b);
    ASSERT_TRUE(tag_a.is_ok() && tag_b.is_ok());
    EXPECT_FALSE(macs_equal(*tag_a, *tag_b));
    // Reordered: b arrives first.
    EXPECT_EQ(listener.recv.open(b, *tag_b).code(), error_code::integrity);
    EXPECT_TRUE(listener.recv.open(a, *tag_a).is_ok());
    // Replayed: a again.
    EXPECT_EQ(listener.recv.open(a, *tag_a).code(), error_code::integrity);
    // Altered.
    EXPECT_EQ(listener.recv.open(std::vector<uint8_t>{4, 5, 7}, *tag_b).code(), error_code::integrity);
    EXPECT_TRUE(listener.recv.open(b, *tag_b).is_ok());
    EXPECT_EQ(listener.recv.next_seq(), 2u);
    // A frame the listener sends is never valid as one from the dialer (keys per direction).
    auto back = listener.send.seal(a);
    ASSERT_TRUE(back.is_ok());
    EXPECT_FALSE(macs_equal(*back, *tag_a));
    EXPECT_TRUE(dialer.recv.open(a, *back).is_ok());
}

TEST(link_auth, ProofsDependOnTheKeyTheRoleAndBothNonces) {
    const std::vector<uint8_t> hello(protocol::hello_bytes, 1);
    protocol::auth_nonce n1{}, n2{};
    n2[0] = 1;
    const auto p = handshake_proof(k_key, link_role::dialer, hello, n1);
    EXPECT_FALSE(macs_equal(p, handshake_proof(k_key, link_role::listener, hello, n1)));
    EXPECT_FALSE(macs_equal(p, handshake_proof(k_key, link_role::dialer, hello, n2)));
    std::vector<uint8_t> other_hello = hello;
    other_hello.back() = 2;
    EXPECT_FALSE(macs_equal(p, handshake_proof(k_key, link_role::dialer, other_hello, n1)));
    EXPECT_FALSE(macs_equal(p, handshake_proof(std::string(32, 'k'), link_role::dialer, hello, n1)));
    EXPECT_TRUE(macs_equal(p, handshake_proof(k_key, link_role::dialer, hello, n1)));
}

// A listener on loopback that answers hellos with the key and records what it reads.
struct keyed_listener {
    tcp_listener            listener;
    link_options            options;
    std::thread             thread;
    std::vector<status>     outcomes;  // one per connection: the handshake, then reads
    std::vector<uint64_t>   request_ids;
    explicit keyed_listener(int n_connections) {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        options.stage_key = k_key;
        options.handshake_timeout = 2s;
        thread = std::thread([this, n_connections] {
            for (int i = 0; i < n_connections; ++i) {
                auto s = listener.accept(5000ms);
                if (!s.is_ok()) { outcomes.push_back(s.error()); continue; }
                auto accepted = answer_hello(*s, options, [](const protocol::hello &) { return status::ok(); });
                if (!accepted.is_ok()) { outcomes.push_back(accepted.error()); continue; }
                stage_link link(std::move(s).value(), options, "dialer", std::move(accepted->macs));
                status last;
                while (true) {
                    auto r = link.read_request(clock::now() + 2s);
                    if (!r.is_ok()) { last = link.peer_closed() ? status::ok() : r.error(); break; }
                    request_ids.push_back(r->request_id);
                }
                outcomes.push_back(last);
            }
        });
    }
    ~keyed_listener() { if (thread.joinable()) thread.join(); }
    endpoint address() const { return {"127.0.0.1", listener.port()}; }
};


TEST(link_auth, ARecordedSessionReplayedIsRefused) {
    keyed_listener target(2);
    std::vector<uint8_t> recorded;
    {
        testing::fault_proxy proxy(target.address());
        link_options o;
        o.stage_key = k_key;
        auto link = connect_link(proxy.address(), protocol::hello{}, o, "stage 1");
        ASSERT_TRUE(link.is_ok()) << link.error().to_string();
        ASSERT_TRUE(link->send_request(stop_request(1)).is_ok());
        ASSERT_TRUE(link->send_request(stop_request(2)).is_ok());
        std::this_thread::sleep_for(200ms);  // let the proxy pass them on (no timing is asserted)
        recorded = proxy.recorded();
        link->close();
    }
    // The attacker has every byte the dialer sent; it sends them again, without the key.
    auto s = dial(target.address(), 2000ms);
    ASSERT_TRUE(s.is_ok());
    ASSERT_TRUE(s->write_all(recorded).is_ok());
    std::this_thread::sleep_for(200ms);
    s->close();
    target.thread.join();
    ASSERT_EQ(target.outcomes.size(), 2u);
    EXPECT_TRUE(target.outcomes[0].is_ok()) << target.outcomes[0].to_string();
    EXPECT_EQ(target.outcomes[1].code(), error_code::permission) << "the replayed proof was accepted: " << target.outcomes[1].to_string();
    EXPECT_EQ(target.request_ids, (std::vector<uint64_t>{1, 2})) << "replayed frames reached the stage";
}

TEST(link_auth, AFrameWithAWrongMacIsRefused) {
    keyed_listener target(1);
    testing::fault_proxy proxy(target.address());
    // Flip one bit in the second frame, past the handshake (hello, then the proof).
    const size_t frame_bytes = protocol::encode_request(stop_request(1)).size() + protocol::auth_mac_bytes;
    proxy.corrupt_at(static_cast<int64_t>(protocol::hello_bytes + protocol::auth_proof_bytes + frame_bytes + 20));
    link_options o;
    o.stage_key = k_key;
    auto link = connect_link(proxy.address(), protocol::hello{}, o, "stage 1");
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    for (uint64_t id = 1; id <= 3; ++id) (void)link->send_request(stop_request(id));
    target.thread.join();
    ASSERT_EQ(target.outcomes.size(), 1u);
    EXPECT_EQ(target.outcomes[0].code(), error_code::integrity) << target.outcomes[0].to_string();
    EXPECT_EQ(target.request_ids, (std::vector<uint64_t>{1})) << "only the frame before the altered one is taken";
}

}  // namespace
}  // namespace skippy::transport
