// A stage link: one TCP connection speaking the stage protocol (docs/protocol.md).
//
// The dialer sends a hello and reads the listener's hello_reply; afterwards both
// sides exchange frames. Every frame read is bounded by the protocol limits before a
// byte of its body is allocated; anything malformed is an error status, and the
// caller closes the link (an error reply first, when it can).
#pragma once

#include "base/status.h"
#include "protocol/protocol.h"
#include "transport/socket.h"

#include <chrono>
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

namespace skippy::transport {

struct link_options {
    protocol::protocol_limits limits;
    std::string               auth_token;        // empty: no authentication
    int32_t                   wire_delay_ms = 0; // added before every frame written (a slow link)
    std::chrono::milliseconds connect_timeout{5000};
    std::chrono::milliseconds handshake_timeout{5000};
    std::chrono::milliseconds reply_timeout{600000};  // waiting for a reply or a token
    // Once a frame's first byte has arrived, the rest of it must arrive within this
    // (a peer that stalls or closes mid-frame is an error, not an idle lane). Waiting
    // for a frame to begin is bounded only by the caller's deadline.
    std::chrono::milliseconds frame_timeout{10000};
    // Accepted connections whose handshake is still running, per listener; more are
    // closed at once, so a flood of silent dialers cannot exhaust threads.
    int32_t                   max_pending_handshakes = 16;
};

class stage_link {
public:
    stage_link() = default;
    stage_link(tcp_socket socket, const link_options & options, std::string peer_name)
        : socket_(std::move(socket)), options_(options), peer_name_(std::move(peer_name)) {}

    bool connected() const { return socket_.valid(); }
    int fd() const { return socket_.fd(); }
    const std::string & peer_name() const { return peer_name_; }
    void close() { socket_.close(); }
    void shutdown() { socket_.shutdown(); }
    // True when the last read failed because the peer closed the connection cleanly
    // between frames (not an error: the lane is simply over). A close in the middle
    // of a frame is a "truncated frame" error instead.
    bool peer_closed() const { return peer_closed_; }

    status send_request(const protocol::request & r);
    status send_reply(const protocol::reply & r);
    // Best effort: an Error reply for `st`, then the link is closed.
    void fail(uint64_t request_id, const status & st);

    // Reads one frame: waits until `deadline` for it to begin, then at most
    // options.frame_timeout for the rest.
    result<protocol::request> read_request(clock::time_point deadline);
    result<protocol::reply> read_reply(clock::time_point deadline);
    clock::time_point reply_deadline() const { return clock::now() + options_.reply_timeout; }

private:
    status write_frame(const std::vector<uint8_t> & bytes);
    status read_frame(std::vector<uint8_t> & frame, clock::time_point deadline);
    status annotate(const status & st) const;

    tcp_socket   socket_;
    link_options options_;
    std::string  peer_name_;
    bool         peer_closed_ = false;
};

// Dials `ep` and completes the handshake as `hello`.
result<stage_link> connect_link(const endpoint & ep, protocol::hello hello, const link_options & options,
                                const std::string & peer_name);

// Reads a dialer's hello on an accepted socket and answers it: version and auth are
// checked here (refused peers get a hello_reply with the reason, then a close).
// `accept_hello` decides the rest (lane range, link kind): return ok to accept.
result<protocol::hello> answer_hello(tcp_socket & socket, const link_options & options,
                                     const std::function<status(const protocol::hello &)> & accept_hello);

}  // namespace skippy::transport
