#include "http/http_parser.h"

#include <algorithm>
#include <limits>

namespace skippy::http {
namespace {

constexpr std::string_view crlf = "\r\n";

// RFC 9110 §5.6.2: token characters.
bool is_tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

// A field value's characters: visible ASCII, obs-text, space and tab (no controls).
bool is_field_value(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c == '\t' || c >= 0x20 ? c != 0x7f : false;
    });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char & c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

bool iequals(std::string_view a, std::string_view b) { return a.size() == b.size() && lower(a) == lower(b); }

// Calls f(element) for each element of a comma-separated list (RFC 9110 §5.6.1),
// skipping empty ones.
template <typename F>
void for_each_list_element(std::string_view list, F && f) {
    while (!list.empty()) {
        const size_t comma = list.find(',');
        const std::string_view item = trim(list.substr(0, comma));
        if (!item.empty()) f(item);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The bytes before the first "\r\n" of `s`, or npos.
size_t line_end(std::string_view s, size_t from = 0) { return s.find(crlf, from); }

// A bare CR or LF anywhere in `s` (every CR must start a CRLF, every LF end one).
bool has_bare_cr_or_lf(std::string_view s) {
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\r' && (i + 1 >= s.size() || s[i + 1] != '\n')) return true;
        if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) return true;
    }
    return false;
}

}  // namespace

const std::string * http_request::header(std::string_view name) const {
    for (const auto & [n, v] : headers) {
        if (n == name) return &v;
    }
    return nullptr;
}

