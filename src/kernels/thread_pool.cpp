// thread_pool: persistent workers that claim tasks from a shared word.
//
// Decode issues about a hundred short jobs per token, so the cost of one
// parallel_for must be a few atomic operations, not a mutex round trip and a
// condition-variable wake-up. The protocol:
//
// - One job at a time (call_mutex). The caller writes the job (fn, n_tasks) and then
//   publishes it by storing claim = (generation << 32) | 0.
// - Anyone (caller or worker) takes task i by a compare-and-swap of claim from
//   (g, i) to (g, i + 1), with i < n_tasks of job g. Because the generation is part of
//   the word, a worker that read job g late can never take a task of job g + 1 by
//   mistake: its swap fails and it re-reads.
// - n_tasks is read from job_size = (generation << 32) | n_tasks and used only when its
//   generation is g: the caller writes the next job's size before it republishes claim,
//   so a worker can see claim = (g, n_g) (exhausted) next to the size of job g + 1; an
//   untagged size would let it "claim" the nonexistent task n_g of job g.
// - A successful swap on (g, i) with i < n_g proves that job g was still open when the
//   worker read fn (the job cannot finish before its task i has run, and the caller
//   writes the next job only after that), so fn belongs to job g.
// - Each finished task increments n_done; the caller returns when n_done == n_tasks.
//   It waits for tasks, not for workers: a worker that is asleep or late costs
//   nothing, so a small job never has to wake every thread.
// - Idle workers spin on claim for a while (jobs come back to back during decode),
//   then sleep on a condition variable. The caller wakes at most n_tasks - 1 sleepers.
//   Lost wake-ups are excluded by a Dekker pair of sequentially consistent
//   operations: the worker counts itself in n_sleeping before checking claim, the
//   caller stores claim before reading n_sleeping, and the notification is sent
//   holding the mutex the sleeper checks under.
#include "kernels/kernels.h"

#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::kernels {
namespace {

// How long an idle worker keeps polling before it sleeps: long enough to bridge the
// gaps between the jobs of one decode step, short enough not to burn a core while a
// server waits for requests.
constexpr auto k_spin_duration = std::chrono::microseconds(300);

// Jobs larger than this are run as several jobs, so a task index always fits in the
// low half of the claim word with room to spare.
constexpr int64_t k_max_job_tasks = int64_t(1) << 30;

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

inline uint32_t generation_of(uint64_t claim) { return static_cast<uint32_t>(claim >> 32); }
inline uint32_t index_of(uint64_t claim) { return static_cast<uint32_t>(claim); }

}  // namespace

struct thread_pool::impl {
    std::mutex call_mutex;  // serializes parallel_for calls from different threads

    // The current job, written by the caller before claim publishes it.
    std::atomic<const std::function<void(int64_t)> *> fn{nullptr};
    std::atomic<uint64_t> job_size{0};  // (generation << 32) | n_tasks
    std::atomic<int64_t>  task_offset{0};
    // (generation << 32) | next task index.
    std::atomic<uint64_t> claim{0};
    // Tasks of the current job that have finished.
    std::atomic<int64_t> n_done{0};

    std::mutex              sleep_mutex;
    std::condition_variable sleep_cv;
    std::atomic<int>        n_sleeping{0};
    std::atomic<bool>       stop{false};

    std::vector<std::thread> workers;

    // Runs tasks of job `generation` until none is left to claim.
    void run_tasks(uint32_t generation) {
        const bool was_in_task = t_in_task;
        t_in_task = true;
        uint64_t c = claim.load(std::memory_order_acquire);
        for (;;) {
            if (generation_of(c) != generation) break;
            const uint64_t size = job_size.load(std::memory_order_relaxed);
            if (generation_of(size) != generation) break;  // the next job is being written: this one is over
            if (index_of(c) >= index_of(size)) break;
            const std::function<void(int64_t)> * f = fn.load(std::memory_order_relaxed);
            const int64_t offset = task_offset.load(std::memory_order_relaxed);
            if (!claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
            (*f)(offset + static_cast<int64_t>(index_of(c)));
            n_done.fetch_add(1, std::memory_order_release);
            c = claim.load(std::memory_order_acquire);
        }
        t_in_task = was_in_task;
    }

    // Waits until claim carries a generation other than `seen`; false when stopping.
    bool wait_for_job(uint32_t seen, uint32_t & generation) {
        const auto spin_until = std::chrono::steady_clock::now() + k_spin_duration;
        for (int i = 0;; ++i) {
            if (stop.load(std::memory_order_acquire)) return false;
            const uint32_t g = generation_of(claim.load(std::memory_order_acquire));
            if (g != seen) {
                generation = g;
                return true;
            }
            cpu_relax();
            if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
        }
        std::unique_lock<std::mutex> lock(sleep_mutex);
        n_sleeping.fetch_add(1, std::memory_order_seq_cst);
        sleep_cv.wait(lock, [&] {
            return stop.load(std::memory_order_seq_cst) || generation_of(claim.load(std::memory_order_seq_cst)) != seen;
        });
        n_sleeping.fetch_sub(1, std::memory_order_relaxed);
        if (stop.load(std::memory_order_acquire)) return false;
        generation = generation_of(claim.load(std::memory_order_acquire));
        return true;
    }

    void worker_main() {
        // Generation 0 is the constructor's "no job yet"; a worker that starts after the
        // first job was published must still join it.
        uint32_t seen = 0;
        uint32_t generation = 0;
        while (wait_for_job(seen, generation)) {
            run_tasks(generation);
            seen = generation;
        }
    }

    // One job of n tasks, fn(offset + i) for i < n. REQUIRES: 1 <= n <= k_max_job_tasks.
    void run_job(const std::function<void(int64_t)> & f, int64_t offset, int64_t n) {
        const uint32_t generation = generation_of(claim.load(std::memory_order_relaxed)) + 1;
        fn.store(&f, std::memory_order_relaxed);
        job_size.store(static_cast<uint64_t>(generation) << 32 | static_cast<uint64_t>(n), std::memory_order_relaxed);
        task_offset.store(offset, std::memory_order_relaxed);
        n_done.store(0, std::memory_order_relaxed);
        claim.store(static_cast<uint64_t>(generation) << 32, std::memory_order_seq_cst);
        const int sleeping = n_sleeping.load(std::memory_order_seq_cst);
        if (sleeping > 0) {
            // Taking the mutex orders this notification after any sleeper's check.
            { std::lock_guard<std::mutex> lock(sleep_mutex); }
            const int64_t wanted = std::min<int64_t>(n - 1, sleeping);
            if (wanted >= sleeping) {
                sleep_cv.notify_all();
            } else {
                for (int64_t i = 0; i < wanted; ++i) sleep_cv.notify_one();
            }
        }
        run_tasks(generation);
        for (int i = 0; n_done.load(std::memory_order_acquire) < n; ++i) {
            if (i < 1 << 16) {
                cpu_relax();
            } else {
                std::this_thread::yield();  // a worker was descheduled mid-task
            }
        }
        fn.store(nullptr, std::memory_order_relaxed);
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
        std::lock_guard<std::mutex> lock(impl_->sleep_mutex);
        impl_->stop.store(true, std::memory_order_seq_cst);
    }
    impl_->sleep_cv.notify_all();
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
    for (int64_t offset = 0; offset < n_tasks; offset += k_max_job_tasks) {
        p.run_job(fn, offset, std::min(k_max_job_tasks, n_tasks - offset));
    }
}

}  // namespace skippy::kernels
