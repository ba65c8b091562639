#include "transport/socket.h"

#include "transport/socket_detail.h"

#include <arpa/inet.h>
#include <algorithm>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

namespace skippy::transport {

namespace detail {

status sys_error(const std::string & what) {
    return make_error(error_code::unavailable, what + ": " + std::strerror(errno));
}

int poll_timeout_ms(clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return 0;
    return left > 1000000 ? 1000000 : static_cast<int>(left);
}

status closed_by_peer(size_t done, size_t want) {
    if (done == 0) return make_error(error_code::peer_closed, "connection closed by the peer");
    return make_error(error_code::peer_closed,
                      "connection closed by the peer after " + std::to_string(done) + " of " + std::to_string(want) + " bytes");
}

}  // namespace detail

namespace {

using detail::poll_timeout_ms;
using detail::sys_error;

result<addrinfo *> resolve(const endpoint & ep, bool passive) {
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo * res = nullptr;
    const std::string port = std::to_string(ep.port);
    int rc = getaddrinfo(ep.host.empty() ? nullptr : ep.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || !res) {
        return make_error(error_code::invalid_argument, "cannot resolve " + ep.to_string() + ": " + gai_strerror(rc));
    }
    return res;
}

}  // namespace

result<endpoint> endpoint::parse(const std::string & text) {
    endpoint ep;
    std::string port;
    if (!text.empty() && text[0] == '[') {
        const size_t close = text.find(']');
        if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return make_error(error_code::invalid_argument, "endpoint '" + text + "' is not [host]:port");
        }
        ep.host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        const size_t colon = text.rfind(':');
        if (colon == std::string::npos || colon == 0) {
            return make_error(error_code::invalid_argument, "endpoint '" + text + "' is not host:port");
        }
        ep.host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(port) > 65535) {
        return make_error(error_code::invalid_argument, "endpoint '" + text + "' has a bad port");
    }
    ep.port = static_cast<uint16_t>(std::stoul(port));
    return ep;
}

std::string endpoint::to_string() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

tcp_socket & tcp_socket::operator=(tcp_socket && o) noexcept {
    if (this != &o) {
        close();
        fd_ = o.fd_;
        tls_ = std::move(o.tls_);
        o.fd_ = -1;
    }
    return *this;
}

void tcp_socket::close() {
    tls_.reset();  // before the fd: OpenSSL may still refer to it
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

void tcp_socket::shutdown() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string tcp_socket::peer_host() const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::getpeername(fd_, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return {};
    char host[NI_MAXHOST];
    if (::getnameinfo(reinterpret_cast<sockaddr *>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return {};
    return host;
}

status tcp_socket::write_all(std::span<const uint8_t> data, clock::time_point deadline) {
    if (tls_) return tls_write_all(data, deadline);
    size_t done = 0;
    while (done < data.size()) {
        // Non-blocking even on a blocking socket: a full send buffer waits in poll
        // below, where the deadline holds.
        ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (clock::now() >= deadline) {
                    return make_error(error_code::timed_out, "send timed out: the peer took " + std::to_string(done) + " of " +
                                                                 std::to_string(data.size()) + " bytes");
                }
                pollfd p{fd_, POLLOUT, 0};
                const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
                ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left_ms + 1, 1, 1000)));
                continue;
            }
            return sys_error("send failed");
        }
        done += static_cast<size_t>(n);
    }
    return status::ok();
}