bool percent_decode(std::string_view in, std::string & out) {
    out.clear();
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '%') {
            out += in[i];
            continue;
        }
        if (i + 2 >= in.size()) return false;
        const int hi = hex_value(in[i + 1]);
        const int lo = hex_value(in[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return true;
}

request_parser::request_parser(http_limits limits) : limits_(limits) {}

void request_parser::reset() {
    state_ = parse_state::reading_head;
    request_ = http_request{};
    error_ = parse_error{};
    pending_.clear();
    bytes_fed_ = 0;
    body_expected_ = false;
    mode_ = body_mode::none;
    remaining_ = 0;
    trailer_bytes_ = 0;
}

size_t request_parser::fail(int http_status, std::string message, size_t consumed) {
    state_ = parse_state::failed;
    error_.http_status = http_status;
    error_.message = std::move(message);
    pending_.clear();
    return consumed;
}

size_t request_parser::feed(std::string_view data) {
    size_t used = 0;
    while (used < data.size() && state_ == parse_state::reading_head) {
        // Take at most one byte past the limit (to tell "at the limit" from "over it").
        const size_t kept = pending_.size();
        const size_t room = limits_.max_head_bytes + 1 - std::min(kept, limits_.max_head_bytes);
        const size_t take = std::min(data.size() - used, room);
        pending_.append(data.substr(used, take));
        // RFC 9112 §2.2: empty lines before a request line are ignored (some clients
        // send a CRLF after a POST body). Dropped as they come, so they count against
        // no limit and every split of the bytes sees the same head.
        size_t skipped = 0;
        while (pending_.compare(skipped, 2, crlf) == 0) skipped += 2;
        pending_.erase(0, skipped);
        // The terminator may straddle the bytes kept and the new ones.
        const size_t scan_from = kept >= skipped + 3 ? kept - skipped - 3 : 0;
        const size_t end = pending_.find("\r\n\r\n", scan_from);
        if (end == std::string::npos) {
            used += take;
            bytes_fed_ += take;
            // The request line is too long as soon as it passes the limit, whether its
            // end has arrived or not (so that any split of the bytes gives one answer).
            size_t first_line = line_end(pending_);
            if (first_line == std::string::npos) {
                // A last CR may be the start of the line's CRLF.
                first_line = pending_.size() - (!pending_.empty() && pending_.back() == '\r' ? 1 : 0);
            }
            if (first_line > limits_.max_request_line_bytes) {
                return fail(414, "the request line is longer than " + std::to_string(limits_.max_request_line_bytes) + " bytes",
                            used);
            }
            if (pending_.size() > limits_.max_head_bytes) {
                return fail(431, "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes", used);
            }
            continue;  // all taken (skipped empty lines may leave room for more)
        }
        const size_t head_bytes = end + 4;
        const size_t extra = pending_.size() - head_bytes;  // appended past the head: the body's
        used += take - extra;
        bytes_fed_ += take - extra;
        pending_.resize(head_bytes);
        // The checks in the order a byte-by-byte feed meets them: the request line's
        // length, then the head's, then its content.
        if (line_end(pending_) > limits_.max_request_line_bytes) {
            return fail(414, "the request line is longer than " + std::to_string(limits_.max_request_line_bytes) + " bytes",
                        used);
        }
        if (head_bytes > limits_.max_head_bytes) {
            return fail(431, "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes", used);
        }
        std::string head = std::move(pending_);
        pending_.clear();
        if (!parse_head(head)) return used;
    }
    while (used < data.size() && state_ == parse_state::reading_body) {
        const size_t n = feed_body(data.substr(used));
        used += n;
        bytes_fed_ += n;
        if (state_ == parse_state::failed) return used;
    }
    return used;
}

bool request_parser::parse_head(std::string_view head) {
    if (has_bare_cr_or_lf(head)) {
        fail(400, "the request head has a CR or LF that is not part of a CRLF line ending", 0);
        return false;
    }
    const size_t first = line_end(head);
    const std::string_view line = head.substr(0, first);
    if (line.size() > limits_.max_request_line_bytes) {
        fail(414, "the request line is longer than " + std::to_string(limits_.max_request_line_bytes) + " bytes", 0);
        return false;
    }

    // request-line = method SP request-target SP HTTP-version
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
        fail(400, "the request line is not 'METHOD TARGET HTTP/1.x'", 0);
        return false;
    }
    const std::string_view method = line.substr(0, sp1);
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    if (!is_token(method)) {
        fail(400, "the request method is not a token", 0);
        return false;
    }
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
        version[5] > '9' || version[7] < '0' || version[7] > '9') {
        fail(400, "the request line does not end in an HTTP version", 0);
        return false;
    }
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
        fail(505, "HTTP version " + std::string(version.substr(5)) + " is not supported (1.0 and 1.1 are)", 0);
        return false;
    }
    request_.method = std::string(method);
    request_.target = std::string(target);
    request_.version_minor = version[7] - '0';
    const bool visible = std::all_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) != 0x7f;
    });
    std::string_view path = target;
    if (visible && target.substr(0, 7) == "http://") {  // absolute-form (RFC 9112 §3.2.2)
        const size_t slash = target.find('/', 7);
        path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    }
    if (!visible || target.empty() || (path.front() != '/' && !(target == "*" && method == "OPTIONS"))) {
        fail(400, "the request target is not a path", 0);
        return false;
    }
    path = path.substr(0, path.find_first_of("?#"));
    if (!percent_decode(path, request_.path)) {
        fail(400, "the request path has a malformed percent escape", 0);
        return false;
    }

    // Header lines up to the empty line that ends the head.
    bool has_length = false;
    uint64_t content_length = 0;
    std::vector<std::string> codings;
    std::string_view rest = head.substr(first + 2);
    while (true) {
        const size_t end = line_end(rest);
        const std::string_view field = rest.substr(0, end);
        rest.remove_prefix(end + 2);
        if (field.empty()) break;
        if (request_.headers.size() >= limits_.max_headers) {
            fail(431, "the request has more than " + std::to_string(limits_.max_headers) + " header lines", 0);
            return false;
        }
        if (field.front() == ' ' || field.front() == '\t') {
            fail(400, "obsolete line folding in a header is not accepted", 0);
            return false;
        }
        const size_t colon = field.find(':');
        if (colon == std::string_view::npos || !is_token(field.substr(0, colon))) {
            fail(400, "a header line is not 'name: value'", 0);
            return false;
        }
        const std::string name = lower(field.substr(0, colon));
        const std::string_view value = trim(field.substr(colon + 1));
        if (!is_field_value(value)) {
            fail(400, "header '" + name + "' has a control character", 0);
            return false;
        }
        if (name == "content-length") {
            if (has_length) {
                fail(400, "Content-Length is given more than once", 0);
                return false;
            }
            has_length = true;
            if (value.empty() || value.size() > 19 ||
                !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
                fail(400, "Content-Length '" + std::string(value) + "' is not a non-negative decimal number", 0);
                return false;
            }
            for (char c : value) content_length = content_length * 10 + static_cast<uint64_t>(c - '0');
        } else if (name == "transfer-encoding") {
            for_each_list_element(value, [&](std::string_view coding) { codings.push_back(lower(coding)); });
        } else if (name == "connection") {
            for_each_list_element(value, [&](std::string_view option) {
                if (iequals(option, "close")) request_.keep_alive = false;
            });
        } else if (name == "expect") {
            if (!iequals(value, "100-continue")) {
                fail(417, "Expect '" + std::string(value) + "' is not supported (only 100-continue)", 0);
                return false;
            }
            request_.expect_continue = request_.version_minor >= 1;
        }
        request_.headers.emplace_back(name, std::string(value));
    }

    if (request_.version_minor == 0) {
        // HTTP/1.0 closes after each response unless the client asks to keep it open.
        bool keep = false;
        if (const std::string * c = request_.header("connection")) {
            for_each_list_element(*c, [&](std::string_view option) { keep = keep || iequals(option, "keep-alive"); });
        }
        request_.keep_alive = request_.keep_alive && keep;
    }
    if (!codings.empty() || request_.header("transfer-encoding")) {
        if (has_length) {
            fail(400, "Transfer-Encoding and Content-Length together are ambiguous", 0);
            return false;
        }
        if (request_.version_minor == 0) {
            fail(400, "Transfer-Encoding is not defined for HTTP/1.0", 0);
            return false;
        }
        for (const std::string & c : codings) {
            if (c != "chunked") {
                fail(501, "transfer coding '" + c + "' is not supported (only chunked)", 0);
                return false;
            }
        }
        if (codings.size() != 1) {
            fail(400, "Transfer-Encoding must be exactly 'chunked'", 0);
            return false;
        }
        request_.chunked = true;
        body_expected_ = true;
        mode_ = body_mode::chunk_size;
        state_ = parse_state::reading_body;
        return true;
    }
    if (content_length > limits_.max_body_bytes) {
        fail(413, "the request body (" + std::to_string(content_length) + " bytes) is larger than the limit of " +
                      std::to_string(limits_.max_body_bytes) + " bytes",
             0);
        return false;
    }
    if (content_length == 0) {
        state_ = parse_state::complete;
        return true;
    }
    body_expected_ = true;
    mode_ = body_mode::length;
    remaining_ = content_length;
    state_ = parse_state::reading_body;
    return true;
}

