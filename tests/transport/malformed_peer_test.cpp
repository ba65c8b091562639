// A live stage server fed hostile bytes: every bad frame closes that connection with
// an error (never a crash or a hang), and the server keeps serving good lanes.
#include "../model/model_fixture.h"
#include "chain_fixture.h"

#include <thread>

namespace skippy::testing {
namespace {

using namespace std::chrono_literals;
using transport::clock;

class malformed_peer : public ::testing::Test {
protected:
    void SetUp() override {
        synthetic_model_options o;
        o.n_embd = 64; o.n_layer = 2; o.n_head = 4; o.n_head_kv = 2; o.n_ff = 128; o.n_vocab = 300;
        file_ = synthetic_model(o);
        ASSERT_NE(file_, nullptr);
        auto topo = transport::even_split("m", 2, 2, "127.0.0.1", 1);
        ASSERT_TRUE(topo.is_ok());
        topo_ = *topo;
        for (auto & s : topo_.stages) s.address.port = 0;
        auto l0 = transport::tcp_listener::listen(topo_.stages[0].address);
        auto l1 = transport::tcp_listener::listen(topo_.stages[1].address);
        ASSERT_TRUE(l0.is_ok() && l1.is_ok());
        topo_.stages[0].address.port = l0->port();
        topo_.stages[1].address.port = l1->port();
        stage_options so;
        so.n_threads = 1;
        so.n_lanes = 2;
        so.ctx_size = 64;
        so.layers = {1, 2};
        auto st = stage::load(file_, so);
        ASSERT_TRUE(st.is_ok());
        server_ = std::make_unique<transport::stage_server>(std::move(st).value(), nullptr, 1, topo_, std::move(l1).value(), transport::chain_options{});
        server_->start();
        so.layers = {0, 1};
        auto st0 = stage::load(file_, so);
        ASSERT_TRUE(st0.is_ok());
        chain_ = std::make_unique<transport::chain_pipeline>(std::move(st0).value(), nullptr, topo_, std::move(l0).value(), transport::chain_options{});
    }

    // A raw connection to the stage server, past a valid handshake when asked.
    transport::tcp_socket raw(bool handshake, uint32_t lane = 1) {
        auto s = transport::dial(topo_.stages[1].address, 2000ms);
        EXPECT_TRUE(s.is_ok());
        if (!handshake) return std::move(s).value();
        protocol::hello h;
        h.lane = lane;
        EXPECT_TRUE(s->write_all(protocol::encode_hello(h)).is_ok());
        std::vector<uint8_t> reply(protocol::hello_reply_fixed_bytes);
        EXPECT_TRUE(s->read_exact(reply, clock::now() + 2s).is_ok());
        auto decoded = protocol::decode_hello_reply(reply, {});
        EXPECT_TRUE(decoded.is_ok() && decoded->status == protocol::hello_status::ok);
        return std::move(s).value();
    }

    // Reads until the server closes the connection; true when it did within 5 s.
    static bool closed_by_server(transport::tcp_socket & s) {
        const auto deadline = clock::now() + 15s;  // beyond the 5 s handshake timeout
        uint8_t buf[4096];
        while (clock::now() < deadline) {
            status st = s.read_exact(std::span<uint8_t>(buf, 1), deadline);
            if (!st.is_ok()) return st.message().find("timed out") == std::string::npos;
        }
        return false;
    }

    void expect_server_still_serves() {
        const std::vector<token_id> prompt = {1, 20, 30, 40};
        EXPECT_EQ(greedy_tokens(*chain_, prompt, 4).size(), 4u) << "the server stopped serving after a bad peer";
    }

    std::shared_ptr<const gguf::file>              file_;
    transport::topology                            topo_;
    std::unique_ptr<transport::stage_server>       server_;
    std::unique_ptr<transport::chain_pipeline>     chain_;
};

TEST_F(malformed_peer, GarbageInsteadOfAHelloIsDropped) {
    auto s = raw(false);
    std::vector<uint8_t> junk(64, 0xab);
    ASSERT_TRUE(s.write_all(junk).is_ok());
    EXPECT_TRUE(closed_by_server(s));
    expect_server_still_serves();
}

TEST_F(malformed_peer, BadHellosAreRefused) {
    for (uint32_t lane : {2u, 99u}) {  // lanes that do not exist
        auto s = transport::dial(topo_.stages[1].address, 2000ms);
        ASSERT_TRUE(s.is_ok());
        protocol::hello h;
        h.lane = lane;
        ASSERT_TRUE(s->write_all(protocol::encode_hello(h)).is_ok());
        EXPECT_TRUE(closed_by_server(*s));
    }
    auto silent = raw(false);  // connects and says nothing: the handshake times out
    EXPECT_TRUE(closed_by_server(silent));
    expect_server_still_serves();
}

std::vector<uint8_t> valid_prefill_frame() {
    protocol::request r;
    r.kind = protocol::message_kind::prefill;
    r.state.phase = protocol::message_phase::prefill;
    r.state.prompt_token_count = 2;
    r.tokens = {1, 2};
    protocol::activation_frame a;
    a.layer_end = 1;
    a.n_embd = 64;
    a.values.assign(2 * 64, 0.5f);
    r.activation = a;
    return protocol::encode_request(r);
}

TEST_F(malformed_peer, BadFramesCloseTheConnection) {
    std::vector<std::vector<uint8_t>> frames;
    frames.push_back({0xff, 0xff, 0xff, 0x7f, 1, 0});  // length over the limit
    frames.push_back({10, 0, 0, 0, 1, 0});              // length under the minimum
    auto unknown_kind = valid_prefill_frame();
    unknown_kind[4] = 99;
    frames.push_back(unknown_kind);
    auto truncated = valid_prefill_frame();
    truncated.resize(truncated.size() / 2);  // then the peer goes away
    frames.push_back(truncated);
    auto bad_count = valid_prefill_frame();
    bad_count[4 + 2 + 2 + 8 + 8 + 8] = 0xff;  // token_count field
    frames.push_back(bad_count);
    frames.push_back(valid_prefill_frame());  // valid bytes, but no ConfigureGeneration first on a final stage
    for (size_t i = 0; i < frames.size(); ++i) {
        auto s = raw(true);
        ASSERT_TRUE(s.write_all(frames[i]).is_ok());
        if (i == 3) s.shutdown();
        EXPECT_TRUE(i == 3 || closed_by_server(s)) << "frame " << i;
    }
    expect_server_still_serves();
}

TEST_F(malformed_peer, MismatchedActivationIsRefused) {
    protocol::request cfg;
    cfg.kind = protocol::message_kind::configure_generation;
    cfg.state.phase = protocol::message_phase::control;
    cfg.generation = protocol::generation_config{};
    protocol::request pre;
    pre.kind = protocol::message_kind::prefill;
    pre.state.phase = protocol::message_phase::prefill;
    pre.state.prompt_token_count = 1;
    pre.tokens = {1};
    protocol::activation_frame a;
    a.layer_end = 1;
    a.n_embd = 32;  // the model is 64 wide
    a.values.assign(32, 0.0f);
    pre.activation = a;
    auto s = raw(true);
    ASSERT_TRUE(s.write_all(protocol::encode_request(pre)).is_ok());
    EXPECT_TRUE(closed_by_server(s));
    expect_server_still_serves();
}

}  // namespace
}  // namespace skippy::testing
