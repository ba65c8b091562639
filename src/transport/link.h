// A stage link: one TCP connection speaking the stage protocol (docs/protocol.md).
//
// The dialer sends a hello and reads the listener's hello_reply; with a stage key both
// then prove the key to each other (link_auth.h) and every frame carries a MAC.
// Afterwards both sides exchange frames. Every frame read is bounded by the protocol limits before a
// byte of its body is allocated; anything malformed is an error status, and the
// caller closes the link (an error reply first, when it can).
#pragma once

#include "base/status.h"
#include "protocol/protocol.h"
#include "transport/link_auth.h"
#include "transport/liveness.h"
#include "transport/socket.h"
#include "transport/tls.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace skippy::transport {

struct link_options {
    protocol::protocol_limits limits;
    // The shared stage key (load_stage_key); empty: links are not authenticated. Both
    // ends of a link must agree (a key on one side only is refused).
    std::string               stage_key;
    // TLS under the stage protocol (tls.h); null: plain TCP. Both ends must agree: a
    // TLS end and a plain end fail the handshake.
    std::shared_ptr<const tls_context> tls;
    int32_t                   wire_delay_ms = 0; // added before every frame written (a slow link)
    std::chrono::milliseconds connect_timeout{5000};
    // The whole handshake, on both sides (a silent dialer is closed after this).
    std::chrono::milliseconds handshake_timeout{2000};
    // How long a peer may take to answer the work sent to it (liveness.h): replies,
    // acknowledgements and predicted tokens all wait at most their step budget.
    liveness_options          liveness;
    // Once a frame's first byte has arrived, the rest of it must arrive within this
    // (a peer that stalls or closes mid-frame is an error, not an idle lane). Waiting
    // for a frame to begin is bounded only by the caller's deadline. Writes are bounded
    // the same way: a peer that stops reading for this long fails the write.
    std::chrono::milliseconds frame_timeout{10000};
    // Accepted connections whose handshake is still running, per listener and per peer
    // address. Beyond either, a new connection pushes out the oldest pending handshake
    // (of its own address, else of the address with the most pending): a real
    // handshake takes well under a millisecond, so what gets pushed out is a silent
    // dialer, and a flood of them can neither exhaust threads nor keep a stage from
    // re-dialing. Well above the lanes a chain dials at once.
    int32_t                   max_pending_handshakes = 64;
    int32_t                   max_pending_handshakes_per_address = 16;
};

class stage_link {
public:
    stage_link() = default;
    // `macs` from the handshake (off for an unauthenticated link).
    stage_link(tcp_socket socket, const link_options & options, std::string peer_name, link_macs macs = {})
        : socket_(std::move(socket)), options_(options), peer_name_(std::move(peer_name)), macs_(std::move(macs)) {}

    bool connected() const { return socket_.valid(); }
    bool authenticated() const { return macs_.on(); }
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
    // A batch link's next frame: a Step, or a Heartbeat (nullopt, its request_id in
    // *heartbeat_id). Any other kind is invalid_data.
    result<std::optional<protocol::step_frame>> read_step_or_heartbeat(clock::time_point deadline, uint64_t * heartbeat_id);
    const link_options & options() const { return options_; }
    // For a read once the socket is readable: the frame has begun, so it is bounded by
    // frame_timeout alone.
    clock::time_point frame_deadline() const { return clock::now() + options_.frame_timeout; }

private:
    status write_frame(std::vector<uint8_t> bytes);
    status read_frame(std::vector<uint8_t> & frame, clock::time_point deadline);
    status annotate(const status & st) const;

    tcp_socket   socket_;
    link_options options_;
    std::string  peer_name_;
    bool         peer_closed_ = false;
    link_macs    macs_;
};

// Dials `ep` and completes the handshake as `hello` (its auth and nonce are set here,
// from options.stage_key). A listener that cannot prove the key is `permission`.
result<stage_link> connect_link(const endpoint & ep, protocol::hello hello, const link_options & options,
                                const std::string & peer_name);

// Reads one request frame from a socket that is not a stage_link yet (the first frame
// of a direct_return link, read during its handshake), checking its MAC with `recv`
// when that is on. Same bounds as read_request.
result<protocol::request> read_first_request(tcp_socket & socket, const link_options & options, frame_mac & recv,
                                             clock::time_point deadline);

// A dialer the listener accepted: its hello and the link's MACs (off without a key).
struct accepted_link {
    protocol::hello hello;
    link_macs       macs;
};

// Reads a dialer's hello on an accepted socket and answers it: version and auth are
// checked here (refused peers get a hello_reply with the reason, then a close); with
// a stage key, the dialer must prove it before anything else is decided, so a peer
// without the key learns nothing and takes over no lane. `accept_hello` decides the
// rest (lane range, link kind): return ok to accept.
result<accepted_link> answer_hello(tcp_socket & socket, const link_options & options,
                                   const std::function<status(const protocol::hello &)> & accept_hello);

// Runs the handshakes of accepted connections off the accept thread, one short-lived
// thread each, so a silent dialer cannot hold up the next one. At most `max_pending`
// run at once, and `max_per_address` from one peer address; start() makes room for a
// new connection by pushing out the oldest pending one (see link_options).
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
        bool             done_ = false;     // under pool_->mutex_
        bool             evicted_ = false;  // under pool_->mutex_: pushed out, ending
        std::string      address_;
        std::thread      thread_;
    };

    handshake_pool(int32_t max_pending, int32_t max_per_address)
        : max_pending_(max_pending), max_per_address_(max_per_address) {}
    ~handshake_pool() { stop(); }
    handshake_pool(const handshake_pool &) = delete;
    handshake_pool & operator=(const handshake_pool &) = delete;

    // Runs `handshake` on its own thread with the connection; the socket is closed
    // when it returns unless it was taken. Over a cap, the oldest pending handshake of
    // the same address (or else of the address with the most) is shut down first.
    // False (and the socket closed) only when the pool is stopped.
    bool start(tcp_socket socket, std::function<void(pending &)> handshake);
    // Shuts down the sockets of running handshakes (their reads fail at once) and
    // joins every thread. Later start() calls refuse.
    void stop();
    // Handshakes running and not pushed out.
    int32_t n_pending();
    // Handshakes pushed out so far.
    int64_t n_evicted();

private:
    void reap_locked();  // joins finished threads; REQUIRES: mutex_ held
    // Shuts down the oldest live handshake from `address` (any address when empty).
    // REQUIRES: mutex_ held.
    void evict_oldest_locked(const std::string & address);

    const int32_t                       max_pending_;
    const int32_t                       max_per_address_;
    int64_t                             n_evicted_ = 0;
    std::mutex                          mutex_;
    bool                                stopped_ = false;
    std::list<std::unique_ptr<pending>> running_;
};

}  // namespace skippy::transport
