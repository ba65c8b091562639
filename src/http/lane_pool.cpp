#include "http/lane_pool.h"

#include <algorithm>
#include <cassert>

namespace skippy::http {

const char * acquire_outcome_name(acquire_outcome o) {
    switch (o) {
        case acquire_outcome::acquired: return "acquired";
        case acquire_outcome::queue_full: return "full";
        case acquire_outcome::timed_out: return "timeout";
        case acquire_outcome::cancelled: return "disconnected";
        case acquire_outcome::shutting_down: return "shutdown";
    }
    return "timeout";
}

lane_lease::lane_lease(lane_lease && other) noexcept : pool_(other.pool_), lane_(other.lane_) {
    other.pool_ = nullptr;
    other.lane_ = -1;
}

lane_lease & lane_lease::operator=(lane_lease && other) noexcept {
    if (this != &other) {
        release();
        pool_ = other.pool_;
        lane_ = other.lane_;
        other.pool_ = nullptr;
        other.lane_ = -1;
    }
    return *this;
}

void lane_lease::release() {
    if (!pool_) return;
    pool_->give_back(lane_);
    pool_ = nullptr;
    lane_ = -1;
}

lane_pool::lane_pool(int32_t n_lanes, int32_t queue_capacity) : n_lanes_(n_lanes), queue_capacity_(queue_capacity) {
    assert(n_lanes >= 1 && queue_capacity >= 0);
    for (int32_t i = n_lanes - 1; i >= 0; --i) free_.push_back(i);  // back() is the lowest id
}

void lane_pool::give_back(int32_t lane) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        assert(std::find(free_.begin(), free_.end(), lane) == free_.end() && "lane returned twice");
        free_.push_back(lane);
        std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
    }
    cv_.notify_all();
}

acquire_result lane_pool::acquire(std::chrono::steady_clock::duration timeout, const std::function<bool()> & cancelled,
                                  std::chrono::steady_clock::duration poll_interval) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto deadline = start + timeout;
    acquire_result r;
    auto finish = [&](acquire_outcome o) {
        r.outcome = o;
        r.waited_s = std::chrono::duration<double>(clock::now() - start).count();
        return std::move(r);
    };
    auto take = [&] {
        r.lease = lane_lease(this, free_.back());
        free_.pop_back();
        peak_busy_ = std::max(peak_busy_, n_lanes_ - static_cast<int32_t>(free_.size()));
    };

    std::unique_lock<std::mutex> lock(mutex_);
    if (shutting_down_) return finish(acquire_outcome::shutting_down);
    if (waiters_.empty() && !free_.empty()) {
        take();
        return finish(acquire_outcome::acquired);
    }
    if (static_cast<int32_t>(waiters_.size()) >= queue_capacity_) return finish(acquire_outcome::queue_full);

    const uint64_t ticket = next_ticket_++;
    waiters_.push_back(ticket);
    peak_waiting_ = std::max(peak_waiting_, static_cast<int32_t>(waiters_.size()));
    auto leave = [&] {
        waiters_.erase(std::find(waiters_.begin(), waiters_.end(), ticket));
        cv_.notify_all();  // the next waiter may now be first in line for a free lane
    };
    for (;;) {
        if (shutting_down_) {
            leave();
            return finish(acquire_outcome::shutting_down);
        }
        if (waiters_.front() == ticket && !free_.empty()) {
            waiters_.pop_front();
            take();
            cv_.notify_all();  // more lanes may be free for the next waiter
            return finish(acquire_outcome::acquired);
        }
        if (cancelled) {
            // Never call out with the lock held: the check may block on a socket.
            lock.unlock();
            const bool gone = cancelled();
            lock.lock();
            if (gone) {
                leave();
                return finish(acquire_outcome::cancelled);
            }
            if (shutting_down_ || (waiters_.front() == ticket && !free_.empty())) continue;
        }
        const auto now = clock::now();
        if (now >= deadline) {
            leave();
            return finish(acquire_outcome::timed_out);
        }
        cv_.wait_until(lock, cancelled ? std::min(deadline, now + poll_interval) : deadline);
    }
}

void lane_pool::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        shutting_down_ = true;
    }
    cv_.notify_all();
}

int32_t lane_pool::n_busy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_lanes_ - static_cast<int32_t>(free_.size());
}

int32_t lane_pool::n_waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int32_t>(waiters_.size());
}

int32_t lane_pool::peak_busy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_busy_;
}

int32_t lane_pool::peak_waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_waiting_;
}

}  // namespace skippy::http
