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
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
    // closed at once, so a flood of silent dialers cannot exhaust threads. Well above
    // the lanes a chain dials at once (a real handshake takes well under a millisecond).
    int32_t                   max_pending_handshakes = 64;
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
    status send_step(const protocol::step_frame & s);
    status send_reply(const protocol::reply & r);
    // Best effort: an Error reply for `st`, then the link is closed.
    void fail(uint64_t request_id, const status & st);

    // Reads one frame: waits until `deadline` for it to begin, then at most
    // options.frame_timeout for the rest.
    result<protocol::request> read_request(clock::time_point deadline);
    result<protocol::reply> read_reply(clock::time_point deadline);
    result<protocol::step_frame> read_step(clock::time_point deadline);
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

// Reads one request frame from a socket that is not a stage_link yet (the first frame
// of a direct_return link, read during its handshake). Same bounds as read_request.
result<protocol::request> read_first_request(tcp_socket & socket, const link_options & options, clock::time_point deadline);

// Reads a dialer's hello on an accepted socket and answers it: version and auth are
// checked here (refused peers get a hello_reply with the reason, then a close).
// `accept_hello` decides the rest (lane range, link kind): return ok to accept.
result<protocol::hello> answer_hello(tcp_socket & socket, const link_options & options,
                                     const std::function<status(const protocol::hello &)> & accept_hello);

// Runs the handshakes of accepted connections off the accept thread, one short-lived
// thread each, so a silent dialer cannot hold up the next one. At most `max_pending`
// run at once; start() closes connections beyond that.
class handshake_pool {
public:
    // A connection whose handshake is running.
    class pending {
    public:
        tcp_socket & socket() { return socket_; }
        // Hands the socket on (to a lane, after its handshake succeeded); stop() no
        // longer touches it. Thread-safe against stop().
        tcp_socket take();

    private:
        friend class handshake_pool;
        handshake_pool * pool_ = nullptr;
        tcp_socket       socket_;
        bool             done_ = false;  // under pool_->mutex_
        std::thread      thread_;
    };

    explicit handshake_pool(int32_t max_pending) : max_pending_(max_pending) {}
    ~handshake_pool() { stop(); }
    handshake_pool(const handshake_pool &) = delete;
    handshake_pool & operator=(const handshake_pool &) = delete;

    // Runs `handshake` on its own thread with the connection; the socket is closed
    // when it returns unless it was taken. False (and the socket closed) when
    // max_pending handshakes are already running or the pool is stopped.
    bool start(tcp_socket socket, std::function<void(pending &)> handshake);
    // Shuts down the sockets of running handshakes (their reads fail at once) and
    // joins every thread. Later start() calls refuse.
    void stop();
    int32_t n_pending();

private:
    void reap_locked();  // joins finished threads; REQUIRES: mutex_ held

    const int32_t                       max_pending_;
    std::mutex                          mutex_;
    bool                                stopped_ = false;
    std::list<std::unique_ptr<pending>> running_;
};

}  // namespace skippy::transport
