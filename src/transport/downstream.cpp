#include "transport/downstream.h"

#include "transport/timing.h"

namespace skippy::transport {

using protocol::message_kind;

status downstream_link::ensure_connected() {
    if (link_.connected()) return status::ok();
    SKIPPY_ASSIGN_OR_RETURN(stage_link l, dial_());
    std::lock_guard<std::mutex> lock(mutex_);
    link_ = std::move(l);
    outstanding_ = 0;
    return status::ok();
}

void downstream_link::close() {
    std::lock_guard<std::mutex> lock(mutex_);
    link_.close();
    outstanding_ = 0;
}

void downstream_link::shutdown() {
    std::lock_guard<std::mutex> lock(mutex_);
    link_.shutdown();
}

status downstream_link::read_one(uint64_t want_id, protocol::reply * out) {
    SKIPPY_ASSIGN_OR_RETURN(protocol::reply r, link_.read_reply(link_.reply_deadline()));
    if (r.kind == message_kind::error) return protocol::error_reply_status(r);
    if (out && r.request_id == want_id) {
        *out = std::move(r);
        return status::ok();
    }
    if (r.kind != message_kind::ack) {
        return make_error(error_code::invalid_data, link_.peer_name() + " sent an unexpected " +
                                                        std::string(protocol::message_kind_name(r.kind)));
    }
    if (outstanding_ <= 0) return make_error(error_code::invalid_data, link_.peer_name() + " acked more than was sent");
    --outstanding_;
    return status::ok();
}

status downstream_link::send_streamed(const protocol::request & r, uint32_t * forward_us) {
    const auto t0 = clock::now();
    SKIPPY_TRY(ensure_connected());
    while (outstanding_ >= credit_window_) SKIPPY_TRY(read_one(0, nullptr));
    SKIPPY_TRY(link_.send_request(r));
    if (forward_us) *forward_us = measured_us_since(t0);
    ++outstanding_;
    return status::ok();
}

status downstream_link::roundtrip(const protocol::request & r, protocol::reply & reply, uint32_t * forward_us) {
    const auto t0 = clock::now();
    SKIPPY_TRY(ensure_connected());
    while (outstanding_ > 0) SKIPPY_TRY(read_one(0, nullptr));
    SKIPPY_TRY(link_.send_request(r));
    if (forward_us) *forward_us = measured_us_since(t0);
    return read_one(r.request_id, &reply);
}

}  // namespace skippy::transport
