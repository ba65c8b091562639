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

}  // namespace
}  // namespace skippy::transport
