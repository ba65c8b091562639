// A pure, incremental HTTP/1.1 request parser (RFC 9112), without sockets.
//
// The event loop (event_loop.h) feeds it the bytes of one connection as they arrive;
// it parses the request line, the headers and the body (Content-Length or chunked),
// enforcing every limit while it reads, so that no input makes it hold more than
// max_head_bytes of head plus max_body_bytes of body. It stops at the end of one
// request: bytes after it (a pipelined next request) are left to the caller, who
// reset()s the parser and feeds them again.
//
//   feed() ──▶ reading_head ──▶ reading_body ──▶ complete
//                   │                 │
//                   └────────▶ failed ◀┘        (a status: 400, 413, 414, 431, 501, 505)
//
// What it refuses (the status, then the connection closes):
//   400  a malformed request line, header line or chunk; a header name with spaces or
//        no colon; obsolete line folding; a bare LF; a Content-Length that is not
//        digits (negative, signed, overflowing) or given twice; Transfer-Encoding
//        together with Content-Length; Transfer-Encoding on HTTP/1.0; a target that is
//        not an origin-form path (or "*")
//   413  a body larger than max_body_bytes (a Content-Length at once; a chunked body as
//        soon as its chunk sizes add up past the limit, before their data is read)
//   414  a request line longer than max_request_line_bytes
//   417  an Expect other than 100-continue
//   431  a head over max_head_bytes, or more than max_headers header lines
//   501  a transfer coding other than chunked
//   505  an HTTP version other than 1.0 and 1.1
//
// Not thread-safe; one parser per connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::http {

struct http_limits {
    size_t max_request_line_bytes = 8 << 10;  // method, target and version
    size_t max_head_bytes = 16 << 10;         // request line + header lines (+ a chunked body's trailers)
    size_t max_headers = 64;                  // header lines
    size_t max_body_bytes = 8u << 20;         // decoded body (chunk data only)
    size_t max_chunk_line_bytes = 1024;       // a chunk-size line with its extensions
};

struct http_request {
    std::string method;         // as sent, e.g. "GET" (methods are case-sensitive)
    std::string target;         // as sent, e.g. "/v1/models?x=1"
    std::string path;           // the target's path, percent-decoded ("/v1/models")
    int         version_minor = 1;  // HTTP/1.<minor>: 0 or 1
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
    std::string body;           // decoded (chunks joined)
    bool        keep_alive = true;       // the client lets the connection stay open after the response
    bool        expect_continue = false; // Expect: 100-continue
    bool        chunked = false;         // the body came with Transfer-Encoding: chunked

    // The value of the first header `name` (lower-case), or nullptr.
    const std::string * header(std::string_view name) const;
};

enum class parse_state { reading_head, reading_body, complete, failed };

struct parse_error {
    int         http_status = 400;
    std::string message;  // for the client: what was wrong
};

class request_parser {
public:
    explicit request_parser(http_limits limits = {});

    // Consumes a prefix of `data` (the bytes that follow those fed before) and returns
    // its length: all of it while the request is incomplete, less once it completes
    // (the rest is the next request's) or fails (nothing after the failure is read).
    // REQUIRES: state() is reading_head or reading_body.
    size_t feed(std::string_view data);

    parse_state state() const { return state_; }
    // The head is parsed (the body, if any, may still be on its way): request() has
    // its method, target, headers and flags. Stays true once complete.
    bool head_done() const { return state_ == parse_state::reading_body || state_ == parse_state::complete; }
    // A body is still expected (Content-Length > 0 or chunked) after the head: what an
    // Expect: 100-continue waits for. REQUIRES: head_done().
    bool expects_body() const { return body_expected_; }
    // Bytes of the current request fed so far (head and body as sent).
    size_t bytes_fed() const { return bytes_fed_; }
    // Body bytes received so far (chunk data, or Content-Length bytes).
    size_t body_bytes() const { return request_.body.size(); }

    // REQUIRES: head_done(). The body is whole only when state() is complete.
    const http_request & request() const { return request_; }
    http_request take_request() { return std::move(request_); }
    // REQUIRES: state() == failed.
    const parse_error & error() const { return error_; }

    // Forgets the request; the next feed() starts a new one.
    void reset();

private:
    enum class body_mode { none, length, chunk_size, chunk_data, chunk_data_end, trailers };

    size_t fail(int http_status, std::string message, size_t consumed);
    bool   parse_head(std::string_view head);  // false: failed (error_ set)
    // One step of the body; returns bytes consumed from `data` (0 when it needs more).
    size_t feed_body(std::string_view data);

    http_limits  limits_;
    parse_state  state_ = parse_state::reading_head;
    http_request request_;
    parse_error  error_;
    std::string  pending_;       // head bytes (or one chunk line / trailer line) not yet complete
    size_t       bytes_fed_ = 0;
    bool         body_expected_ = false;
    body_mode    mode_ = body_mode::none;
    uint64_t     remaining_ = 0; // Content-Length bytes, or bytes of the current chunk, left
    size_t       trailer_bytes_ = 0;
};

// Percent-decodes a path ("%2F" -> "/"); false when an escape is malformed.
bool percent_decode(std::string_view in, std::string & out);

}  // namespace skippy::http
