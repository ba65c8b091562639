// Is the client of a request still there?
//
// cpp-httplib 0.11 (Debian 12) does not hand a request handler its socket, and only
// notices a departed client when a write fails. A non-streaming request writes nothing
// until it is done, so to cancel its generation when the client leaves we find the
// socket ourselves: the connected TCP socket of this process whose local and peer
// addresses are the request's (a 4-tuple names one live connection). Its fd stays ours
// while the handler runs: httplib closes it only after the handler returns.
#pragma once

#include <string>

namespace skippy::http {

class client_connection {
public:
    // Finds the socket of the connection local_addr:local_port ↔ remote_addr:remote_port
    // (numeric addresses as httplib reports them). When none matches (another platform,
    // or /proc not mounted) the probe stays unknown and gone() is always false.
    static client_connection find(const std::string & local_addr, int local_port, const std::string & remote_addr,
                                  int remote_port);

    bool known() const { return fd_ >= 0; }

    // True when the peer closed or reset the connection: the socket is readable and a
    // peek reads end-of-stream or an error. Never blocks. Pending request bytes (a
    // pipelined next request) count as alive.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace skippy::http
