// thread_pool: every task runs exactly once per call, the pool is reusable, and task
// writes are visible to the caller (TSan checks the last part).
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace skippy::kernels {
namespace {

TEST(kernels_thread_pool, EveryTaskRunsExactlyOnce) {
    for (int n_threads : {1, 2, 3, 8}) {
        thread_pool pool(n_threads);
        EXPECT_EQ(pool.n_threads(), n_threads);
        for (int64_t n_tasks : {0, 1, 2, 3, 7, 100, 1000}) {
            std::vector<std::atomic<int>> runs(static_cast<size_t>(n_tasks));
            pool.parallel_for(n_tasks, [&](int64_t task) { runs[task].fetch_add(1); });
            for (int64_t i = 0; i < n_tasks; ++i) {
                ASSERT_EQ(runs[i].load(), 1) << "threads " << n_threads << " tasks " << n_tasks << " task " << i;
            }
        }
    }
}

TEST(kernels_thread_pool, ZeroTasksNeverCallsTheFunction) {
    thread_pool pool(3);
    bool called = false;
    pool.parallel_for(0, [&](int64_t) { called = true; });
    pool.parallel_for(-5, [&](int64_t) { called = true; });
    EXPECT_FALSE(called);
}

TEST(kernels_thread_pool, OneTaskRunsOnTheCallingThread) {
    thread_pool pool(4);
    std::thread::id ran_on;
    pool.parallel_for(1, [&](int64_t task) {
        EXPECT_EQ(task, 0);
        ran_on = std::this_thread::get_id();
    });
    EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(kernels_thread_pool, ReusedForManyJobsWithPlainWritesVisibleAfterReturn) {
    thread_pool pool(3);
    std::vector<int64_t> out(257);  // plain ints: the pool must publish them
    for (int job = 0; job < 2000; ++job) {
        pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t task) { out[task] = task * job; });
        int64_t bad = 0;
        for (size_t i = 0; i < out.size(); ++i) bad += out[i] != static_cast<int64_t>(i) * job;
        ASSERT_EQ(bad, 0) << "job " << job;
    }
}

// Back-to-back jobs whose sizes go up and down: a worker that finished a small job must
// never run the next, larger job's function for a task index the small job lacked, and
// parallel_for must return only when every task of its own job is done.
TEST(kernels_thread_pool, JobsOfChangingSizesRunEachTaskOnceBeforeReturning) {
    thread_pool pool(3);
    std::vector<int> done(64);  // plain ints: written by tasks, read after return
    for (int job = 0; job < 20000; ++job) {
        const int64_t n = job % 3 == 0 ? 2 : (job % 3 == 1 ? 64 : 5);
        std::fill(done.begin(), done.end(), 0);
        pool.parallel_for(n, [&](int64_t task) {
            volatile int spin = 0;
            for (int i = 0; i < (task % 7) * 20; ++i) spin = spin + 1;
            done[static_cast<size_t>(task)] += 1;
        });
        for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(done[static_cast<size_t>(i)], i < n ? 1 : 0) << "job " << job << " task " << i;
    }
}

TEST(kernels_thread_pool, WorkersShareTheTasks) {
    thread_pool pool(3);
    std::mutex mutex;
    std::set<std::thread::id> threads;
    // Tasks that wait for each other force at least two threads to take part.
    std::atomic<int> started{0};
    pool.parallel_for(3, [&](int64_t) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            threads.insert(std::this_thread::get_id());
        }
        started.fetch_add(1);
        for (int spin = 0; spin < 1000000 && started.load() < 2; ++spin) std::this_thread::yield();
    });
    EXPECT_GE(threads.size(), 2u);
}

TEST(kernels_thread_pool, NestedCallRunsInlineWithoutDeadlock) {
    thread_pool pool(2);
    std::vector<std::atomic<int>> inner(4 * 5);
    pool.parallel_for(4, [&](int64_t outer) {
        pool.parallel_for(5, [&](int64_t i) { inner[outer * 5 + i].fetch_add(1); });
    });
    for (auto & v : inner) EXPECT_EQ(v.load(), 1);
}

TEST(kernels_thread_pool, ConcurrentCallersEachGetAllTheirTasks) {
    thread_pool pool(3);
    std::vector<std::thread> callers;
    std::vector<int64_t> sums(4, 0);
    for (int c = 0; c < 4; ++c) {
        callers.emplace_back([&, c] {
            for (int job = 0; job < 200; ++job) {
                std::atomic<int64_t> sum{0};
                pool.parallel_for(50, [&](int64_t task) { sum.fetch_add(task + 1); });
                sums[c] += sum.load();
            }
        });
    }
    for (auto & t : callers) t.join();
    for (int64_t s : sums) EXPECT_EQ(s, 200 * (50 * 51 / 2));
}

TEST(kernels_thread_pool, DestroyedWithoutUseOrRightAfterAJob) {
    { thread_pool idle(4); }
    {
        thread_pool pool(4);
        std::atomic<int> n{0};
        pool.parallel_for(10, [&](int64_t) { n.fetch_add(1); });
        EXPECT_EQ(n.load(), 10);
    }
}

}  // namespace
}  // namespace skippy::kernels
