// Record worker: a queue of one; busy means skipped, never waited for.
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
    ASSERT_TRUE(w.try_submit([&] { ++ran; }));
    w.wait_idle();
    EXPECT_EQ(ran.load(), 1);
    EXPECT_EQ(w.stats().n_run, 1);
    EXPECT_FALSE(w.busy());
}

TEST(record_worker, SkipsWhileAJobRuns) {
    record_worker w;
    std::promise<void> started, release;
    std::shared_future<void> release_f = release.get_future().share();
    ASSERT_TRUE(w.try_submit([&, release_f] {
        started.set_value();
        release_f.wait();
    }));
    started.get_future().wait();  // the first job is running now
    EXPECT_TRUE(w.busy());
    auto capture = std::make_shared<int>(1);
    std::weak_ptr<int> watch = capture;
    EXPECT_FALSE(w.try_submit([capture] {}));  // skipped at once
    capture.reset();
    EXPECT_TRUE(watch.expired());  // the dropped job's captures are gone already
    EXPECT_EQ(w.stats().n_skipped, 1);
    release.set_value();
    w.wait_idle();
    EXPECT_TRUE(w.try_submit([] {}));
    w.wait_idle();
    EXPECT_EQ(w.stats().n_run, 2);
}

TEST(record_worker, DestructorLetsARunningJobFinish) {
    std::atomic<bool> finished{false};
    std::promise<void> started;
    {
        record_worker w;
        ASSERT_TRUE(w.try_submit([&] {
            started.set_value();
            finished = true;
        }));
        started.get_future().wait();
    }
    EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace skippy::cache
