// A live stage server (and stage 0's return listener) fed hostile bytes: every bad
// frame gets an Error reply naming the problem and then a close, every bad hello a
// refusal with its reason (or, when it is not our protocol at all, a bare close) —
// never a crash or a hang — and the server keeps serving a good client afterwards.
#include "../model/model_fixture.h"
#include "chain_fixture.h"

#include <sys/socket.h>

#include <thread>

namespace skippy::testing {
namespace {

using namespace std::chrono_literals;
using transport::clock;

// Longer than any timeout the servers below use unless a test says otherwise, and far
// shorter than the 600 s reply timeout a stalled frame used to hold a lane for.
constexpr auto k_answer_wait = 15s;

class malformed_peer : public ::testing::Test {
protected:
    // Options of the stage 1 server and of stage 0 (the chain): fixtures below vary them.
    virtual transport::chain_options server_options() const {
        transport::chain_options o;
        o.link.handshake_timeout = 2s;
        o.link.frame_timeout = 1s;
        return o;
    }
    virtual transport::chain_options chain_options() const { return {}; }

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
        server_ = std::make_unique<transport::stage_server>(std::move(st).value(), nullptr, 1, topo_, std::move(l1).value(), server_options());
        server_->start();
        so.layers = {0, 1};
        auto st0 = stage::load(file_, so);
        ASSERT_TRUE(st0.is_ok());
        chain_ = std::make_unique<transport::chain_pipeline>(std::move(st0).value(), nullptr, topo_, std::move(l0).value(), chain_options());
    }

    transport::tcp_socket dial(int stage = 1) {
        auto s = transport::dial(topo_.stages[static_cast<size_t>(stage)].address, 2000ms);
        EXPECT_TRUE(s.is_ok()) << s.error().to_string();
        return s.is_ok() ? std::move(s).value() : transport::tcp_socket{};
    }

    // The server's hello_reply to `h`.
    protocol::hello_reply hello_answer(transport::tcp_socket & s, const protocol::hello & h) {
        EXPECT_TRUE(s.write_all(protocol::encode_hello(h)).is_ok());
        const auto deadline = clock::now() + k_answer_wait;
        std::vector<uint8_t> reply(protocol::hello_reply_fixed_bytes);
        status st = s.read_exact(reply, deadline);
        EXPECT_TRUE(st.is_ok()) << "no hello_reply: " << st.to_string();
        auto len = protocol::peek_hello_reply_length(reply, {});
        EXPECT_TRUE(len.is_ok());
        if (!st.is_ok() || !len.is_ok()) return {};
        reply.resize(*len);
        EXPECT_TRUE(s.read_exact(std::span<uint8_t>(reply).subspan(protocol::hello_reply_fixed_bytes), deadline).is_ok());
        auto decoded = protocol::decode_hello_reply(reply, {});
        EXPECT_TRUE(decoded.is_ok());
        return decoded.is_ok() ? *decoded : protocol::hello_reply{};
    }

    // A raw connection to stage 1, past a valid handshake for `lane`.
    transport::tcp_socket connected(uint32_t lane = 1) {
        auto s = dial();
        protocol::hello h;
        h.lane = lane;
        EXPECT_EQ(hello_answer(s, h).status, protocol::hello_status::ok);
        return s;
    }

    // The server closes the connection without sending a byte.
    static void expect_close_without_reply(transport::tcp_socket & s) {
        uint8_t byte = 0;
        size_t got = 0;
        status st = s.read_exact(std::span<uint8_t>(&byte, 1), clock::now() + k_answer_wait, &got);
        ASSERT_FALSE(st.is_ok()) << "the server sent a reply";
        EXPECT_EQ(st.code(), error_code::peer_closed) << "not closed within the wait: " << st.to_string();
    }

