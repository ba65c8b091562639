// The batch link from a stage to the next (docs/transport.md, "Lanes and steps"):
// one connection per hop carrying the Step frames of every lane, each acknowledged by
// the next stage once it has run the step and handed it on.
//
// The sender keeps at most `credit_window` steps unacknowledged, and counts for each
// lane the unacknowledged steps holding it: a lane's control messages go down its own
// forward link only once none is left (wait_idle), so every stage sees a lane's steps
// and its control messages in the order they were sent although they travel on two
// connections. A reader thread takes the acknowledgements; when the link fails (the
// peer closed, an Error, a bad reply) it reports the reason and the lanes that had
// steps in flight, and the next send dials again.
//
// Every step must be acknowledged within its step budget (liveness.h), charged with
// its own tokens and those of the unacknowledged steps ahead of it: a peer that does
// not (frozen, partitioned) fails the link with `timed_out`. A link with no step
// outstanding sends a Heartbeat after liveness.heartbeat_interval of quiet; one not
// answered within step_base fails the link the same way, so a peer that froze while
// the link was idle is found before a step is put on it.
#pragma once

#include "transport/link.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::transport {

class batch_link {
public:
    using dial_fn = std::function<result<stage_link>()>;
    // Called on the reader thread when the link fails, with the lanes whose steps were
    // unacknowledged then.
    using failure_fn = std::function<void(const status & reason, const std::vector<int32_t> & lanes)>;

    // REQUIRES: credit_window >= 1, n_lanes >= 1.
    batch_link(dial_fn dial, int32_t credit_window, int32_t n_lanes, failure_fn on_failure);
    ~batch_link();
    batch_link(const batch_link &) = delete;
    batch_link & operator=(const batch_link &) = delete;

    // Dials when not connected, waits for credit, sends. One sender thread at a time.
    // REQUIRES: every entry's session_id < n_lanes. PROMISES: *forward_us is the time
    // from the call until the frame was written; *n_tokens_queued (when given) is the
    // tokens of this step and of the unacknowledged steps ahead of it, the work the
    // peer does before this step is through.
    status send(const protocol::step_frame & step, uint32_t * forward_us, int64_t * n_tokens_queued = nullptr);

    // Waits until no unacknowledged step holds `lane` (at once after a failure, which
    // forgets them).
    void wait_idle(int32_t lane);

    // Closes the link and joins the reader (a later send dials again).
    void close();

    // Heartbeats sent, and links failed because one went unanswered (over every
    // connection this batch_link made). Thread-safe.
    int64_t n_heartbeats_sent() const { return n_heartbeats_sent_.load(); }
    int64_t n_heartbeat_failures() const { return n_heartbeat_failures_.load(); }

private:
    struct in_flight {
        uint64_t             step_id;
        std::vector<int32_t> lanes;
        int64_t              n_tokens = 0;
        clock::time_point    ack_deadline;
    };
    void read_loop(stage_link * link);
    void fail_locked(const status & reason, std::unique_lock<std::mutex> & lock);

    dial_fn                    dial_;
    const int32_t              credit_window_;
    failure_fn                 on_failure_;
    std::mutex                 mutex_;
    std::condition_variable    cv_;
    stage_link                 link_;      // written by the sender, read by the reader thread
    bool                       failed_ = false;
    std::deque<in_flight>      in_flight_;
    std::vector<int32_t>       per_lane_;  // unacknowledged steps holding each lane
    heartbeat_monitor          heartbeat_{std::chrono::milliseconds(0), std::chrono::milliseconds(1), clock::now()};  // under mutex_
    // Frames on link_ come from the sender (steps) and the reader (heartbeats).
    std::mutex                 write_mutex_;
    std::atomic<int64_t>       n_heartbeats_sent_{0};
    std::atomic<int64_t>       n_heartbeat_failures_{0};
    std::thread                reader_;
};

}  // namespace skippy::transport
