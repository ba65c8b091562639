// Liveness: the step budget's arithmetic, and links whose peer never answers failing
// with timed_out once that budget is spent (never earlier, never a hang).
#include "../protocol/sample_messages.h"
#include "link_test_util.h"
#include "transport/batch_link.h"
#include "transport/downstream.h"
#include "transport/liveness.h"
#include "transport/stage_server.h"

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace skippy::transport {
namespace {

using namespace std::chrono_literals;

TEST(step_budget, IsTheBasePlusTheTokensAtTheFloorRatePerHop) {
    liveness_options o;
    o.step_base = 1500ms;
    o.step_per_token = 7ms;
    EXPECT_EQ(step_budget(o, 0), 1500ms);
    EXPECT_EQ(step_budget(o, 1), 1507ms);
    EXPECT_EQ(step_budget(o, 64), 1500ms + 64 * 7ms);
    EXPECT_EQ(step_budget(o, 64, 3), 3 * (1500ms + 64 * 7ms));
    EXPECT_EQ(step_budget(o, -5), 1500ms) << "a negative count is no work";
    EXPECT_EQ(step_budget(o, 10, 0), step_budget(o, 10, 1)) << "at least one hop";
    o.step_base = 0ms;
    o.step_per_token = 0ms;
    EXPECT_EQ(step_budget(o, 100), 1ms) << "never a zero deadline";
}

TEST(step_budget, SaturatesInsteadOfOverflowing) {
    liveness_options o;
    o.step_base = 1000ms;
    o.step_per_token = std::chrono::milliseconds(INT64_MAX / 4);
    const auto day = std::chrono::milliseconds(24LL * 3600 * 1000);
    EXPECT_EQ(step_budget(o, INT64_MAX), day);
    o.step_per_token = 1ms;
    EXPECT_EQ(step_budget(o, 1000, INT32_MAX), day);
    EXPECT_EQ(step_budget(o, INT64_MAX / 2, 2), day);
}

TEST(step_budget, DefaultsBoundEveryStepADefaultRequestSendsToTenSeconds) {
    const chain_options defaults;
    const liveness_options & o = defaults.link.liveness;
    const int64_t step_tokens = defaults.schedule.step_tokens;
    // A full step queued behind a full credit window of full steps, over one hop (the
    // ack each stage waits for from the next).
    const int64_t queued = step_tokens * (defaults.credit_window + 1);
    EXPECT_LE(step_budget(o, queued), 10s);
    // A decode's token over a 3-stage chain with nothing queued ahead.
    EXPECT_LE(step_budget(o, 1, 2), 10s);
}

TEST(heartbeat_monitor, SendsAfterQuietAnswersClearAndSilenceIsDeath) {
    const auto t0 = clock::now();
    heartbeat_monitor hb(1000ms, 300ms, t0);
    using action = heartbeat_monitor::action;
    EXPECT_EQ(hb.poll(t0 + 999ms, false), action::none);
    EXPECT_EQ(hb.poll(t0 + 1000ms, true), action::none) << "busy links are watched by their step deadlines";
    hb.on_traffic(t0 + 500ms);
    EXPECT_EQ(hb.poll(t0 + 1000ms, false), action::none) << "traffic restarts the quiet time";
    ASSERT_EQ(hb.poll(t0 + 1500ms, false), action::send);
    const uint64_t id = hb.on_sent(t0 + 1500ms);
    EXPECT_NE(id >> 63, 0u) << "never a step's or a request's id";
    EXPECT_TRUE(hb.pending());
    EXPECT_EQ(hb.poll(t0 + 1799ms, true), action::none);
    EXPECT_FALSE(hb.on_ack(id + 1, t0 + 1600ms)) << "a step's ack is not the heartbeat's";
    EXPECT_TRUE(hb.on_ack(id, t0 + 1600ms));
    EXPECT_FALSE(hb.pending());
    EXPECT_FALSE(hb.on_ack(id, t0 + 1601ms)) << "answered once";
    EXPECT_EQ(hb.poll(t0 + 2599ms, false), action::none);
    ASSERT_EQ(hb.poll(t0 + 2600ms, false), action::send);
    const uint64_t second = hb.on_sent(t0 + 2600ms);
    EXPECT_NE(second, id);
    EXPECT_EQ(hb.poll(t0 + 2899ms, false), action::none);
    EXPECT_EQ(hb.poll(t0 + 2900ms, true), action::dead) << "unanswered, busy or not";
    EXPECT_EQ(hb.n_sent(), 2);
    EXPECT_EQ(hb.n_answered(), 1);
}

TEST(heartbeat_monitor, IntervalZeroNeverSends) {
    const auto t0 = clock::now();
    heartbeat_monitor hb(0ms, 300ms, t0);
    EXPECT_EQ(hb.poll(t0 + 24h, false), heartbeat_monitor::action::none);
}

// A peer that completes the handshake and then reads whatever comes but never answers:
// a frozen stage, as far as its links show.
struct silent_peer {
    tcp_listener             listener;
    endpoint                 ep;
    std::thread              thread;
    std::optional<tcp_socket> socket;
    std::mutex               mutex;
    std::atomic<bool>        stop{false};

    explicit silent_peer(const link_options & o) {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
        thread = std::thread([this, o] {
            auto s = listener.accept(3000ms);
            if (!s.is_ok()) return;
            tcp_socket sock = std::move(s).value();
            if (!answer_hello(sock, o, [](const protocol::hello &) { return status::ok(); }).is_ok()) return;
            uint8_t sink[4096];
            while (!stop.load()) {
                // Drain (so writes never block) and never reply.
                const int fd = sock.fd();
                if (wait_readable(std::span<const int>(&fd, 1), clock::now() + 20ms) < 0) continue;
                if (::recv(fd, sink, sizeof(sink), 0) <= 0) break;
            }
        });
    }
    ~silent_peer() {
        stop.store(true);
        listener.close();
        if (thread.joinable()) thread.join();
    }
};

link_options fast_liveness() {
    link_options o;
    o.liveness.step_base = 300ms;
    o.liveness.step_per_token = 50ms;
    return o;
}

TEST(batch_link_liveness, AStepNeverAcknowledgedFailsTheLinkWithTimedOutOnceItsBudgetIsSpent) {
    const link_options o = fast_liveness();
    silent_peer peer(o);
    std::mutex m;
    std::condition_variable cv;
    std::optional<status> failure;
    std::vector<int32_t> failed_lanes;
    clock::time_point failed_at;
    batch_link link([&] { return connect_link(peer.ep, protocol::hello{.link = protocol::link_kind::batch}, o, "stage 1"); }, 4, 4,
                    [&](const status & why, const std::vector<int32_t> & lanes) {
                        std::lock_guard<std::mutex> lock(m);
                        failure = why;
                        failed_lanes = lanes;
                        failed_at = clock::now();
                        cv.notify_all();
                    });
    const protocol::step_frame step = protocol::testing::sample_step();  // 3 tokens, lanes 3 and 1
    const auto sent_at = clock::now();
    int64_t queued = 0;
    ASSERT_TRUE(link.send(step, nullptr, &queued).is_ok());
    EXPECT_EQ(queued, 3);
    std::unique_lock<std::mutex> lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return failure.has_value(); })) << "an unacknowledged step hung the link";
    EXPECT_EQ(failure->code(), error_code::timed_out) << failure->to_string();
    EXPECT_NE(failure->message().find("step"), std::string::npos) << failure->to_string();
    EXPECT_GE(failed_at - sent_at, step_budget(o.liveness, 3)) << "failed before its deadline";
    std::sort(failed_lanes.begin(), failed_lanes.end());
    EXPECT_EQ(failed_lanes, (std::vector<int32_t>{1, 3}));
    lock.unlock();
    link.wait_idle(3);  // returns: the failure forgot the step
}

