// Holds a stage cache's record worker inside its first record job until the test
// opens the gate, so a test can submit records while the worker is busy. Synchronized
// by promises the test controls, never by sleeping.
#pragma once

#include "cache/stage_cache.h"

#include <atomic>
#include <future>

namespace skippy::cache::testing {

class worker_gate {
public:
    // Installs the hook. REQUIRES: the gate outlives the cache's record jobs, or the
    // hook is reset (set_record_hook_for_testing(nullptr)) first.
    explicit worker_gate(stage_cache & c) : release_f_(release_.get_future().share()) {
        c.set_record_hook_for_testing([this, f = release_f_] {
            if (first_.exchange(false)) {
                started_.set_value();
                f.wait();
            }
        });
    }
    // Blocks until the worker is inside the first record job.
    void wait_until_held() { started_.get_future().wait(); }
    // Lets the held job (and every later one) run.
    void open() { release_.set_value(); }

private:
    std::promise<void>       started_, release_;
    std::shared_future<void> release_f_;
    std::atomic<bool>        first_{true};
};

}  // namespace skippy::cache::testing
