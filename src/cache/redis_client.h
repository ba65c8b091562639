// A minimal Redis client for the shared tier (hiredis for the protocol): pipelined
// commands with a deadline on connecting and on every exchange, so a slow, dead or
// babbling server costs at most the deadline, never a hung request.
//
// Replies are checked as they are parsed: only integers, strings, nil, status and
// error replies are accepted (the tier sends nothing that answers with an array), so a
// garbage array header can never make the client allocate for it.
//
// Not thread-safe: one connection is used by one thread at a time (redis_tier keeps a
// small pool).
#pragma once

#include "base/status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;

namespace skippy::cache {

// redis://[:password@]host[:port][/db]; port 6379 and db 0 by default.
struct redis_url {
    std::string host;
    int         port = 6379;
    int         db = 0;
    std::string password;
};
// invalid_argument naming what is wrong.
result<redis_url> parse_redis_url(std::string_view text);

struct redis_value {
    enum class kind : uint8_t { nil, integer, string, status, error };
    kind        type = kind::nil;
    long long   integer = 0;
    std::string str;  // string, status and error replies
};

// One command: its arguments, binary-safe (e.g. {"SET", key, value}).
using redis_command = std::vector<std::span<const uint8_t>>;

class redis_connection {
public:
    using clock_type = std::chrono::steady_clock;

    // Connects (and AUTH / SELECT when the URL says so) within timeout_ms.
    // unavailable when the server cannot be reached in time or refuses.
    static result<std::unique_ptr<redis_connection>> connect(const redis_url & url, int32_t timeout_ms);
    ~redis_connection();
    redis_connection(const redis_connection &) = delete;
    redis_connection & operator=(const redis_connection &) = delete;

    // Sends the commands in one pipeline and reads one reply per command, all before
    // `deadline`. unavailable on a timeout or a closed connection, invalid_data on a
    // protocol error or an unexpected reply shape; after any error the connection is
    // unusable (broken() is true).
    result<std::vector<redis_value>> run(std::span<const redis_command> commands, clock_type::time_point deadline);

    bool broken() const { return broken_; }
    // The last failure was a deadline (not a refusal or garbage).
    bool timed_out() const { return timed_out_; }

private:
    explicit redis_connection(redisContext * c) : ctx_(c) {}
    status fail(error_code code, const std::string & what);

    redisContext * ctx_ = nullptr;
    bool           broken_ = false;
    bool           timed_out_ = false;
};

}  // namespace skippy::cache