TEST(batch_link_liveness, StepsQueuedBehindOthersAreChargedTheirTokens) {
    const link_options o = fast_liveness();
    silent_peer peer(o);
    batch_link link([&] { return connect_link(peer.ep, protocol::hello{.link = protocol::link_kind::batch}, o, "stage 1"); }, 4, 4,
                    nullptr);
    protocol::step_frame step = protocol::testing::sample_step();
    int64_t queued = 0;
    ASSERT_TRUE(link.send(step, nullptr, &queued).is_ok());
    EXPECT_EQ(queued, 3);
    step.step_id += 1;
    ASSERT_TRUE(link.send(step, nullptr, &queued).is_ok());
    EXPECT_EQ(queued, 6) << "the second step waits for the first";
    link.close();
}

// A next stage as far as a batch link sees it: acks every Step, and answers
// Heartbeats only when told to (a peer that froze right after its last step, or not).
struct stepping_peer {
    tcp_listener      listener;
    endpoint          ep;
    std::thread       thread;
    std::atomic<bool> stop{false};
    std::atomic<int>  n_heartbeats{0};

    stepping_peer(const link_options & o, bool answer_heartbeats) {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
        thread = std::thread([this, o, answer_heartbeats] {
            auto s = listener.accept(3000ms);
            if (!s.is_ok()) return;
            tcp_socket sock = std::move(s).value();
            auto accepted = answer_hello(sock, o, [](const protocol::hello &) { return status::ok(); });
            if (!accepted.is_ok()) return;
            stage_link link(std::move(sock), o, "stage 0", std::move(accepted->macs));
            while (!stop.load()) {
                const int fd = link.fd();
                if (wait_readable(std::span<const int>(&fd, 1), clock::now() + 20ms) < 0) continue;
                uint64_t heartbeat_id = 0;
                auto frame = link.read_step_or_heartbeat(link.frame_deadline(), &heartbeat_id);
                if (!frame.is_ok()) break;
                protocol::reply ack;
                ack.kind = protocol::message_kind::ack;
                if (frame->has_value()) {
                    ack.request_id = (*frame)->step_id;
                } else {
                    ++n_heartbeats;
                    if (!answer_heartbeats) continue;
                    ack.request_id = heartbeat_id;
                }
                if (!link.send_reply(ack).is_ok()) break;
            }
        });
    }
    ~stepping_peer() {
        stop.store(true);
        listener.close();
        if (thread.joinable()) thread.join();
    }
};

