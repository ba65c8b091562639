// Lanes and the bounded wait queue: behaviour with tiny timeouts, never speed.
#include "http/lane_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

namespace skippy::http {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until `pred` holds; returns whether it did.
template <typename F>
bool eventually(F pred) {
    for (int i = 0; i < 5000; ++i) {
        if (pred()) return true;
        std::this_thread::sleep_for(1ms);
    }
    return pred();
}

TEST(LanePool, FreeLanesAreTakenAtOnceLowestFirst) {
    lane_pool pool(3, 0);
    auto a = pool.acquire(0s);
    auto b = pool.acquire(0s);
    ASSERT_EQ(a.outcome, acquire_outcome::acquired);
    ASSERT_EQ(b.outcome, acquire_outcome::acquired);
    EXPECT_EQ(a.lease.lane(), 0);
    EXPECT_EQ(b.lease.lane(), 1);
    EXPECT_EQ(pool.n_busy(), 2);
    a.lease.release();
    EXPECT_EQ(pool.n_busy(), 1);
    auto c = pool.acquire(0s);
    EXPECT_EQ(c.lease.lane(), 0);
}

TEST(LanePool, LeasesReturnTheirLaneWhenDestroyedOrMoved) {
    lane_pool pool(1, 0);
    {
        auto a = pool.acquire(0s);
        ASSERT_TRUE(a.lease.valid());
        lane_lease moved = std::move(a.lease);
        EXPECT_FALSE(a.lease.valid());
        EXPECT_EQ(pool.n_busy(), 1);
    }
    EXPECT_EQ(pool.n_busy(), 0);
}

TEST(LanePool, PeaksKeepTheMostBusyAndWaitingAtOnce) {
    lane_pool pool(2, 2);
    EXPECT_EQ(pool.peak_busy(), 0);
    EXPECT_EQ(pool.peak_waiting(), 0);
    auto a = pool.acquire(0s);
    auto b = pool.acquire(0s);
    EXPECT_EQ(pool.peak_busy(), 2);
    auto w = std::async(std::launch::async, [&] { return pool.acquire(10s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    EXPECT_EQ(pool.peak_waiting(), 1);
    a.lease.release();
    auto got = w.get();
    ASSERT_EQ(got.outcome, acquire_outcome::acquired);
    got.lease.release();
    b.lease.release();
    // The gauges went down; the peaks stay.
    EXPECT_EQ(pool.n_busy(), 0);
    EXPECT_EQ(pool.n_waiting(), 0);
    EXPECT_EQ(pool.peak_busy(), 2);
    EXPECT_EQ(pool.peak_waiting(), 1);
}

TEST(LanePool, AFullQueueRefusesAtOnce) {
    lane_pool pool(1, 0);  // no waiting at all
    auto held = pool.acquire(0s);
    auto refused = pool.acquire(10s);  // would wait 10 s if it were queued
    EXPECT_EQ(refused.outcome, acquire_outcome::queue_full);
    EXPECT_FALSE(refused.lease.valid());
    EXPECT_LT(refused.waited_s, 5.0);
}

TEST(LanePool, AWaiterGivesUpAfterItsTimeout) {
    lane_pool pool(1, 1);
    auto held = pool.acquire(0s);
    auto r = pool.acquire(20ms);
    EXPECT_EQ(r.outcome, acquire_outcome::timed_out);
    EXPECT_GE(r.waited_s, 0.02);
    EXPECT_EQ(pool.n_waiting(), 0);
}

TEST(LanePool, AWaiterGetsTheLaneWhenItIsReleased) {
    lane_pool pool(1, 1);
    auto held = pool.acquire(0s);
    auto waiter = std::async(std::launch::async, [&] { return pool.acquire(60s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    held.lease.release();
    auto r = waiter.get();
    EXPECT_EQ(r.outcome, acquire_outcome::acquired);
    EXPECT_EQ(r.lease.lane(), 0);
}

TEST(LanePool, TheQueueHoldsAtMostItsCapacity) {
    lane_pool pool(1, 2);
    auto held = pool.acquire(0s);
    auto w1 = std::async(std::launch::async, [&] { return pool.acquire(60s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));  // w1 is first in line
    auto w2 = std::async(std::launch::async, [&] { return pool.acquire(60s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 2; }));
    EXPECT_EQ(pool.acquire(60s).outcome, acquire_outcome::queue_full);
    held.lease.release();
    auto r1 = w1.get();
    ASSERT_EQ(r1.outcome, acquire_outcome::acquired);
    r1.lease.release();
    EXPECT_EQ(w2.get().outcome, acquire_outcome::acquired);
}

TEST(LanePool, WaitersAreServedInArrivalOrder) {
    lane_pool pool(1, 8);
    auto held = pool.acquire(0s);
    std::vector<int> order;
    std::mutex order_mutex;
    std::vector<std::future<void>> waiters;
    for (int i = 0; i < 4; ++i) {
        waiters.push_back(std::async(std::launch::async, [&, i] {
            auto r = pool.acquire(60s);
            ASSERT_EQ(r.outcome, acquire_outcome::acquired);
            std::lock_guard<std::mutex> lock(order_mutex);
            order.push_back(i);
        }));  // the lease is released when the task returns
        ASSERT_TRUE(eventually([&] { return pool.n_waiting() == i + 1; }));
    }
    held.lease.release();
    for (auto & w : waiters) w.get();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(LanePool, ANewArrivalDoesNotJumpTheQueue) {
    lane_pool pool(1, 4);
    auto held = pool.acquire(0s);
    std::atomic<bool> release_waiter{false};
    auto waiter = std::async(std::launch::async, [&] {
        auto r = pool.acquire(60s);
        while (!release_waiter) std::this_thread::sleep_for(1ms);
        return r.outcome;
    });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    held.lease.release();
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 0; }));
    // The waiter holds the only lane now: a newcomer with no patience is refused.
    EXPECT_EQ(pool.n_busy(), 1);
    EXPECT_EQ(pool.acquire(0s).outcome, acquire_outcome::timed_out);
    release_waiter = true;
    EXPECT_EQ(waiter.get(), acquire_outcome::acquired);
}

TEST(LanePool, ACancelledWaiterLeavesTheQueue) {
    lane_pool pool(1, 1);
    auto held = pool.acquire(0s);
    std::atomic<bool> gone{false};
    auto waiter = std::async(std::launch::async, [&] { return pool.acquire(60s, [&] { return gone.load(); }, 1ms); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    gone = true;
    EXPECT_EQ(waiter.get().outcome, acquire_outcome::cancelled);
    EXPECT_EQ(pool.n_waiting(), 0);
    // Its place is free again.
    auto next = std::async(std::launch::async, [&] { return pool.acquire(60s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    held.lease.release();
    EXPECT_EQ(next.get().outcome, acquire_outcome::acquired);
}

TEST(LanePool, ShutdownWakesWaitersAndRefusesNewcomers) {
    lane_pool pool(1, 2);
    auto held = pool.acquire(0s);
    auto waiter = std::async(std::launch::async, [&] { return pool.acquire(60s); });
    ASSERT_TRUE(eventually([&] { return pool.n_waiting() == 1; }));
    pool.shutdown();
    EXPECT_EQ(waiter.get().outcome, acquire_outcome::shutting_down);
    EXPECT_EQ(pool.acquire(60s).outcome, acquire_outcome::shutting_down);
}

TEST(LanePool, ManyThreadsNeverShareALane) {
    lane_pool pool(3, 64);
    std::vector<std::atomic<int>> users(3);
    std::atomic<int> violations{0}, served{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 12; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 50; ++i) {
                auto r = pool.acquire(60s);
                if (r.outcome != acquire_outcome::acquired) continue;
                if (users[static_cast<size_t>(r.lease.lane())].fetch_add(1) != 0) violations++;
                std::this_thread::yield();
                users[static_cast<size_t>(r.lease.lane())].fetch_sub(1);
                served++;
            }
        });
    }
    for (auto & th : threads) th.join();
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(served.load(), 600);
    EXPECT_EQ(pool.n_busy(), 0);
    EXPECT_EQ(pool.n_waiting(), 0);
}

}  // namespace
}  // namespace skippy::http
