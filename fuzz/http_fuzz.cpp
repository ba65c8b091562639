// libFuzzer target for the HTTP request parser (src/http/http_parser.h).
//
// The first input byte seeds how the rest is cut into pieces; the rest is a
// connection's bytes, parsed request after request (pipelining) until one fails or the
// bytes run out, with small limits so that every limit check is reachable. Beyond "no
// crash, no sanitizer report":
//   - fed whole or fed in pieces, the parser gives the same requests and the same end
//     (a socket may deliver any split),
//   - every limit holds for what it returns, and a refusal has one of the documented
//     statuses,
//   - feed() never consumes more than it is given, and always consumes something
//     while it still reads.
#include "http/http_parser.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace skippy::http;

#define FUZZ_CHECK(cond)                                                                               \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            std::fprintf(stderr, "http_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                              \
        }                                                                                              \
    } while (0)

http_limits small_limits() {
    http_limits l;
    l.max_request_line_bytes = 96;
    l.max_head_bytes = 256;
    l.max_headers = 6;
    l.max_body_bytes = 200;
    l.max_chunk_line_bytes = 24;
    return l;
}

// What parsing one connection's bytes gave: each request in a canonical text form,
// then how it ended.
struct trace {
    std::vector<std::string> requests;
    std::string              end;
    bool operator==(const trace &) const = default;
};

std::string describe(const http_request & r) {
    std::string s = r.method + ' ' + r.target + ' ' + r.path + ' ' + std::to_string(r.version_minor) + ' ' +
                    (r.keep_alive ? 'k' : '-') + (r.expect_continue ? 'e' : '-') + (r.chunked ? 'c' : '-') + '\n';
    for (const auto & [n, v] : r.headers) s += n + ": " + v + '\n';
    return s + std::to_string(r.body.size()) + ':' + r.body;
}

void check_request(const http_request & r, const http_limits & l) {
    FUZZ_CHECK(r.body.size() <= l.max_body_bytes);
    FUZZ_CHECK(r.headers.size() <= l.max_headers);
    FUZZ_CHECK(r.version_minor == 0 || r.version_minor == 1);
    FUZZ_CHECK(!r.method.empty() && r.target.size() <= l.max_request_line_bytes);
    FUZZ_CHECK(r.target == "*" || (!r.path.empty() && r.path[0] == '/'));
    FUZZ_CHECK(!r.chunked || r.header("content-length") == nullptr);
    for (const auto & [n, v] : r.headers) {
        FUZZ_CHECK(!n.empty());
        for (char c : n) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
    }
}

// Parses `in` with pieces of the sizes `next_piece` gives (0: everything left).
template <typename F>
trace parse_all(std::string_view in, const http_limits & l, F && next_piece) {
    trace t;
    request_parser p(l);
    size_t at = 0;
    while (at < in.size()) {
        const size_t want = next_piece();
        const std::string_view piece = in.substr(at, want == 0 ? std::string_view::npos : want);
        const size_t used = p.feed(piece);
        FUZZ_CHECK(used <= piece.size());
        at += used;
        if (p.state() == parse_state::failed) {
            const int st = p.error().http_status;
            FUZZ_CHECK(st == 400 || st == 413 || st == 414 || st == 417 || st == 431 || st == 501 || st == 505);
            FUZZ_CHECK(!p.error().message.empty());
            t.end = "failed " + std::to_string(st);
            return t;
        }
        if (p.state() == parse_state::complete) {
            check_request(p.request(), l);
            t.requests.push_back(describe(p.request()));
            p.reset();
            continue;
        }
        FUZZ_CHECK(used == piece.size());  // still reading: it took everything
    }
    t.end = p.state() == parse_state::reading_head ? (p.bytes_fed() == 0 ? "clean" : "in head") : "in body";
    return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size < 1) return 0;
    uint32_t seed = data[0];
    const std::string_view in(reinterpret_cast<const char *>(data + 1), size - 1);
    for (const http_limits & l : {small_limits(), http_limits{}}) {
        const trace whole = parse_all(in, l, [] { return size_t(0); });
        uint32_t state = seed * 2654435761u + 1;
        const trace pieces = parse_all(in, l, [&] {
            state = state * 1103515245u + 12345u;
            return size_t(1 + (state >> 16) % 19);
        });
        FUZZ_CHECK(whole == pieces);
    }
    return 0;
}
