// Record worker: one running job and one pending slot, where the newest job supersedes;
// never waited for.
// Synchronization is by promises the test controls, never by sleeping.
#include "cache/record_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>

namespace skippy::cache {
namespace {

TEST(record_worker, RunsASubmittedJob) {
    record_worker w;
    std::atomic<int> ran{0};
    ASSERT_TRUE(w.submit([&] { ++ran; }));
    w.wait_idle();
    EXPECT_EQ(ran.load(), 1);
    EXPECT_EQ(w.stats().n_run, 1);
    EXPECT_FALSE(w.busy());
}

TEST(record_worker, WhileAJobRunsTheNewestSubmittedJobWaitsAndSupersedesOlderOnes) {
    record_worker w;
    std::promise<void> started, release;
    std::shared_future<void> release_f = release.get_future().share();
    std::atomic<int> ran_second{0}, ran_third{0};
    ASSERT_TRUE(w.submit([&, release_f] {
        started.set_value();
        release_f.wait();
    }));
    started.get_future().wait();  // the first job is running now
    EXPECT_TRUE(w.busy());
    auto capture = std::make_shared<int>(1);
    std::weak_ptr<int> watch = capture;
    EXPECT_TRUE(w.submit([capture, &ran_second] { ++ran_second; }));  // pending, returns at once
    capture.reset();
    EXPECT_FALSE(watch.expired()) << "the pending job keeps its captures";
    EXPECT_TRUE(w.submit([&] { ++ran_third; }));  // supersedes the pending one
    EXPECT_TRUE(watch.expired()) << "the superseded job's captures are gone already";
    EXPECT_EQ(w.stats().n_superseded, 1);
    release.set_value();
    w.wait_idle();
    EXPECT_EQ(ran_second.load(), 0);
    EXPECT_EQ(ran_third.load(), 1);
    EXPECT_EQ(w.stats().n_run, 2);
    EXPECT_FALSE(w.busy());
}

TEST(record_worker, DestructorLetsARunningJobFinish) {
    std::atomic<bool> finished{false};
    std::promise<void> started;
    {
        record_worker w;
        ASSERT_TRUE(w.submit([&] {
            started.set_value();
            finished = true;
        }));
        started.get_future().wait();
    }
    EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace skippy::cache
