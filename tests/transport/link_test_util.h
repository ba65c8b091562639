// Small helpers shared by the link tests.
#pragma once

#include "protocol/protocol.h"
#include "transport/link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace skippy::transport::test_util {

// A stage key long enough for load_stage_key.
inline const std::string k_key = "0123456789abcdef0123456789abcdef";

// A valid Stop request: the shortest frame that goes downstream.
inline protocol::request stop_request(uint64_t id) {
    protocol::request r;
    r.kind = protocol::message_kind::stop;
    r.request_id = id;
    r.state.phase = protocol::message_phase::control;
    return r;
}

// A loopback listener on a free port.
struct listener_fixture {
    tcp_listener listener;
    endpoint     ep;
    listener_fixture() {
        auto l = tcp_listener::listen({"127.0.0.1", 0});
        EXPECT_TRUE(l.is_ok());
        listener = std::move(l).value();
        ep = {"127.0.0.1", listener.port()};
    }
};

inline link_options options_with_key(const std::string & key) {
    link_options o;
    o.stage_key = key;
    o.handshake_timeout = std::chrono::milliseconds(2000);
    return o;
}

// Runs answer_hello on the next accepted connection in a thread.
struct acceptor {
    std::thread           thread;
    result<accepted_link> outcome = make_error(error_code::internal, "not run");
    tcp_socket            socket;
    acceptor(tcp_listener & l, const link_options & o, std::function<status(const protocol::hello &)> accept) {
        thread = std::thread([&, o, accept] {
            auto s = l.accept(std::chrono::milliseconds(3000));
            if (!s.is_ok()) { outcome = s.error(); return; }
            socket = std::move(s).value();
            outcome = answer_hello(socket, o, accept);
            if (!outcome.is_ok()) socket.close();  // as the stage's handshake pool does
        });
    }
    ~acceptor() { if (thread.joinable()) thread.join(); }
};

inline status accept_all(const protocol::hello &) { return status::ok(); }

}  // namespace skippy::transport::test_util
