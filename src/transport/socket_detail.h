// Internals shared by socket.cpp and tls.cpp (not part of the transport's API): the
// plain and the TLS paths of tcp_socket report the same conditions the same way.
#pragma once

#include "base/status.h"
#include "transport/socket.h"

#include <cstddef>

namespace skippy::transport::detail {

// Milliseconds until `deadline` for poll(): 0 when it has passed, capped at 1000 s.
int poll_timeout_ms(clock::time_point deadline);

// The peer closed the connection with `done` of `want` bytes of a read in.
status closed_by_peer(size_t done, size_t want);

// A failed system call (`what`: "recv failed"), with errno's text.
status sys_error(const std::string & what);

}  // namespace skippy::transport::detail