status tcp_socket::read_exact(std::span<uint8_t> out, clock::time_point deadline, size_t * n_read) {
    if (tls_) return tls_read_exact(out, deadline, n_read);
    size_t done = 0;
    auto finish = [&](status st) {
        if (n_read) *n_read = done;
        return st;
    };
    while (done < out.size()) {
        // Try the read first: on a busy link the bytes are usually there already, and
        // a poll per read would add a system call to every frame of every token.
        ssize_t n = ::recv(fd_, out.data() + done, out.size() - done, MSG_DONTWAIT);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n == 0) return finish(detail::closed_by_peer(done, out.size()));
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return finish(sys_error("recv failed"));
        pollfd p{fd_, POLLIN, 0};
        int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
        if (rc < 0) {
            if (errno == EINTR) continue;
            return finish(sys_error("poll failed"));
        }
        if (rc == 0 && clock::now() >= deadline) return finish(make_error(error_code::timed_out, "timed out waiting for the peer"));
    }
    return finish(status::ok());
}

result<tcp_socket> dial(const endpoint & ep, std::chrono::milliseconds timeout) {
    SKIPPY_ASSIGN_OR_RETURN(addrinfo * res, resolve(ep, false));
    const auto deadline = clock::now() + timeout;
    status last = make_error(error_code::unavailable, "cannot connect to " + ep.to_string());
    for (addrinfo * ai = res; ai; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        tcp_socket s(fd);
        int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno != EINPROGRESS) {
            last = make_error(error_code::unavailable, "cannot connect to " + ep.to_string() + ": " + std::strerror(errno));
            continue;
        }
        if (rc != 0) {
            pollfd p{fd, POLLOUT, 0};
            rc = ::poll(&p, 1, poll_timeout_ms(deadline));
            int err = 0;
            socklen_t len = sizeof(err);
            if (rc <= 0) {
                last = make_error(error_code::timed_out, "timed out connecting to " + ep.to_string());
                continue;
            }
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                last = make_error(error_code::unavailable, "cannot connect to " + ep.to_string() + ": " + std::strerror(err));
                continue;
            }
        }
        // Back to blocking mode: reads wait with poll and a deadline anyway.
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        freeaddrinfo(res);
        return s;
    }
    freeaddrinfo(res);
    return last;
}

tcp_listener & tcp_listener::operator=(tcp_listener && o) noexcept {
    if (this != &o) {
        close();
        fd_ = o.fd_.exchange(-1);
        port_ = o.port_;
    }
    return *this;
}

result<tcp_listener> tcp_listener::listen(const endpoint & ep) {
    SKIPPY_ASSIGN_OR_RETURN(addrinfo * res, resolve(ep, true));
    status last = make_error(error_code::unavailable, "cannot listen on " + ep.to_string());
    for (addrinfo * ai = res; ai; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
            last = make_error(error_code::unavailable, "cannot listen on " + ep.to_string() + ": " + std::strerror(errno));
            ::close(fd);
            continue;
        }
        sockaddr_storage addr {};
        socklen_t len = sizeof(addr);
        getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
        tcp_listener l;
        l.fd_ = fd;
        l.port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in *>(&addr)->sin_port);
        freeaddrinfo(res);
        return l;
    }
    freeaddrinfo(res);
    return last;
}

result<tcp_socket> tcp_listener::accept(std::chrono::milliseconds timeout) {
    const int fd = fd_;
    if (fd < 0) return make_error(error_code::unavailable, "listener closed");
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc <= 0 || !(p.revents & POLLIN)) return make_error(error_code::unavailable, "no connection");
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return sys_error("accept failed");
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return tcp_socket(c);
}

void tcp_listener::close() {
    const int fd = fd_.exchange(-1);
    if (fd >= 0) {
        ::shutdown(fd, SHUT_RDWR);
        ::close(fd);
    }
}

int wait_readable(std::span<const int> fds, clock::time_point deadline) {
    std::vector<pollfd> p;
    for (int fd : fds) p.push_back({fd, POLLIN, 0});
    while (true) {
        int rc = ::poll(p.data(), p.size(), poll_timeout_ms(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) {
            if (clock::now() >= deadline) return -1;
            continue;
        }
        for (size_t i = 0; i < p.size(); ++i) {
            if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) return static_cast<int>(i);
        }
    }
}

}  // namespace skippy::transport
