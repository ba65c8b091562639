// One background thread for exact-state records, with a running job and one pending
// slot (DESIGN §6: records are never waited for).
//
// submit hands a job over at once: it runs next, or, while a job runs, waits in the
// pending slot. A job submitted while another is pending supersedes it: the older
// one is dropped (destroyed on the caller's thread, counted). The newest record is
// the one a conversation's next turn needs (the record at Stop extends the one after
// the prompt), and the memory a record holds is bounded by two jobs. (stage_cache keeps
// its own bounded queue of records; each job it submits drains that queue.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace skippy::cache {

struct record_worker_stats {
    int64_t n_run = 0;          // jobs completed
    int64_t n_superseded = 0;   // pending jobs dropped for a newer one
    int64_t n_refused = 0;      // jobs submitted while the worker stops
};

class record_worker {
public:
    record_worker();
    // Waits for a running job to finish, drops a pending one, joins the thread.
    ~record_worker();
    record_worker(const record_worker &) = delete;
    record_worker & operator=(const record_worker &) = delete;

    // true: the job will run, unless a newer one supersedes it while it waits.
    // false only while the worker stops: the job was dropped.
    bool submit(std::function<void()> job);

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