size_t request_parser::feed_body(std::string_view data) {
    switch (mode_) {
        case body_mode::length:
        case body_mode::chunk_data: {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size()));
            request_.body.append(data.substr(0, n));
            remaining_ -= n;
            if (remaining_ == 0) {
                if (mode_ == body_mode::length) {
                    state_ = parse_state::complete;
                } else {
                    mode_ = body_mode::chunk_data_end;
                }
            }
            return n;
        }
        case body_mode::chunk_data_end: {
            // The CRLF after a chunk's data, possibly split across feeds.
            const size_t n = std::min<size_t>(2 - pending_.size(), data.size());
            pending_.append(data.substr(0, n));
            if (pending_.size() < 2) return n;
            if (pending_ != crlf) return fail(400, "a chunk's data is not followed by CRLF", n);
            pending_.clear();
            mode_ = body_mode::chunk_size;
            return n;
        }
        case body_mode::chunk_size:
        case body_mode::trailers: {
            // One line: a chunk size (with extensions) or a trailer field.
            const size_t scan_from = pending_.empty() ? 0 : pending_.size() - 1;
            const size_t limit = mode_ == body_mode::chunk_size ? limits_.max_chunk_line_bytes
                                                                : limits_.max_head_bytes - std::min(trailer_bytes_, limits_.max_head_bytes);
            const size_t take = std::min(data.size(), limit + 2 - std::min(pending_.size(), limit + 2));
            pending_.append(data.substr(0, take));
            const size_t end = pending_.find(crlf, scan_from);
            if (end == std::string::npos) {
                if (pending_.size() > limit + 1) {
                    return mode_ == body_mode::chunk_size ? fail(400, "a chunk-size line is too long", take)
                                                          : fail(431, "the chunked body's trailers are too large", take);
                }
                return take;
            }
            const size_t used = take - (pending_.size() - end - 2);
            const std::string line = pending_.substr(0, end);
            pending_.clear();
            if (line.find_first_of("\r\n") != std::string::npos) return fail(400, "a bare CR or LF in the chunked body", used);
            if (mode_ == body_mode::trailers) {
                trailer_bytes_ += line.size() + 2;
                if (line.empty()) {
                    state_ = parse_state::complete;
                } else if (line.front() == ' ' || line.front() == '\t' || line.find(':') == std::string::npos ||
                           !is_token(std::string_view(line).substr(0, line.find(':')))) {
                    return fail(400, "a trailer line is not 'name: value'", used);
                }
                return used;  // trailers are read and dropped
            }
            // chunk-size [ chunk-ext ]: hex digits, then nothing or ";..." (ignored).
            size_t digits = 0;
            uint64_t size = 0;
            while (digits < line.size() && hex_value(line[digits]) >= 0) {
                if (size > (std::numeric_limits<uint64_t>::max() >> 4)) return fail(400, "a chunk size overflows", used);
                size = size * 16 + static_cast<uint64_t>(hex_value(line[digits]));
                ++digits;
            }
            const std::string_view ext = trim(std::string_view(line).substr(digits));
            if (digits == 0 || (!ext.empty() && ext.front() != ';') || !is_field_value(ext)) {
                return fail(400, "a chunk size is not a hexadecimal number", used);
            }
            if (size > limits_.max_body_bytes - request_.body.size()) {
                return fail(413, "the chunked request body is larger than the limit of " +
                                     std::to_string(limits_.max_body_bytes) + " bytes",
                            used);
            }
            if (size == 0) {
                mode_ = body_mode::trailers;
            } else {
                mode_ = body_mode::chunk_data;
                remaining_ = size;
            }
            return used;
        }
        case body_mode::none: break;
    }
    state_ = parse_state::complete;
    return 0;
}

}  // namespace skippy::http