    // The server answers with an Error reply whose message names `problem`, then closes.
    static void expect_error_then_close(transport::tcp_socket s, const std::string & problem) {
        transport::stage_link link(std::move(s), {}, "stage 1");
        auto r = link.read_reply(clock::now() + k_answer_wait);
        ASSERT_TRUE(r.is_ok()) << "no reply: " << r.error().to_string();
        ASSERT_EQ(r->kind, protocol::message_kind::error);
        const status reason = protocol::error_reply_status(*r);
        EXPECT_NE(reason.message().find(problem), std::string::npos) << reason.to_string();
        auto after = link.read_reply(clock::now() + k_answer_wait);
        EXPECT_FALSE(after.is_ok()) << "a second reply after the Error";
        EXPECT_TRUE(link.peer_closed()) << "not closed after the Error: " << after.error().to_string();
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

TEST_F(malformed_peer, GarbageInsteadOfAHelloIsClosedWithoutAReply) {
    // Not our protocol at all (bad magic): docs/protocol.md says close, no reply.
    auto s = dial();
    std::vector<uint8_t> junk(protocol::hello_prefix_bytes, 0xab);
    ASSERT_TRUE(s.write_all(junk).is_ok());
    expect_close_without_reply(s);
    expect_server_still_serves();
}

TEST_F(malformed_peer, BadHellosAreRefusedWithTheirReason) {
    struct bad_hello {
        protocol::hello hello;
        std::string     problem;
    };
    std::vector<bad_hello> cases;
    for (uint32_t lane : {2u, 99u}) {  // lanes that do not exist
        protocol::hello h;
        h.lane = lane;
        cases.push_back({h, "lane " + std::to_string(lane) + " does not exist"});
    }
    protocol::hello wrong_kind;
    wrong_kind.link = protocol::link_kind::direct_return;
    cases.push_back({wrong_kind, "takes forward links only"});
    protocol::hello wrong_sender;
    wrong_sender.sender_stage = 1;
    cases.push_back({wrong_sender, "is not upstream of stage 1"});
    for (const auto & c : cases) {
        auto s = dial();
        const auto answer = hello_answer(s, c.hello);
        EXPECT_EQ(answer.status, protocol::hello_status::bad_request) << c.problem;
        EXPECT_NE(answer.reason.find(c.problem), std::string::npos) << answer.reason;
        expect_close_without_reply(s);  // nothing after the refusal
    }
    expect_server_still_serves();
}

TEST_F(malformed_peer, SilentDialerIsClosedAfterTheHandshakeTimeout) {
    auto silent = dial();
    expect_close_without_reply(silent);
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

constexpr size_t k_token_count_offset = 4 + 2 + 2 + 8 + 8 + 8;

TEST_F(malformed_peer, BadFramesGetAnErrorNamingTheProblemThenAClose) {
    struct bad_frame {
        std::string          name;
        std::vector<uint8_t> bytes;  // exactly what the server reads before it refuses
        std::string          problem;
    };
    std::vector<bad_frame> cases;
    cases.push_back({"length over the limit", {0xff, 0xff, 0xff, 0x7f}, "exceeds max_frame_bytes"});
    cases.push_back({"length under the minimum", {10, 0, 0, 0}, "below the minimum frame"});
    // 256 MiB claimed by a kind that can never be that long: refused from its 6 header bytes.
    cases.push_back({"stop claiming 256 MiB", {0x00, 0x00, 0x00, 0x10, 4, 0}, "claims 268435456 bytes; that kind has at most"});
    auto unknown_kind = valid_prefill_frame();
    unknown_kind[4] = 99;
    cases.push_back({"unknown kind", unknown_kind, "99"});
    auto bad_count = valid_prefill_frame();
    const uint32_t too_many = protocol::protocol_limits{}.max_tokens_per_message + 1;
    for (size_t i = 0; i < 4; ++i) bad_count[k_token_count_offset + i] = static_cast<uint8_t>(too_many >> (8 * i));
    cases.push_back({"token count over the limit", bad_count, "exceeds max_tokens_per_message"});
    // Valid bytes, but the final stage needs ConfigureGeneration first.
    cases.push_back({"prefill before configure", valid_prefill_frame(), "before ConfigureGeneration"});
    for (auto & c : cases) {
        SCOPED_TRACE(c.name);
        auto s = connected();
        ASSERT_TRUE(s.write_all(c.bytes).is_ok());
        expect_error_then_close(std::move(s), c.problem);
    }
    expect_server_still_serves();
}

TEST_F(malformed_peer, AFrameCutShortByACloseIsAnErrorNotAnIdleEnd) {
    auto s = connected();
    auto frame = valid_prefill_frame();
    frame.resize(frame.size() / 2);
    ASSERT_TRUE(s.write_all(frame).is_ok());
    ASSERT_EQ(::shutdown(s.fd(), SHUT_WR), 0);  // the peer stops sending; it can still read the reason
    expect_error_then_close(std::move(s), "truncated frame: the peer closed the connection after " +
                                              std::to_string(frame.size()) + " of " + std::to_string(frame.size() * 2));
    expect_server_still_serves();
}

TEST_F(malformed_peer, AFrameThatStallsHalfwayTimesOut) {
    // The server's frame_timeout is 1 s: the rest of a begun frame must come by then,
    // instead of the lane waiting out the 600 s reply timeout.
    auto s = connected();
    auto frame = valid_prefill_frame();
    frame.resize(frame.size() / 2);
    ASSERT_TRUE(s.write_all(frame).is_ok());
    expect_error_then_close(std::move(s), "truncated frame: only " + std::to_string(frame.size()) + " of " +
                                              std::to_string(frame.size() * 2) + " bytes arrived within 1000 ms");
    expect_server_still_serves();
}

TEST_F(malformed_peer, MismatchedActivationIsRefused) {
    auto s = connected();
    protocol::request cfg;
    cfg.kind = protocol::message_kind::configure_generation;
    cfg.request_id = 1;
    cfg.state.phase = protocol::message_phase::control;
    cfg.generation = protocol::generation_config{};
    ASSERT_TRUE(s.write_all(protocol::encode_request(cfg)).is_ok());
    // The final stage dials stage 0's return link before it acks.
    transport::stage_link link(std::move(s), {}, "stage 1");
    auto ack = link.read_reply(clock::now() + k_answer_wait);
    ASSERT_TRUE(ack.is_ok()) << ack.error().to_string();
    ASSERT_EQ(ack->kind, protocol::message_kind::ack) << protocol::error_reply_status(*ack).to_string();

    protocol::request pre;
    pre.kind = protocol::message_kind::prefill;
    pre.request_id = 2;
    pre.state.phase = protocol::message_phase::prefill;
    pre.state.prompt_token_count = 1;
    pre.tokens = {1};
    protocol::activation_frame a;
    a.layer_end = 1;
    a.n_embd = 32;  // the model is 64 wide
    a.values.assign(32, 0.0f);
    pre.activation = a;
    ASSERT_TRUE(link.send_request(pre).is_ok());
    auto r = link.read_reply(clock::now() + k_answer_wait);
    ASSERT_TRUE(r.is_ok()) << r.error().to_string();
    ASSERT_EQ(r->kind, protocol::message_kind::error);
    EXPECT_EQ(r->request_id, 2u);
    const status reason = protocol::error_reply_status(*r);
    EXPECT_NE(reason.message().find("activation width 32 but the model's is 64"), std::string::npos) << reason.to_string();
    auto after = link.read_reply(clock::now() + k_answer_wait);
    EXPECT_FALSE(after.is_ok());
    EXPECT_TRUE(link.peer_closed()) << after.error().to_string();
    expect_server_still_serves();
}

// The batch link (docs/transport.md, "Lanes and steps"): a Step whose lane list is
// malformed, or that names a lane the stage does not have, or is of the wrong width,
// gets an Error naming the problem and a close; the stage serves on.
protocol::step_frame valid_step() {
    protocol::step_frame s;
    s.step_id = 5;
    protocol::step_entry e;
    e.kind = protocol::message_kind::prefill;
    e.request_id = 1;
    e.session_id = 0;
    e.state.phase = protocol::message_phase::prefill;
    e.state.prompt_token_count = 2;
    e.tokens = {1, 2};
    s.entries = {e};
    s.activation.layer_end = 1;
    s.activation.n_embd = 64;
    s.activation.values.assign(2 * 64, 0.5f);
    return s;
}

TEST_F(malformed_peer, BadStepsOnTheBatchLinkGetAnErrorNamingTheProblemThenAClose) {
    struct bad_step {
        std::string          name;
        std::vector<uint8_t> bytes;
        std::string          problem;
    };
    std::vector<bad_step> cases;
    protocol::step_frame two = valid_step();
    two.entries.push_back(two.entries[0]);
    two.entries[1].session_id = 1;
    two.activation.values.assign(4 * 64, 0.5f);
    auto twice = protocol::encode_step(two);
    // Entry 1's session_id (lane): header, entry 0 with its two tokens, then 12 bytes in.
    const size_t at_lane1 = protocol::step_fixed_bytes + protocol::step_entry_fixed_bytes + 8 + 12;
    twice[at_lane1] = 0;  // both entries name lane 0
    cases.push_back({"a lane named twice", twice, "lane 0 appears twice"});
    protocol::step_frame far = valid_step();
    far.entries[0].session_id = 9;
    cases.push_back({"a lane the stage does not have", protocol::encode_step(far), "step entry for lane 9, but this stage has 2 lanes"});
    protocol::step_frame narrow = valid_step();
    narrow.activation.n_embd = 32;
    narrow.activation.values.assign(2 * 32, 0.5f);
    cases.push_back({"the wrong width", protocol::encode_step(narrow), "step activation width 32"});
    auto none = protocol::encode_step(valid_step());
    for (size_t i = 0; i < 4; ++i) none[20 + i] = 0;  // n_entries 0
    cases.push_back({"no entries", none, "n_entries"});
    cases.push_back({"a request instead of a step", valid_prefill_frame(), "is not a step"});
    for (auto & c : cases) {
        SCOPED_TRACE(c.name);
        auto s = dial();
        protocol::hello h;
        h.link = protocol::link_kind::batch;
        ASSERT_EQ(hello_answer(s, h).status, protocol::hello_status::ok);
        ASSERT_TRUE(s.write_all(c.bytes).is_ok());
        expect_error_then_close(std::move(s), c.problem);
    }
    expect_server_still_serves();
}

TEST_F(malformed_peer, ABatchLinkNamesLaneZero) {
    auto s = dial();
    protocol::hello h;
    h.link = protocol::link_kind::batch;
    h.lane = 1;
    const auto answer = hello_answer(s, h);
    EXPECT_EQ(answer.status, protocol::hello_status::bad_request);
    EXPECT_NE(answer.reason.find("a batch link names lane 0"), std::string::npos) << answer.reason;
    expect_server_still_serves();
}

// Handshakes run off the accept thread: a dialer that says nothing, holding its
// connection open far longer than the other side's handshake timeout, must not keep
// a real request from getting through.
class silent_dialer_at_stage_1 : public malformed_peer {
protected:
    transport::chain_options server_options() const override {
        transport::chain_options o;
        o.link.handshake_timeout = 120s;  // the silent dialer would hold an accept thread this long
        return o;
    }
    // Stage 0's own handshake with stage 1 gives up after the default 2 s.
};

TEST_F(silent_dialer_at_stage_1, DoesNotStallARealRequest) {
    auto silent = dial(1);
    auto half_hello = dial(1);
    const auto hello = protocol::encode_hello(protocol::hello{});
    ASSERT_TRUE(half_hello.write_all(std::span<const uint8_t>(hello).first(8)).is_ok());
    expect_server_still_serves();
}

class silent_dialer_at_stage_0 : public malformed_peer {
protected:
    transport::chain_options chain_options() const override {
        transport::chain_options o;
        o.link.handshake_timeout = 120s;  // stage 0's acceptor would wait this long
        return o;
    }
    // Stage 1 dials the return link with the default 2 s handshake timeout.
    transport::chain_options server_options() const override { return {}; }
};

TEST_F(silent_dialer_at_stage_0, DoesNotStallTheReturnLink) {
    auto silent = dial(0);
    // A valid return-link hello, then no PredictionReturnOpen.
    auto no_open = dial(0);
    protocol::hello h;
    h.link = protocol::link_kind::direct_return;
    h.lane = 1;
    h.sender_stage = 1;
    ASSERT_EQ(hello_answer(no_open, h).status, protocol::hello_status::ok);
    expect_server_still_serves();
}

}  // namespace
}  // namespace skippy::testing
