// One background thread for exact-state records, with a queue of one
// (DESIGN §6: records are skipped, not waited for, when the worker is busy).
//
// try_submit hands a job over only when no job is pending or running; otherwise the
// job is dropped at once (destroyed on the caller's thread) and counted. A request
// therefore never waits for a record.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace skippy::cache {

struct record_worker_stats {
    int64_t n_run = 0;      // jobs completed
    int64_t n_skipped = 0;  // jobs dropped because the worker was busy
};

class record_worker {
public:
    record_worker();
    // Waits for a running job to finish, drops a pending one, joins the thread.
    ~record_worker();
    record_worker(const record_worker &) = delete;
    record_worker & operator=(const record_worker &) = delete;

    // true: the job will run on the worker. false: busy, the job was dropped.
    bool try_submit(std::function<void()> job);

    bool busy() const;
    // Blocks until no job is pending or running (tests, orderly shutdown).
    void wait_idle();
    record_worker_stats stats() const;

private:
    void run();

    mutable std::mutex      mutex_;
    std::condition_variable wake_;   // a job arrived or stop
    std::condition_variable idle_;   // the slot became free
    std::function<void()>   job_;    // pending job
    bool                    running_ = false;
    bool                    stop_ = false;
    record_worker_stats     stats_;
    std::thread             thread_;  // last: starts after the members above exist
};

}  // namespace skippy::cache
