// One epoll event loop that owns every client socket of an HTTP server.
//
// It accepts connections, reads each request head and body with deadlines and limits
// (http_parser.h parses them), hands each complete request to a handler, and writes the
// responses back. No thread ever blocks on a client: a connection that trickles its
// head, idles, or stops reading its response costs a file descriptor and a few
// hundred bytes, never a thread, so a well-behaved client's latency does not depend on
// how many bad ones are connected.
//
//   accept ─▶ idle ─▶ head ─▶ body ─▶ dispatched ─▶ (response written) ─▶ idle (keep-alive)
//               │       │       │          │                     └────▶ closing ─▶ closed
//               └───────┴───────┴──────────┴─▶ closed (deadline, error, peer gone)
//
// Deadlines (loop_options): a connection with no request in progress is closed after
// idle_timeout_s; a request head must be complete within head_timeout_s of its first
// byte, and a body must keep arriving at min_body_bytes_per_s after a grace of
// body_timeout_s (both answered 408 and closed); a response the client does not read
// for write_timeout_s closes the connection. At most max_connections are open: a new
// one beyond the cap first sheds an idle connection, then one whose head has been
// trickling in for over a second, and when neither exists it is answered 503 and
// closed. Pipelined requests are answered one at a time, in order.
//
// The handler runs on the loop thread and must not block: it answers at once through
// the request's response_channel, or hands the channel to another thread, which
// answers later (a whole response, or a stream of bytes with bounded buffering). The
// channel tells that thread when the client has gone.
#pragma once

#include "base/status.h"
#include "http/http_parser.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::http {

struct loop_options {
    std::string host = "127.0.0.1";
    int32_t     port = 0;                    // 0: the system picks one (see event_loop::port())
    int32_t     max_connections = 4096;      // open client connections; beyond: shed, or 503
    double      idle_timeout_s = 5;          // no request in progress (before the first, between keep-alive requests)
    double      head_timeout_s = 10;         // from a request's first byte to the end of its head
    double      body_timeout_s = 10;         // grace for the body, on top of its bytes / min_body_bytes_per_s
    double      min_body_bytes_per_s = 64 << 10;  // slowest body accepted after the grace
    double      write_timeout_s = 60;        // longest wait for a client to read any pending response byte
    size_t      max_output_bytes = 1 << 20;  // response bytes buffered per connection before a stream writer waits
    http_limits limits;                      // head and body sizes (http_parser.h)
};

// A whole response. Content-Length, Connection and the status line are added.
struct http_response {
    int         status = 200;
    std::string content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers (e.g. Allow)
    std::string body;
};

// The way back to the client of one request. Thread-safe; shared by the loop and the
// thread that answers. Exactly one of respond() or begin_stream() ... end_stream()
// answers a request; calls after that, or once the client is gone, do nothing.
class response_channel {
public:
    virtual ~response_channel() = default;

    // Queues a whole response.
    virtual void respond(http_response response) = 0;
    // Starts a streamed response (chunked on HTTP/1.1; on HTTP/1.0 the body ends with
    // the connection). `head.body` is ignored.
    virtual void begin_stream(const http_response & head) = 0;
    // Queues bytes of the stream. Blocks while the connection has max_output_bytes
    // unwritten (a slow reader), so memory stays bounded. False once the client is
    // gone (closed, reset, half-closed, or not reading within write_timeout_s) or the
    // loop is shutting down: the caller should stop producing.
    virtual bool write(std::string_view bytes) = 0;
    // Ends the stream; the connection then serves its next request or closes.
    virtual void end_stream() = 0;
    // Ends the stream without its end marker and closes the connection once the bytes
    // queued so far are written: the client sees a cut-off stream, not a complete one.
    virtual void abort_stream() = 0;
    // The client closed or reset the connection (or shut down its sending side). Never blocks.
    virtual bool gone() const = 0;
};
using channel_ptr = std::shared_ptr<response_channel>;

// Runs on the loop thread for every complete request; must not block.
using request_handler = std::function<void(http_request request, channel_ptr channel)>;
// Called for every response the loop sends (the request's path, "" when the head did
// not parse, and the status), on whichever thread queues it. For metrics.
using response_observer = std::function<void(const std::string & path, int status)>;

class event_loop {
public:
    // REQUIRES: handler is set; options.max_connections >= 1.
    event_loop(loop_options options, request_handler handler, response_observer observer = {});
    ~event_loop();  // stop()s
    event_loop(const event_loop &) = delete;
    event_loop & operator=(const event_loop &) = delete;

    // Binds host:port and listens. Raises this process's open-file soft limit to fit
    // max_connections where the hard limit allows (else lowers the cap, with a
    // warning). unavailable when the address cannot be bound.
    status bind();
    // REQUIRES: bind() succeeded.
    int32_t port() const;
    // The connection cap in force (max_connections, or less when file descriptors are short).
    int32_t max_connections() const;

    // Serves on the calling thread until stop(). REQUIRES: bind() succeeded; once.
    void run();

    // From now on every response closes its connection, and stream writers blocked on
    // a slow reader give up (write() returns false). Thread-safe.
    void begin_drain();
    // Stops accepting, writes what is queued (for at most ~2 s), closes every
    // connection and returns once run() has returned (at once when run() never
    // started). Thread-safe, idempotent. Not async-signal-safe.
    void stop();

    // Open client connections right now (tests, metrics). Thread-safe.
    int32_t n_open() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// The OpenAI error body of a status the loop answers itself (400, 408, 413, 414,
// 417, 431, 501, 503, 505) as a whole response.
http_response error_response(int http_status, std::string message);

}  // namespace skippy::http