struct failure_probe {
    std::mutex              m;
    std::condition_variable cv;
    std::optional<status>   failure;
    batch_link::failure_fn fn() {
        return [this](const status & why, const std::vector<int32_t> &) {
            std::lock_guard<std::mutex> lock(m);
            failure = why;
            cv.notify_all();
        };
    }
};

TEST(batch_link_liveness, AnIdleLinkWhosePeerStopsAnsweringHeartbeatsIsFailedBeforeTheNextStep) {
    link_options o = fast_liveness();
    o.liveness.heartbeat_interval = 100ms;
    stepping_peer peer(o, /*answer_heartbeats=*/false);
    failure_probe probe;
    batch_link link([&] { return connect_link(peer.ep, protocol::hello{.link = protocol::link_kind::batch}, o, "stage 1"); }, 4, 4,
                    probe.fn());
    ASSERT_TRUE(link.send(protocol::testing::sample_step(), nullptr).is_ok());  // dials; acked
    link.wait_idle(3);
    std::unique_lock<std::mutex> lock(probe.m);
    ASSERT_TRUE(probe.cv.wait_for(lock, 30s, [&] { return probe.failure.has_value(); })) << "an idle dead link went unnoticed";
    EXPECT_EQ(probe.failure->code(), error_code::timed_out) << probe.failure->to_string();
    EXPECT_NE(probe.failure->message().find("heartbeat"), std::string::npos) << probe.failure->to_string();
    EXPECT_EQ(link.n_heartbeat_failures(), 1);
    EXPECT_GE(link.n_heartbeats_sent(), 1);
    EXPECT_GE(peer.n_heartbeats.load(), 1) << "the heartbeat reached the peer";
}

