#include "http/client_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace skippy::http {
namespace {

// The numeric host and port of a socket address, as httplib formats them (getnameinfo).
bool numeric_address(const sockaddr_storage & addr, socklen_t len, std::string & host, int & port) {
    char buf[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<const sockaddr *>(&addr), len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) {
        return false;
    }
    host = buf;
    if (addr.ss_family == AF_INET) {
        port = ntohs(reinterpret_cast<const sockaddr_in *>(&addr)->sin_port);
    } else if (addr.ss_family == AF_INET6) {
        port = ntohs(reinterpret_cast<const sockaddr_in6 *>(&addr)->sin6_port);
    } else {
        return false;
    }
    return true;
}

bool matches(int fd, const std::string & local_addr, int local_port, const std::string & remote_addr, int remote_port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return false;
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
    std::string host;
    int port = -1;
    if (!numeric_address(addr, len, host, port) || port != local_port || host != local_addr) return false;
    len = sizeof(addr);
    if (getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return false;
    return numeric_address(addr, len, host, port) && port == remote_port && host == remote_addr;
}

}  // namespace

client_connection client_connection::find(const std::string & local_addr, int local_port, const std::string & remote_addr,
                                          int remote_port) {
    client_connection c;
    DIR * dir = opendir("/proc/self/fd");
    if (!dir) return c;
    while (dirent * e = readdir(dir)) {
        char * end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        if (matches(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
            c.fd_ = static_cast<int>(fd);
            break;
        }
    }
    closedir(dir);
    return c;
}

bool client_connection::gone() const {
    if (fd_ < 0) return false;
    pollfd p{};
    p.fd = fd_;
    p.events = POLLIN | POLLRDHUP;
    if (poll(&p, 1, 0) <= 0) return false;  // nothing happened on the socket
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    char byte;
    const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // the client sent more bytes: still there
    if (n == 0) return true;  // orderly shutdown
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace skippy::http
