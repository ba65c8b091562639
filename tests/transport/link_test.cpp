// Handshakes and framing over real loopback sockets.
#include "link_test_util.h"
#include "transport/link.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <thread>

namespace skippy::transport {
namespace {

using test_util::accept_all;
using test_util::acceptor;
using test_util::k_key;
using test_util::listener_fixture;
using test_util::options_with_key;
using test_util::stop_request;


TEST(link, HandshakeThenFramesBothWays) {
    listener_fixture f;
    acceptor a(f.listener, options_with_key(""), accept_all);
    protocol::hello h;
    h.lane = 3;
    h.sender_stage = 1;
    auto link = connect_link(f.ep, h, options_with_key(""), "peer");
    a.thread.join();
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    ASSERT_TRUE(a.outcome.is_ok());
    EXPECT_EQ(a.outcome->hello.lane, 3u);
    EXPECT_FALSE(link->authenticated());
    stage_link server(std::move(a.socket), options_with_key(""), "client");

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



TEST(link, KeyedHandshakeAuthenticatesBothEndsAndFramesCarryMacs) {
    listener_fixture f;
    acceptor a(f.listener, options_with_key(k_key), accept_all);
    protocol::hello h;
    h.lane = 1;
    auto link = connect_link(f.ep, h, options_with_key(k_key), "peer");
    a.thread.join();
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    ASSERT_TRUE(a.outcome.is_ok()) << a.outcome.error().to_string();
    EXPECT_TRUE(link->authenticated());
    EXPECT_EQ(a.outcome->hello.auth, protocol::link_auth::hmac_sha256);
    stage_link server(std::move(a.socket), options_with_key(k_key), "client", std::move(a.outcome->macs));
    EXPECT_TRUE(server.authenticated());
    for (uint64_t id = 1; id <= 3; ++id) {  // several frames: the sequence numbers advance in step
        ASSERT_TRUE(link->send_request(stop_request(id)).is_ok());
        auto got = server.read_request(clock::now() + std::chrono::seconds(2));
        ASSERT_TRUE(got.is_ok()) << got.error().to_string();
        EXPECT_EQ(got->request_id, id);
    }
    server.fail(3, make_error(error_code::runtime, "out of KV blocks"));
    auto reply = link->read_reply(clock::now() + std::chrono::seconds(2));
    ASSERT_TRUE(reply.is_ok()) << reply.error().to_string();
    EXPECT_EQ(protocol::error_reply_status(*reply).code(), error_code::runtime);
}

TEST(link, WrongKeyIsRefusedOnBothSidesWithoutEchoingIt) {
    listener_fixture f;
    acceptor a(f.listener, options_with_key(k_key), accept_all);
    auto link = connect_link(f.ep, protocol::hello{}, options_with_key("another key, thirty-two bytes long"), "stage 1");
    a.thread.join();
    ASSERT_FALSE(link.is_ok());
    EXPECT_EQ(link.error().code(), error_code::permission) << link.error().to_string();
    EXPECT_NE(link.error().message().find("did not prove the stage key"), std::string::npos) << link.error().to_string();
    EXPECT_EQ(link.error().message().find("thirty-two"), std::string::npos) << "never echoes a key";
    ASSERT_FALSE(a.outcome.is_ok()) << "the listener accepted a dialer that never proved the key";
}

TEST(link, AKeyOnOneSideOnlyIsRefused) {
    for (bool listener_keyed : {true, false}) {
        listener_fixture f;
        acceptor a(f.listener, options_with_key(listener_keyed ? k_key : ""), accept_all);
        auto link = connect_link(f.ep, protocol::hello{}, options_with_key(listener_keyed ? "" : k_key), "stage 1");
        a.thread.join();
        ASSERT_FALSE(link.is_ok()) << listener_keyed;
        EXPECT_EQ(link.error().code(), error_code::permission) << link.error().to_string();
        EXPECT_NE(link.error().message().find("--stage-key-file"), std::string::npos) << link.error().to_string();
        EXPECT_EQ(a.outcome.error().code(), error_code::permission);
    }
}

TEST(link, AcceptorIsNotAskedBeforeTheDialerProvesTheKey) {
    listener_fixture f;
    std::atomic<bool> asked{false};
    acceptor a(f.listener, options_with_key(k_key), [&](const protocol::hello &) {
        asked = true;
        return status::ok();
    });
    auto link = connect_link(f.ep, protocol::hello{}, options_with_key(std::string(32, 'x')), "stage 1");
    a.thread.join();
    EXPECT_FALSE(link.is_ok());
    EXPECT_FALSE(asked.load()) << "a peer without the key reached the lane decision (a takeover)";
}

TEST(link, AcceptorDecisionIsRelayedToTheDialer) {
    listener_fixture f;
    acceptor a(f.listener, options_with_key(""), [](const protocol::hello &) {
        return make_error(error_code::invalid_argument, "lane 9 does not exist");
    });
    auto link = connect_link(f.ep, protocol::hello{}, options_with_key(""), "stage 1");
    a.thread.join();
    ASSERT_FALSE(link.is_ok());
    EXPECT_NE(link.error().message().find("lane 9 does not exist"), std::string::npos) << link.error().message();
}

TEST(link, PeerSpeakingAnotherVersionGetsAClearRefusal) {
    listener_fixture f;
    acceptor a(f.listener, options_with_key(""), accept_all);
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
    acceptor a(f.listener, options_with_key(""), accept_all);
    auto link = connect_link(f.ep, protocol::hello{}, options_with_key(""), "silent peer");
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
    auto link = connect_link({"127.0.0.1", port}, protocol::hello{}, options_with_key(""), "stage 1 (127.0.0.1)");
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
        acceptor a(f.listener, options_with_key(""), accept_all);
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
    linked_pair p(options_with_key(""));
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
        linked_pair p(options_with_key(""));
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
    link_options o = options_with_key("");
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

long peak_rss_kib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

TEST(link, AHeaderClaiming256MiBCostsOnlyTheBytesThatArrive) {
    link_options o = options_with_key("");
    o.frame_timeout = std::chrono::milliseconds(100);
    const long before_kib = peak_rss_kib();
    for (int i = 0; i < 4; ++i) {
        linked_pair p(o);
        // A Prefill header (a kind allowed the full max_frame_bytes) and 4 KiB of body.
        std::vector<uint8_t> bytes = {0x00, 0x00, 0x00, 0x10, 1, 0};
        bytes.resize(4096, 0);
        ASSERT_TRUE(p.server_socket.write_all(bytes).is_ok());
        auto r = p.client.read_reply(clock::now() + std::chrono::seconds(10));
        ASSERT_FALSE(r.is_ok());
        EXPECT_EQ(r.error().code(), error_code::timed_out) << r.error().to_string();
        EXPECT_NE(r.error().message().find("only 4096 of 268435456 bytes arrived"), std::string::npos) << r.error().to_string();
    }
    // Allocating what the headers claim would have raised the peak by 256 MiB at least.
    EXPECT_LT(peak_rss_kib() - before_kib, 64 * 1024) << "the claimed length was allocated before its bytes arrived";
}

TEST(link, IdleWaitBetweenFramesIsNotBoundedByTheFrameTimeout) {
    link_options o = options_with_key("");
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

TEST(handshake_pool, ANewConnectionOverTheCapPushesOutTheOldestAndStopInterruptsTheRest) {
    listener_fixture f;
    handshake_pool pool(2, 2);
    std::mutex m;
    std::condition_variable cv;
    int n_reading = 0;
    std::vector<status> outcomes(3);
    auto silent = [&](int i) {
        return [&, i](handshake_pool::pending & p) {
            {
                std::lock_guard<std::mutex> lock(m);
                ++n_reading;
            }
            cv.notify_all();
            uint8_t byte = 0;
            status st = p.socket().read_exact(std::span<uint8_t>(&byte, 1), clock::now() + std::chrono::minutes(10));
            std::lock_guard<std::mutex> lock(m);
            outcomes[static_cast<size_t>(i)] = st;
            cv.notify_all();
        };
    };
    std::vector<tcp_socket> dialers;
    for (int i = 0; i < 3; ++i) {
        auto c = dial(f.ep, std::chrono::milliseconds(2000));
        ASSERT_TRUE(c.is_ok());
        dialers.push_back(std::move(c).value());
        auto s = f.listener.accept(std::chrono::milliseconds(2000));
        ASSERT_TRUE(s.is_ok());
        ASSERT_TRUE(pool.start(std::move(s).value(), silent(i))) << "a connection is never refused while the pool runs";
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return n_reading == i + 1; });
    }
    {
        // The third pushed out the first (oldest, same address): its read ends at once.
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return !outcomes[0].is_ok(); });
    }
    EXPECT_EQ(pool.n_evicted(), 1);
    EXPECT_EQ(pool.n_pending(), 2);
    uint8_t byte = 0;
    status closed = dialers[0].read_exact(std::span<uint8_t>(&byte, 1), clock::now() + std::chrono::seconds(10));
    EXPECT_EQ(closed.code(), error_code::peer_closed) << "the pushed-out connection is closed";

    pool.stop();  // would otherwise wait out the 10-minute reads
    EXPECT_FALSE(outcomes[1].is_ok() || outcomes[2].is_ok()) << "stop() ends the pending reads";
    EXPECT_EQ(pool.n_pending(), 0);
    EXPECT_FALSE(pool.start(tcp_socket{}, silent(0))) << "a stopped pool starts nothing";
}

}  // namespace
}  // namespace skippy::transport
