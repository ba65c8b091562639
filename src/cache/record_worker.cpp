#include "cache/record_worker.h"

#include <pthread.h>
#include <sched.h>

namespace skippy::cache {

record_worker::record_worker()
    : thread_([this] {
          // Records are background work: they run only on cores no request needs
          // (SCHED_IDLE), so hashing and copying pages never delays a token. Under
          // constant load a record waits, and newer ones supersede it.
          sched_param param {};
          (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
          run();
      }) {}

record_worker::~record_worker() {
    std::function<void()> dropped;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        dropped = std::move(job_);  // destroyed outside the lock
        job_ = nullptr;
    }
    wake_.notify_all();
    thread_.join();
}

bool record_worker::submit(std::function<void()> job) {
    std::function<void()> dropped;  // destroyed outside the lock, with its captures
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) {
            ++stats_.n_refused;
            dropped = std::move(job);
        } else {
            if (job_) ++stats_.n_superseded;
            dropped = std::move(job_);
            job_ = std::move(job);
            wake_.notify_one();
            return true;
        }
    }
    return false;
}

bool record_worker::busy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return running_ || job_ != nullptr;
}

void record_worker::wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return !running_ && !job_; });
}

record_worker_stats record_worker::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void record_worker::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        wake_.wait(lock, [this] { return stop_ || job_ != nullptr; });
        if (stop_) break;
        std::function<void()> job = std::move(job_);
        job_ = nullptr;
        running_ = true;
        lock.unlock();
        job();
        job = nullptr;  // captures released before the slot frees
        lock.lock();
        running_ = false;
        ++stats_.n_run;
        idle_.notify_all();
    }
    idle_.notify_all();
}

}  // namespace skippy::cache
