#include "transport/batch_link.h"

#include "base/log.h"
#include "transport/timing.h"

namespace skippy::transport {

using protocol::message_kind;

batch_link::batch_link(dial_fn dial, int32_t credit_window, int32_t n_lanes, failure_fn on_failure)
    : dial_(std::move(dial)), credit_window_(credit_window), on_failure_(std::move(on_failure)),
      per_lane_(static_cast<size_t>(n_lanes), 0) {}

batch_link::~batch_link() { close(); }

void batch_link::close() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        link_.shutdown();
        failed_ = true;  // the reader exits quietly
    }
    if (reader_.joinable()) reader_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    link_.close();
    in_flight_.clear();
    std::fill(per_lane_.begin(), per_lane_.end(), 0);
    cv_.notify_all();
}

void batch_link::fail_locked(const status & reason, std::unique_lock<std::mutex> & lock) {
    if (failed_) return;
    failed_ = true;
    link_.shutdown();  // a sender blocked in write wakes up
    std::vector<int32_t> lanes;
    for (const auto & f : in_flight_) lanes.insert(lanes.end(), f.lanes.begin(), f.lanes.end());
    in_flight_.clear();
    std::fill(per_lane_.begin(), per_lane_.end(), 0);
    cv_.notify_all();
    if (on_failure_) {
        lock.unlock();
        on_failure_(reason, lanes);
        lock.lock();
    }
}

void batch_link::read_loop(stage_link * link) {
    // Waits in short slices: a step sent while the link was idle must have its deadline
    // watched from then on, and a slice ends soon enough to see it.
    constexpr auto slice = std::chrono::milliseconds(50);
    while (true) {
        const int fd = link->fd();
        if (wait_readable(std::span<const int>(&fd, 1), clock::now() + slice) < 0) {
            std::unique_lock<std::mutex> lock(mutex_);
            if (failed_) return;
            const auto now = clock::now();
            switch (heartbeat_.poll(now, !in_flight_.empty())) {
                case heartbeat_monitor::action::dead:
                    n_heartbeat_failures_.fetch_add(1);
                    fail_locked(heartbeat_unanswered(link->peer_name(), heartbeat_.answer_timeout()), lock);
                    return;
                case heartbeat_monitor::action::send: {
                    const protocol::request ping = heartbeat_request(heartbeat_.on_sent(now));
                    lock.unlock();
                    status st;
                    {
                        std::lock_guard<std::mutex> write_lock(write_mutex_);
                        st = link->send_request(ping);
                    }
                    n_heartbeats_sent_.fetch_add(1);
                    if (!st.is_ok()) {
                        lock.lock();
                        fail_locked(st, lock);
                        return;
                    }
                    continue;
                }
                case heartbeat_monitor::action::none: break;
            }
            if (!in_flight_.empty() && clock::now() >= in_flight_.front().ack_deadline) {
                const in_flight & f = in_flight_.front();
                fail_locked(make_error(error_code::timed_out,
                                       link->peer_name() + " did not acknowledge step " + std::to_string(f.step_id) + " (" +
                                           std::to_string(f.n_tokens) + " tokens) within its deadline of " +
                                           std::to_string(step_budget(link->options().liveness, f.n_tokens).count()) +
                                           " ms: the stage is stuck or unreachable"),
                            lock);
                return;
            }
            continue;
        }
        auto r = link->read_reply(link->frame_deadline());
        std::unique_lock<std::mutex> lock(mutex_);
        if (failed_) return;  // closed or failed by the sender
        if (!r.is_ok()) {
            fail_locked(link->peer_closed() ? make_error(error_code::peer_closed, link->peer_name() + ": connection closed by the peer")
                                            : r.error(),
                        lock);
            return;
        }
        if (r->kind == message_kind::error) {
            fail_locked(protocol::error_reply_status(*r), lock);
            return;
        }
        heartbeat_.on_traffic(clock::now());
        if (r->kind == message_kind::ack && heartbeat_.on_ack(r->request_id, clock::now())) continue;
        if (r->kind != message_kind::ack || in_flight_.empty() || in_flight_.front().step_id != r->request_id) {
            fail_locked(make_error(error_code::invalid_data, link->peer_name() + " sent an unexpected " +
                                                                 std::string(protocol::message_kind_name(r->kind)) + " for step " +
                                                                 std::to_string(r->request_id)),
                        lock);
            return;
        }
        for (int32_t lane : in_flight_.front().lanes) --per_lane_[static_cast<size_t>(lane)];
        in_flight_.pop_front();
        cv_.notify_all();
    }
}

status batch_link::send(const protocol::step_frame & step, uint32_t * forward_us, int64_t * n_tokens_queued) {
    const auto t0 = clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (failed_ || !link_.connected()) {
        // (Re)dial: the old reader has ended or ends now.
        link_.shutdown();
        failed_ = true;
        lock.unlock();
        if (reader_.joinable()) reader_.join();
        auto dialed = dial_();
        lock.lock();
        link_.close();
        in_flight_.clear();
        std::fill(per_lane_.begin(), per_lane_.end(), 0);
        if (!dialed.is_ok()) return dialed.error();
        link_ = std::move(dialed).value();
        failed_ = false;
        const liveness_options & live = link_.options().liveness;
        heartbeat_ = heartbeat_monitor(live.heartbeat_interval, step_budget(live, 0), clock::now());
        reader_ = std::thread([this, l = &link_] { read_loop(l); });
    }
    cv_.wait(lock, [&] { return failed_ || static_cast<int32_t>(in_flight_.size()) < credit_window_; });
    if (failed_) return make_error(error_code::unavailable, link_.peer_name() + ": the batch link failed");
    in_flight f{step.step_id, {}, 0, {}};
    int64_t queued = 0;
    for (const auto & e : step.entries) {
        f.lanes.push_back(static_cast<int32_t>(e.session_id));
        ++per_lane_[static_cast<size_t>(e.session_id)];
        f.n_tokens += static_cast<int64_t>(e.tokens.size());
    }
    for (const auto & ahead : in_flight_) queued += ahead.n_tokens;
    queued += f.n_tokens;
    f.ack_deadline = clock::now() + step_budget(link_.options().liveness, queued);
    if (n_tokens_queued) *n_tokens_queued = queued;
    in_flight_.push_back(std::move(f));
    lock.unlock();
    // Writing without mutex_ lets acknowledgements in meanwhile.
    status st;
    {
        std::lock_guard<std::mutex> write_lock(write_mutex_);
        st = link_.send_step(step);
    }
    if (!st.is_ok()) {
        lock.lock();
        fail_locked(st, lock);
        return st;
    }
    if (forward_us) *forward_us = measured_us_since(t0);
    return status::ok();
}

void batch_link::wait_idle(int32_t lane) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return per_lane_[static_cast<size_t>(lane)] == 0; });
}

}  // namespace skippy::transport
