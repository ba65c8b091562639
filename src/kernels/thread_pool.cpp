// thread_pool: persistent workers that take tasks from a shared counter.
//
// One job at a time: parallel_for publishes (fn, n_tasks) under the mutex and bumps
// the generation; every worker joins that generation, claims task indices from an
// atomic counter until they run out, then checks out. The caller claims tasks too and
// returns only when every worker has checked out, so fn (which lives on the caller's
// stack) is never touched after parallel_for returns, and all task writes are visible
// to the caller through the mutex.
//
// Decode issues many short jobs back to back, so an idle worker spins on the
// generation for a short while before sleeping on the condition variable.
#include "kernels/kernels.h"

#include <atomic>
#include <cassert>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::kernels {
namespace {

// About 0.1-0.5 ms of pause instructions, depending on the CPU.
constexpr int k_spin_iterations = 4096;

// True while this thread runs a task of some pool: a nested parallel_for then runs
// inline instead of waiting for workers that may all be busy with the outer job.
thread_local bool t_in_task = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

struct thread_pool::impl {
    std::mutex call_mutex;  // serializes parallel_for calls from different threads

    std::mutex              mutex;
    std::condition_variable work_cv;
    std::condition_variable done_cv;
    // Guarded by mutex.
    const std::function<void(int64_t)> * fn = nullptr;
    int64_t n_tasks = 0;
    size_t  n_busy = 0;  // workers not yet checked out of the current generation
    bool    stop = false;
    // Written under mutex; also polled without it by spinning workers.
    std::atomic<uint64_t> generation{0};
    std::atomic<bool>     stopping{false};
    // Next task index to claim in the current job.
    std::atomic<int64_t> next_task{0};

    std::vector<std::thread> workers;

    void run_tasks(const std::function<void(int64_t)> & f, int64_t n) {
        const bool was_in_task = t_in_task;
        t_in_task = true;
        for (;;) {
            const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
            if (task >= n) break;
            f(task);
        }
        t_in_task = was_in_task;
    }

    void worker_main() {
        uint64_t seen = 0;
        for (;;) {
            for (int i = 0; i < k_spin_iterations; ++i) {
                if (generation.load(std::memory_order_acquire) != seen || stopping.load(std::memory_order_acquire)) break;
                cpu_relax();
            }
            const std::function<void(int64_t)> * job = nullptr;
            int64_t job_tasks = 0;
            {
                std::unique_lock<std::mutex> lock(mutex);
                work_cv.wait(lock, [&] { return stop || generation.load(std::memory_order_relaxed) != seen; });
                if (stop) return;
                seen = generation.load(std::memory_order_relaxed);
                job = fn;
                job_tasks = n_tasks;
            }
            run_tasks(*job, job_tasks);
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (--n_busy == 0) done_cv.notify_one();
            }
        }
    }
};

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads), impl_(std::make_unique<impl>()) {
    assert(n_threads >= 1);
    impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) {
        impl_->workers.emplace_back([p = impl_.get()] { p->worker_main(); });
    }
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        impl_->stop = true;
        impl_->stopping.store(true, std::memory_order_release);
    }
    impl_->work_cv.notify_all();
    for (auto & t : impl_->workers) t.join();
}

void thread_pool::parallel_for(int64_t n_tasks, const std::function<void(int64_t task)> & fn) {
    if (n_tasks <= 0) return;
    impl & p = *impl_;
    if (n_tasks == 1 || p.workers.empty() || t_in_task) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
        return;
    }
    std::lock_guard<std::mutex> call_lock(p.call_mutex);
    {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.fn = &fn;
        p.n_tasks = n_tasks;
        p.n_busy = p.workers.size();
        p.next_task.store(0, std::memory_order_relaxed);
        p.generation.fetch_add(1, std::memory_order_release);
    }
    p.work_cv.notify_all();
    p.run_tasks(fn, n_tasks);
    std::unique_lock<std::mutex> lock(p.mutex);
    p.done_cv.wait(lock, [&] { return p.n_busy == 0; });
    p.fn = nullptr;
}

}  // namespace skippy::kernels
