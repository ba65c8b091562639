// Lanes for requests, with a bounded wait queue.
//
// A lane is one concurrent generation (a session on every stage). A request takes a
// free lane at once, or waits in a FIFO queue of at most `queue_capacity` requests:
// one that finds the queue full is refused (HTTP 429), one that waits longer than its
// timeout gives up (HTTP 503). A waiting request whose client went away leaves the
// queue (its cancel check is polled while it waits). Lanes go back to the pool when
// their lease is destroyed, and the longest waiter gets the lane.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace skippy::http {

enum class acquire_outcome { acquired, queue_full, timed_out, cancelled, shutting_down };
const char * acquire_outcome_name(acquire_outcome o);

class lane_pool;

// Holds one lane until destroyed (or release()). Movable, not copyable.
class lane_lease {
public:
    lane_lease() = default;
    lane_lease(lane_lease && other) noexcept;
    lane_lease & operator=(lane_lease && other) noexcept;
    lane_lease(const lane_lease &) = delete;
    lane_lease & operator=(const lane_lease &) = delete;
    ~lane_lease() { release(); }

    bool valid() const { return pool_ != nullptr; }
    int32_t lane() const { return lane_; }  // REQUIRES: valid()
    void release();

private:
    friend class lane_pool;
    lane_lease(lane_pool * pool, int32_t lane) : pool_(pool), lane_(lane) {}
    lane_pool * pool_ = nullptr;
    int32_t     lane_ = -1;
};

struct acquire_result {
    acquire_outcome outcome = acquire_outcome::timed_out;
    lane_lease      lease;        // valid only when acquired
    double          waited_s = 0; // time spent waiting
};

// Thread-safe. REQUIRES: every lease is destroyed before the pool.
class lane_pool {
public:
    // REQUIRES: n_lanes >= 1, queue_capacity >= 0.
    lane_pool(int32_t n_lanes, int32_t queue_capacity);

    // Takes a lane, waiting at most `timeout` in the queue. `cancelled`, when given, is
    // polled every `poll_interval` while waiting; true makes the request leave the queue.
    acquire_result acquire(std::chrono::steady_clock::duration timeout, const std::function<bool()> & cancelled = {},
                           std::chrono::steady_clock::duration poll_interval = std::chrono::milliseconds(20));

    // Wakes every waiter (they return shutting_down) and refuses new requests.
    void shutdown();

    int32_t n_lanes() const { return n_lanes_; }
    int32_t queue_capacity() const { return queue_capacity_; }
    int32_t n_busy() const;
    int32_t n_waiting() const;
    // The most lanes busy, and the most requests waiting, at any one time since the
    // pool was made: proof after the fact that requests overlapped.
    int32_t peak_busy() const;
    int32_t peak_waiting() const;

private:
    friend class lane_lease;
    void give_back(int32_t lane);

    const int32_t            n_lanes_;
    const int32_t            queue_capacity_;
    mutable std::mutex       mutex_;
    std::condition_variable  cv_;
    std::vector<int32_t>     free_;     // free lanes; the lowest id is taken first
    std::deque<uint64_t>     waiters_;  // tickets in arrival order
    uint64_t                 next_ticket_ = 0;
    int32_t                  peak_busy_ = 0;
    int32_t                  peak_waiting_ = 0;
    bool                     shutting_down_ = false;
};

}  // namespace skippy::http
