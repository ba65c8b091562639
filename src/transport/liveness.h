// Liveness of stage links (docs/transport.md, "Liveness"): how long a stage may take to
// answer the work sent to it before the requests on it fail with `timed_out`.
//
// A reply's deadline is computed from the work it answers, not fixed: a base (round
// trips, scheduling) plus a floor rate per token (the slowest pace we accept from a
// stage), counted for every hop the reply has to come back through. A step queued
// behind unacknowledged ones is charged their tokens too, since the peer runs them
// first. A frozen or partitioned stage thus fails a decode in seconds, while a long
// prefill chunk still gets the time its size needs.
#pragma once

#include "base/status.h"
#include "protocol/protocol.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace skippy::transport {

struct liveness_options {
    // Per hop: the fixed part of every reply's budget.
    std::chrono::milliseconds step_base{2000};
    // Per hop and token: the slowest pace a stage may run at before it counts as stuck.
    std::chrono::milliseconds step_per_token{20};
    // A link with nothing outstanding sends a Heartbeat once it has been quiet this
    // long; the peer must answer within step_base (a reply to no work). 0: none.
    std::chrono::milliseconds heartbeat_interval{1000};
};

// The longest a reply to `n_tokens` of work may take to come back through `n_hops`
// stages: n_hops * (step_base + n_tokens * step_per_token). REQUIRES: n_tokens >= 0,
// n_hops >= 1. PROMISES: saturates at one day instead of overflowing (any sane budget is
// far below), and is at least 1 ms.
inline std::chrono::milliseconds step_budget(const liveness_options & o, int64_t n_tokens, int32_t n_hops = 1) {
    constexpr int64_t cap_ms = 24LL * 3600 * 1000;
    const int64_t base = std::max<int64_t>(0, o.step_base.count());
    const int64_t per = std::max<int64_t>(0, o.step_per_token.count());
    const int64_t tokens = std::max<int64_t>(0, n_tokens);
    const int64_t hops = std::max<int32_t>(1, n_hops);
    // Each factor is checked against the cap before multiplying, so nothing overflows.
    if (per > 0 && tokens > cap_ms / per) return std::chrono::milliseconds(cap_ms);
    const int64_t one_hop = std::min(cap_ms, base + tokens * per);
    if (one_hop > cap_ms / hops) return std::chrono::milliseconds(cap_ms);
    return std::chrono::milliseconds(std::max<int64_t>(1, one_hop * hops));
}

// The heartbeat of one link, as a state machine the link's reader drives with the clock
// (docs/transport.md, "Liveness"): quiet for `interval` with nothing outstanding ->
// send a Heartbeat; its Ack clears it; no Ack within `answer_timeout` -> the peer is
// dead. Traffic either way counts as quiet time reset. Not thread-safe: the caller
// serializes (the link's mutex).
class heartbeat_monitor {
public:
    enum class action { none, send, dead };

    // REQUIRES: answer_timeout > 0. interval 0 turns heartbeats off.
    heartbeat_monitor(std::chrono::milliseconds interval, std::chrono::milliseconds answer_timeout,
                      std::chrono::steady_clock::time_point now)
        : interval_(interval), answer_timeout_(answer_timeout), last_traffic_(now) {}

    // A frame was sent or received at `now`.
    void on_traffic(std::chrono::steady_clock::time_point now) { last_traffic_ = now; }

    // What to do at `now`; `busy`: the link has work outstanding, whose own deadline
    // watches the peer (no heartbeat is started then, but one already sent must still
    // be answered in time).
    action poll(std::chrono::steady_clock::time_point now, bool busy) const {
        if (pending_) return now >= answer_deadline_ ? action::dead : action::none;
        if (interval_.count() <= 0 || busy) return action::none;
        return now - last_traffic_ >= interval_ ? action::send : action::none;
    }

    // A Heartbeat was sent at `now`: PROMISES its request_id, which has the top bit set
    // (so it never equals a step's or a request's id from 1 up).
    uint64_t on_sent(std::chrono::steady_clock::time_point now) {
        pending_ = true;
        pending_id_ = (uint64_t(1) << 63) | ++n_sent_;
        answer_deadline_ = now + answer_timeout_;
        last_traffic_ = now;
        return pending_id_;
    }

    // An Ack with `id` arrived: true when it answers the pending Heartbeat (then cleared).
    bool on_ack(uint64_t id, std::chrono::steady_clock::time_point now) {
        if (!pending_ || id != pending_id_) return false;
        pending_ = false;
        ++n_answered_;
        last_traffic_ = now;
        return true;
    }

    bool pending() const { return pending_; }
    int64_t n_sent() const { return n_sent_; }
    int64_t n_answered() const { return n_answered_; }
    std::chrono::milliseconds answer_timeout() const { return answer_timeout_; }

private:
    std::chrono::milliseconds             interval_;
    std::chrono::milliseconds             answer_timeout_;
    std::chrono::steady_clock::time_point last_traffic_;
    std::chrono::steady_clock::time_point answer_deadline_{};
    bool                                  pending_ = false;
    uint64_t                              pending_id_ = 0;
    int64_t                               n_sent_ = 0;
    int64_t                               n_answered_ = 0;
};

// The Heartbeat a link sends (docs/protocol.md, kind 13): control, no tokens;
// `request_id` from heartbeat_monitor::on_sent.
inline protocol::request heartbeat_request(uint64_t request_id) {
    protocol::request ping;
    ping.kind = protocol::message_kind::heartbeat;
    ping.request_id = request_id;
    ping.state.phase = protocol::message_phase::control;
    return ping;
}

// Why a link whose Heartbeat went unanswered is dead (timed_out, naming the peer).
inline status heartbeat_unanswered(const std::string & peer_name, std::chrono::milliseconds answer_timeout) {
    return make_error(error_code::timed_out, peer_name + " did not answer a heartbeat within " +
                                                 std::to_string(answer_timeout.count()) + " ms: the stage is stuck or unreachable");
}

}  // namespace skippy::transport