TEST(batch_link_liveness, AnsweredHeartbeatsKeepAnIdleLinkUp) {
    link_options o = fast_liveness();
    o.liveness.heartbeat_interval = 50ms;
    stepping_peer peer(o, /*answer_heartbeats=*/true);
    failure_probe probe;
    batch_link link([&] { return connect_link(peer.ep, protocol::hello{.link = protocol::link_kind::batch}, o, "stage 1"); }, 4, 4,
                    probe.fn());
    protocol::step_frame step = protocol::testing::sample_step();
    ASSERT_TRUE(link.send(step, nullptr).is_ok());
    // Idle through several heartbeats, each answered (the answer timeout is 300 ms).
    const auto give_up = clock::now() + 30s;
    while (peer.n_heartbeats.load() < 5 && clock::now() < give_up) std::this_thread::sleep_for(10ms);
    ASSERT_GE(peer.n_heartbeats.load(), 5) << "an idle link sends heartbeats";
    {
        std::lock_guard<std::mutex> lock(probe.m);
        EXPECT_FALSE(probe.failure.has_value()) << probe.failure->to_string();
    }
    EXPECT_EQ(link.n_heartbeat_failures(), 0);
    step.step_id += 1;
    EXPECT_TRUE(link.send(step, nullptr).is_ok()) << "the same link still takes steps";
    link.wait_idle(3);
    std::lock_guard<std::mutex> lock(probe.m);
    EXPECT_FALSE(probe.failure.has_value());
}

TEST(downstream_liveness, ASynchronousRequestTimesOutAfterItsBudgetOverEveryHopBelow) {
    const link_options o = fast_liveness();
    silent_peer peer(o);
    downstream_link link([&] { return connect_link(peer.ep, protocol::hello{}, o, "stage 1"); }, 4, /*n_hops=*/2);
    protocol::reply reply;
    const auto t0 = clock::now();
    const status st = link.roundtrip(test_util::stop_request(7), reply, nullptr);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), error_code::timed_out) << st.to_string();
    EXPECT_NE(st.message().find("2 hops"), std::string::npos) << st.to_string();
    EXPECT_GE(clock::now() - t0, step_budget(o.liveness, 0, 2)) << "gave up before every hop had its time";
}

// A next stage as a lane's forward link sees it: acknowledges every request, a
// Heartbeat included.
struct acking_peer {
    tcp_listener      listener;
    endpoint          ep;
    std::thread       thread;
    std::atomic<bool> stop{false};
    std::atomic<int>  n_heartbeats{0};

    explicit acking_peer(const link_options & o) {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
        thread = std::thread([this, o] {
            auto s = listener.accept(3000ms);
            if (!s.is_ok()) return;
            tcp_socket sock = std::move(s).value();
            auto accepted = answer_hello(sock, o, [](const protocol::hello &) { return status::ok(); });
            if (!accepted.is_ok()) return;
            stage_link link(std::move(sock), o, "stage 0", std::move(accepted->macs));
            while (!stop.load()) {
                const int fd = link.fd();
                if (wait_readable(std::span<const int>(&fd, 1), clock::now() + 20ms) < 0) continue;
                auto req = link.read_request(link.frame_deadline());
                if (!req.is_ok()) break;
                if (req->kind == protocol::message_kind::heartbeat) ++n_heartbeats;
                protocol::reply ack;
                ack.kind = protocol::message_kind::ack;
                ack.request_id = req->request_id;
                if (!link.send_reply(ack).is_ok()) break;
            }
        });
    }
    ~acking_peer() {
        stop.store(true);
        listener.close();
        if (thread.joinable()) thread.join();
    }
};

