// Handshakes and framing over real loopback sockets.
#include "transport/link.h"

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <thread>

namespace skippy::transport {
namespace {

struct listener_fixture {
    tcp_listener listener;
    endpoint     ep;
    listener_fixture() {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
    }
};

link_options options_with_token(const std::string & token) {
    link_options o;
    o.auth_token = token;
    o.handshake_timeout = std::chrono::milliseconds(2000);
    return o;
}

// Runs answer_hello on the next accepted connection in a thread.
struct acceptor {
    std::thread           thread;
    result<protocol::hello> outcome = make_error(error_code::internal, "not run");
    tcp_socket            socket;
    acceptor(tcp_listener & l, const link_options & o, std::function<status(const protocol::hello &)> accept) {
        thread = std::thread([&, o, accept] {
            auto s = l.accept(std::chrono::milliseconds(3000));
            if (!s.is_ok()) { outcome = s.error(); return; }
            socket = std::move(s).value();
            outcome = answer_hello(socket, o, accept);
        });
    }
    ~acceptor() { if (thread.joinable()) thread.join(); }
};

status accept_all(const protocol::hello &) { return status::ok(); }

TEST(link, HandshakeThenFramesBothWays) {
    listener_fixture f;
    acceptor a(f.listener, options_with_token(""), accept_all);
    protocol::hello h;
    h.lane = 3;
    h.sender_stage = 1;
    auto link = connect_link(f.ep, h, options_with_token(""), "peer");
    a.thread.join();
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    ASSERT_TRUE(a.outcome.is_ok());
    EXPECT_EQ(a.outcome->lane, 3u);
    stage_link server(std::move(a.socket), options_with_token(""), "client");

    protocol::request r;
    r.kind = protocol::message_kind::stop;
    r.request_id = 42;
    r.state.phase = protocol::message_phase::control;
    ASSERT_TRUE(link->send_request(r).is_ok());
    auto got = server.read_request(clock::now() + std::chrono::seconds(2));
    ASSERT_TRUE(got.is_ok()) << got.error().to_string();
    EXPECT_EQ(got->request_id, 42u);
    server.fail(42, make_error(error_code::runtime, "out of KV blocks"));
    auto reply = link->read_reply(clock::now() + std::chrono::seconds(2));
    ASSERT_TRUE(reply.is_ok());
    EXPECT_EQ(reply->kind, protocol::message_kind::error);
    EXPECT_EQ(protocol::error_reply_status(*reply).code(), error_code::runtime);
    auto after = link->read_reply(clock::now() + std::chrono::seconds(2));
    EXPECT_FALSE(after.is_ok()) << "fail() closes the link";
}

TEST(link, WrongAuthTokenIsRefusedWithAReason) {
    listener_fixture f;
    acceptor a(f.listener, options_with_token("secret"), accept_all);
    auto link = connect_link(f.ep, protocol::hello{}, options_with_token("guess"), "stage 1");
    a.thread.join();
    ASSERT_FALSE(link.is_ok());
    EXPECT_EQ(link.error().code(), error_code::permission);
    EXPECT_FALSE(a.outcome.is_ok());
    EXPECT_EQ(link.error().message().find("guess"), std::string::npos) << "never echoes a token";
}

TEST(link, AcceptorDecisionIsRelayedToTheDialer) {
    listener_fixture f;
    acceptor a(f.listener, options_with_token(""), [](const protocol::hello &) {
        return make_error(error_code::invalid_argument, "lane 9 does not exist");
    });
    auto link = connect_link(f.ep, protocol::hello{}, options_with_token(""), "stage 1");
    a.thread.join();
    ASSERT_FALSE(link.is_ok());
    EXPECT_NE(link.error().message().find("lane 9 does not exist"), std::string::npos) << link.error().message();
}

TEST(link, PeerSpeakingAnotherVersionGetsAClearRefusal) {
    listener_fixture f;
    acceptor a(f.listener, options_with_token(""), accept_all);
    auto s = dial(f.ep, std::chrono::milliseconds(2000));
    ASSERT_TRUE(s.is_ok());
    protocol::hello h;
    auto bytes = protocol::encode_hello(h);
    bytes[4] = 9;  // version 9
    ASSERT_TRUE(s->write_all(bytes).is_ok());
    std::vector<uint8_t> reply(protocol::hello_reply_fixed_bytes);
    ASSERT_TRUE(s->read_exact(reply, clock::now() + std::chrono::seconds(2)).is_ok());
    auto len = protocol::peek_hello_reply_length(reply, {});
    ASSERT_TRUE(len.is_ok());
    reply.resize(*len);
    ASSERT_TRUE(s->read_exact(std::span<uint8_t>(reply).subspan(protocol::hello_reply_fixed_bytes), clock::now() + std::chrono::seconds(2)).is_ok());
    auto decoded = protocol::decode_hello_reply(reply, {});
    ASSERT_TRUE(decoded.is_ok());
    EXPECT_EQ(decoded->status, protocol::hello_status::version_mismatch);
    EXPECT_NE(decoded->reason.find("9"), std::string::npos) << decoded->reason;
    a.thread.join();
    EXPECT_EQ(a.outcome.error().code(), error_code::unsupported);
}

TEST(link, ReadsTimeOutInsteadOfHanging) {
    listener_fixture f;
    acceptor a(f.listener, options_with_token(""), accept_all);
    auto link = connect_link(f.ep, protocol::hello{}, options_with_token(""), "silent peer");
    a.thread.join();
    ASSERT_TRUE(link.is_ok());
    auto r = link->read_reply(clock::now() + std::chrono::milliseconds(100));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::timed_out) << r.error().to_string();
}

TEST(link, DialingNobodyFailsFast) {
    auto l = tcp_listener::listen({"127.0.0.1", 0});
    ASSERT_TRUE(l.is_ok());
    const uint16_t port = l->port();
    l->close();
    auto link = connect_link({"127.0.0.1", port}, protocol::hello{}, options_with_token(""), "stage 1 (127.0.0.1)");
    EXPECT_FALSE(link.is_ok());
    EXPECT_NE(link.error().message().find("stage 1"), std::string::npos);
}

// A connected pair past the handshake: `client` is the dialer's link, `server_socket`
// the listener's raw end (the tests write hand-made bytes on it).
struct linked_pair {
    listener_fixture      f;
    stage_link            client;
    tcp_socket            server_socket;
    explicit linked_pair(const link_options & client_options) {
        acceptor a(f.listener, options_with_token(""), accept_all);
        auto link = connect_link(f.ep, protocol::hello{}, client_options, "stage 2");
        a.thread.join();
        EXPECT_TRUE(link.is_ok());
        if (link.is_ok()) client = std::move(link).value();
        server_socket = std::move(a.socket);
    }
};

std::vector<uint8_t> ack_frame() {
    protocol::reply r;
    r.kind = protocol::message_kind::ack;
    r.request_id = 7;
    return protocol::encode_reply(r);
}

TEST(link, ACloseBetweenFramesIsTheEndOfTheLink) {
    linked_pair p(options_with_token(""));
    ASSERT_TRUE(p.server_socket.write_all(ack_frame()).is_ok());
    p.server_socket.close();
    auto first = p.client.read_reply(clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(first.is_ok()) << first.error().to_string();
    auto second = p.client.read_reply(clock::now() + std::chrono::seconds(10));
    ASSERT_FALSE(second.is_ok());
    EXPECT_TRUE(p.client.peer_closed()) << second.error().to_string();
    EXPECT_EQ(second.error().code(), error_code::peer_closed) << second.error().to_string();
}

TEST(link, ACloseInTheMiddleOfAFrameIsATruncatedFrame) {
    for (size_t cut : {size_t{2}, size_t{40}}) {  // inside the length field, inside the body
        linked_pair p(options_with_token(""));
        const auto frame = ack_frame();
        ASSERT_TRUE(p.server_socket.write_all(std::span<const uint8_t>(frame).first(cut)).is_ok());
        p.server_socket.close();
        auto r = p.client.read_reply(clock::now() + std::chrono::seconds(10));
        ASSERT_FALSE(r.is_ok());
        EXPECT_FALSE(p.client.peer_closed()) << "a close mid-frame is not a clean end";
        EXPECT_EQ(r.error().code(), error_code::unavailable) << r.error().to_string();
        const std::string want = "truncated frame: the peer closed the connection after " + std::to_string(cut) + " of " +
                                 std::to_string(cut < 4 ? 4 : frame.size()) + " bytes";
        EXPECT_NE(r.error().message().find(want), std::string::npos) << r.error().to_string();
        EXPECT_NE(r.error().message().find("stage 2"), std::string::npos) << "names the peer";
    }
}

TEST(link, AFrameThatStallsTimesOutAfterTheFrameTimeoutNotTheCallersDeadline) {
    link_options o = options_with_token("");
    o.frame_timeout = std::chrono::milliseconds(200);
    linked_pair p(o);
    const auto frame = ack_frame();
    ASSERT_TRUE(p.server_socket.write_all(std::span<const uint8_t>(frame).first(10)).is_ok());
    // The caller would wait a minute for a frame to begin; a begun one gets 200 ms.
    auto r = p.client.read_reply(clock::now() + std::chrono::seconds(60));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::timed_out) << r.error().to_string();
    EXPECT_NE(r.error().message().find("truncated frame: only 10 of " + std::to_string(frame.size()) + " bytes arrived within 200 ms"),
              std::string::npos)
        << r.error().to_string();
}

TEST(link, IdleWaitBetweenFramesIsNotBoundedByTheFrameTimeout) {
    link_options o = options_with_token("");
    o.frame_timeout = std::chrono::milliseconds(1);
    linked_pair p(o);
    // Nothing arrives: the caller's deadline, not the frame timeout, ends the wait.
    auto r = p.client.read_reply(clock::now() + std::chrono::milliseconds(300));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::timed_out) << r.error().to_string();
    EXPECT_NE(r.error().message().find("timed out waiting for the peer"), std::string::npos) << r.error().to_string();
    ASSERT_TRUE(p.server_socket.write_all(ack_frame()).is_ok());
    auto later = p.client.read_reply(clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(later.is_ok()) << later.error().to_string();
}

TEST(handshake_pool, RefusesConnectionsOverTheCapAndStopInterruptsPendingOnes) {
    listener_fixture f;
    handshake_pool pool(1);
    std::mutex m;
    std::condition_variable cv;
    bool reading = false;
    status outcome;
    auto c1 = dial(f.ep, std::chrono::milliseconds(2000));
    ASSERT_TRUE(c1.is_ok());
    auto s1 = f.listener.accept(std::chrono::milliseconds(2000));
    ASSERT_TRUE(s1.is_ok());
    ASSERT_TRUE(pool.start(std::move(s1).value(), [&](handshake_pool::pending & p) {
        {
            std::lock_guard<std::mutex> lock(m);
            reading = true;
        }
        cv.notify_all();
        uint8_t byte = 0;
        status st = p.socket().read_exact(std::span<uint8_t>(&byte, 1), clock::now() + std::chrono::minutes(10));
        std::lock_guard<std::mutex> lock(m);
        outcome = st;
    }));
    {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return reading; });
    }
    EXPECT_EQ(pool.n_pending(), 1);

    auto c2 = dial(f.ep, std::chrono::milliseconds(2000));
    ASSERT_TRUE(c2.is_ok());
    auto s2 = f.listener.accept(std::chrono::milliseconds(2000));
    ASSERT_TRUE(s2.is_ok());
    bool ran = false;
    EXPECT_FALSE(pool.start(std::move(s2).value(), [&](handshake_pool::pending &) { ran = true; })) << "over the cap";
    uint8_t byte = 0;
    status refused = c2->read_exact(std::span<uint8_t>(&byte, 1), clock::now() + std::chrono::seconds(10));
    EXPECT_EQ(refused.code(), error_code::peer_closed) << "the connection over the cap is closed at once";

    pool.stop();  // would otherwise wait out the 10-minute read
    EXPECT_FALSE(outcome.is_ok()) << "stop() ends the pending read";
    EXPECT_FALSE(ran);
    EXPECT_EQ(pool.n_pending(), 0);
}

}  // namespace
}  // namespace skippy::transport
