// TCP plumbing for stage links: endpoints, dialing with a timeout, listening, and
// whole-buffer reads and writes that wait with poll (so a peer that stops talking is a
// timeout, and a closed peer is an error, never a hang).
#pragma once

#include "base/status.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace skippy::transport {

struct endpoint {
    std::string host;  // numeric address or name
    uint16_t    port = 0;

    // "127.0.0.1:7100", "[::1]:7100", "localhost:7100".
    static result<endpoint> parse(const std::string & text);
    std::string to_string() const;
    bool operator==(const endpoint &) const = default;
};

using clock = std::chrono::steady_clock;

class tls_context;
enum class tls_role { client, server };

// An owned, connected TCP socket (TCP_NODELAY set), optionally carrying TLS
// (start_tls). Reads and writes may run on two threads at once; close() and moves may
// not run beside them (shutdown() may).
class tcp_socket {
public:
    tcp_socket() = default;
    explicit tcp_socket(int fd) : fd_(fd) {}
    ~tcp_socket() { close(); }
    tcp_socket(tcp_socket && o) noexcept : fd_(o.fd_), tls_(std::move(o.tls_)) { o.fd_ = -1; }
    tcp_socket & operator=(tcp_socket && o) noexcept;
    tcp_socket(const tcp_socket &) = delete;
    tcp_socket & operator=(const tcp_socket &) = delete;

    bool valid() const { return fd_ >= 0; }
    int fd() const { return fd_; }
    void close();
    // Wakes any thread blocked on this socket (its reads fail); the fd stays owned.
    void shutdown();
    // The peer's numeric address ("127.0.0.1", "::1"); empty when it cannot be read.
    std::string peer_host() const;

    // Writes all of `data`. An error (peer gone) is `unavailable`; a peer that does not
    // take the bytes before `deadline` (it stopped reading) is `timed_out`.
    status write_all(std::span<const uint8_t> data, clock::time_point deadline = clock::time_point::max());
    // Reads exactly out.size() bytes before `deadline`. EOF is `peer_closed` (the
    // message names the byte count when some had arrived), a reset `unavailable`, the
    // deadline `timed_out`. *n_read (if given) is set to the bytes read, also on failure.
    status read_exact(std::span<uint8_t> out, clock::time_point deadline, size_t * n_read = nullptr);

    // Runs a TLS handshake as `role` (tls.h); afterwards every read and write goes
    // through TLS. A peer whose certificate does not chain to the context's CA, or that
    // does not speak TLS, is `permission` / `unavailable` with OpenSSL's reason; the
    // deadline is `timed_out`. REQUIRES: valid(), no TLS yet, no read or write running.
    // PROMISES: a frame written with one write_all ends at a TLS record boundary, and
    // OpenSSL reads one record at a time, so between frames no bytes wait inside TLS:
    // wait_readable on fd() stays exact for TLS sockets.
    status start_tls(const tls_context & context, tls_role role, clock::time_point deadline);
    bool tls_on() const { return tls_ != nullptr; }

private:
    struct tls_session;
    struct tls_session_deleter {
        void operator()(tls_session * s) const;
    };
    status tls_write_all(std::span<const uint8_t> data, clock::time_point deadline);
    status tls_read_exact(std::span<uint8_t> out, clock::time_point deadline, size_t * n_read);

    int fd_ = -1;
    std::unique_ptr<tls_session, tls_session_deleter> tls_;
};

// Dials `ep`, giving up after `timeout`.
result<tcp_socket> dial(const endpoint & ep, std::chrono::milliseconds timeout);

class tcp_listener {
public:
    tcp_listener() = default;
    ~tcp_listener() { close(); }
    tcp_listener(tcp_listener && o) noexcept : fd_(o.fd_.exchange(-1)), port_(o.port_) {}
    tcp_listener & operator=(tcp_listener && o) noexcept;
    tcp_listener(const tcp_listener &) = delete;
    tcp_listener & operator=(const tcp_listener &) = delete;

    // Binds and listens (port 0 picks a free port; see port()).
    static result<tcp_listener> listen(const endpoint & ep);

    uint16_t port() const { return port_; }
    bool valid() const { return fd_ >= 0; }
    // Waits up to `timeout` for a connection; `unavailable` on timeout or after close().
    result<tcp_socket> accept(std::chrono::milliseconds timeout);
    // Stops accepting; wakes a thread blocked in accept().
    void close();

private:
    // Atomic: close() may run on another thread than a blocked accept().
    std::atomic<int> fd_{-1};
    uint16_t         port_ = 0;
};

// Waits until one of the sockets is readable (or closed) or the deadline passes.
// Returns the index of a readable socket, or -1 on timeout.
int wait_readable(std::span<const int> fds, clock::time_point deadline);

}  // namespace skippy::transport
