#include "transport/downstream.h"

#include "transport/timing.h"

namespace skippy::transport {

using protocol::message_kind;

status downstream_link::ensure_connected() {
    if (link_.connected()) return status::ok();
    SKIPPY_ASSIGN_OR_RETURN(stage_link l, dial_());
    std::lock_guard<std::mutex> lock(mutex_);
    link_ = std::move(l);
    outstanding_.clear();
    const liveness_options & live = link_.options().liveness;
    heartbeat_ = heartbeat_monitor(live.heartbeat_interval, step_budget(live, 0), clock::now());
    return status::ok();
}

void downstream_link::close() {
    std::lock_guard<std::mutex> lock(mutex_);
    link_.close();
    outstanding_.clear();
}

void downstream_link::shutdown() {
    std::lock_guard<std::mutex> lock(mutex_);
    link_.shutdown();
}

namespace {

std::string budget_text(const liveness_options & o, int64_t n_tokens, int32_t n_hops) {
    return std::to_string(step_budget(o, n_tokens, n_hops).count()) + " ms for " + std::to_string(n_tokens) + " tokens over " +
           std::to_string(n_hops) + (n_hops == 1 ? " hop" : " hops");
}

}  // namespace

status downstream_link::read_one(uint64_t want_id, protocol::reply * out, clock::time_point deadline) {
    taken what = taken::ack;
    return read_frame(want_id, out, deadline, &what, nullptr);
}

status downstream_link::read_frame(uint64_t want_id, protocol::reply * out, clock::time_point deadline, taken * what,
                                   bool * our_deadline) {
    if (our_deadline) *our_deadline = false;
    auto read = link_.read_reply(deadline);
    if (!read.is_ok()) {
        // Nothing arrived in time: our deadline, not a timeout the peer reported.
        if (our_deadline) *our_deadline = read.error().code() == error_code::timed_out && link_.connected();
        return read.error();
    }
    protocol::reply r = std::move(read).value();
    const auto now = clock::now();
    heartbeat_.on_traffic(now);
    if (r.kind == message_kind::error) return protocol::error_reply_status(r);
    if (out && r.request_id == want_id) {
        *out = std::move(r);
        *what = taken::reply;
        return status::ok();
    }
    if (r.kind != message_kind::ack) {
        return make_error(error_code::invalid_data, link_.peer_name() + " sent an unexpected " +
                                                        std::string(protocol::message_kind_name(r.kind)));
    }
    if (heartbeat_.on_ack(r.request_id, now)) {
        *what = taken::heartbeat_ack;
        return status::ok();
    }
    if (outstanding_.empty()) return make_error(error_code::invalid_data, link_.peer_name() + " acked more than was sent");
    outstanding_.pop_front();
    *what = taken::ack;
    return status::ok();
}

status downstream_link::read_oldest_ack() {
    const pending_ack oldest = outstanding_.front();
    bool ours = false;
    taken what = taken::heartbeat_ack;
    status st;
    // A Heartbeat sent while the link was idle may be answered first.
    while (st.is_ok() && what == taken::heartbeat_ack) st = read_frame(0, nullptr, oldest.ack_deadline, &what, &ours);
    // A stage below that timed out reports it in an Error naming the stuck stage: that
    // reason stands; only our own deadline is described here.
    if (!ours) return st;
    return make_error(error_code::timed_out, link_.peer_name() + " did not acknowledge a request within its deadline (" +
                                                 budget_text(link_.options().liveness, oldest.n_tokens, 1) +
                                                 "): the stage is stuck or unreachable");
}

status downstream_link::send_streamed(const protocol::request & r, uint32_t * forward_us) {
    const auto t0 = clock::now();
    SKIPPY_TRY(ensure_connected());
    while (static_cast<int32_t>(outstanding_.size()) >= credit_window_) SKIPPY_TRY(read_oldest_ack());
    SKIPPY_TRY(link_.send_request(r));
    heartbeat_.on_traffic(clock::now());
    if (forward_us) *forward_us = measured_us_since(t0);
    int64_t queued = static_cast<int64_t>(r.tokens.size());
    for (const auto & o : outstanding_) queued += o.n_tokens;
    outstanding_.push_back({static_cast<int64_t>(r.tokens.size()), clock::now() + step_budget(link_.options().liveness, queued)});
    return status::ok();
}

status downstream_link::roundtrip(const protocol::request & r, protocol::reply & reply, uint32_t * forward_us,
                                  const std::function<void()> & meanwhile) {
    const auto t0 = clock::now();
    SKIPPY_TRY(ensure_connected());
    while (!outstanding_.empty()) SKIPPY_TRY(read_oldest_ack());
    SKIPPY_TRY(link_.send_request(r));
    heartbeat_.on_traffic(clock::now());
    if (forward_us) *forward_us = measured_us_since(t0);
    if (meanwhile) meanwhile();
    const int64_t n_tokens = static_cast<int64_t>(r.tokens.size());
    const auto deadline = clock::now() + step_budget(link_.options().liveness, n_tokens, n_hops_);
    bool ours = false;
    taken what = taken::heartbeat_ack;
    status st;
    // The Ack of a Heartbeat sent before this request comes ahead of its reply.
    while (st.is_ok() && what == taken::heartbeat_ack) st = read_frame(r.request_id, &reply, deadline, &what, &ours);
    if (!ours) return st;  // as in read_oldest_ack: a timeout a stage below reported keeps its reason
    return make_error(error_code::timed_out, link_.peer_name() + " did not answer " + std::string(protocol::message_kind_name(r.kind)) +
                                                 " within its deadline (" + budget_text(link_.options().liveness, n_tokens, n_hops_) +
                                                 "): a stage is stuck or unreachable");
}

status downstream_link::check_heartbeat(clock::time_point now, bool may_send, bool * sent) {
    if (sent) *sent = false;
    if (!link_.connected()) return status::ok();
    switch (heartbeat_.poll(now, !outstanding_.empty() || !may_send)) {
        case heartbeat_monitor::action::dead: return heartbeat_unanswered(link_.peer_name(), heartbeat_.answer_timeout());
        case heartbeat_monitor::action::send: {
            const status st = link_.send_request(heartbeat_request(heartbeat_.on_sent(now)));
            if (sent) *sent = st.is_ok();
            return st;
        }
        case heartbeat_monitor::action::none: break;
    }
    return status::ok();
}

}  // namespace skippy::transport