TEST(downstream_liveness, AnIdleLinkHeartbeatsAndTheAckIsNeverTakenForAReply) {
    link_options o = fast_liveness();
    o.liveness.heartbeat_interval = 50ms;
    acking_peer peer(o);
    downstream_link link([&] { return connect_link(peer.ep, protocol::hello{}, o, "stage 1"); }, 4);
    ASSERT_TRUE(link.ensure_connected().is_ok());
    bool sent = false;
    EXPECT_TRUE(link.check_heartbeat(clock::now(), true, &sent).is_ok());
    EXPECT_FALSE(sent) << "not quiet for the interval yet";
    std::this_thread::sleep_for(60ms);
    EXPECT_TRUE(link.check_heartbeat(clock::now(), /*may_send=*/false, &sent).is_ok());
    EXPECT_FALSE(sent) << "the owner is about to use the link";
    ASSERT_TRUE(link.check_heartbeat(clock::now(), true, &sent).is_ok());
    ASSERT_TRUE(sent);
    // The request goes out with the Heartbeat unanswered: its Ack comes first.
    protocol::reply reply;
    const status st = link.roundtrip(test_util::stop_request(7), reply, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(reply.request_id, 7u);
    // Idle again: heartbeats go out, are answered (read_one takes the Ack), never fail.
    const auto until = clock::now() + 3 * o.liveness.step_base;
    while (clock::now() < until) {
        const int fd = link.fd();
        if (wait_readable(std::span<const int>(&fd, 1), clock::now() + 10ms) >= 0) {
            ASSERT_TRUE(link.read_one(0, nullptr).is_ok());
        }
        const status hb = link.check_heartbeat(clock::now(), true);
        ASSERT_TRUE(hb.is_ok()) << hb.to_string();
    }
    EXPECT_GE(peer.n_heartbeats.load(), 3);
    link.close();
}

TEST(downstream_liveness, AHeartbeatUnansweredForStepBaseIsTimedOut) {
    link_options o = fast_liveness();
    o.liveness.heartbeat_interval = 50ms;
    silent_peer peer(o);
    downstream_link link([&] { return connect_link(peer.ep, protocol::hello{}, o, "stage 1"); }, 4);
    ASSERT_TRUE(link.ensure_connected().is_ok());
    std::this_thread::sleep_for(60ms);
    bool sent = false;
    // The link dates the heartbeat with the time it is given, so the deadline counts from it
    // (a clock read after the send would start up to a scheduling delay later).
    const auto sent_at = clock::now();
    ASSERT_TRUE(link.check_heartbeat(sent_at, true, &sent).is_ok());
    ASSERT_TRUE(sent);
    status st;
    while (st.is_ok() && clock::now() < sent_at + 30s) {
        std::this_thread::sleep_for(10ms);
        st = link.check_heartbeat(clock::now(), /*may_send=*/false);  // an overdue one is found even so
    }
    EXPECT_EQ(st.code(), error_code::timed_out) << st.to_string();
    EXPECT_NE(st.message().find("did not answer a heartbeat within 300 ms"), std::string::npos) << st.to_string();
    EXPECT_GE(clock::now() - sent_at, o.liveness.step_base) << "failed before its deadline";
    link.close();
}

// A next stage that answers every request with an Error: a timeout of the stage below
// it, as a middle stage reports one.
struct reporting_peer {
    tcp_listener listener;
    endpoint     ep;
    std::thread  thread;

    explicit reporting_peer(const link_options & o) {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
        thread = std::thread([this, o] {
            auto s = listener.accept(3000ms);
            if (!s.is_ok()) return;
            tcp_socket sock = std::move(s).value();
            auto accepted = answer_hello(sock, o, [](const protocol::hello &) { return status::ok(); });
            if (!accepted.is_ok()) return;
            stage_link link(std::move(sock), o, "stage 0", std::move(accepted->macs));
            auto req = link.read_request(clock::now() + 10s);
            if (!req.is_ok()) return;
            const status below = make_error(error_code::timed_out, "stage 1: stage 2 (127.0.0.1:7102) did not answer stop");
            (void)link.send_reply(protocol::make_error_reply(req->request_id, below, o.limits));
            (void)link.read_request(clock::now() + 10s);  // until the dialer closes
        });
    }
    ~reporting_peer() {
        listener.close();
        if (thread.joinable()) thread.join();
    }
};

TEST(downstream_liveness, ATimeoutAStageBelowReportedKeepsItsReason) {
    const link_options o = fast_liveness();
    reporting_peer peer(o);
    downstream_link link([&] { return connect_link(peer.ep, protocol::hello{}, o, "stage 1"); }, 4, /*n_hops=*/2);
    protocol::reply reply;
    const status st = link.roundtrip(test_util::stop_request(7), reply, nullptr);
    EXPECT_EQ(st.code(), error_code::timed_out) << st.to_string();
    // Not rewritten as our own deadline ("stage 1 did not answer stop within ..."): the
    // stuck stage is the one the report names.
    EXPECT_NE(st.message().find("stage 2 (127.0.0.1:7102)"), std::string::npos) << st.to_string();
    EXPECT_EQ(st.message().find("within its deadline"), std::string::npos) << st.to_string();
    link.close();
}

}  // namespace
}  // namespace skippy::transport
