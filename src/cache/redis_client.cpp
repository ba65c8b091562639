#include "cache/redis_client.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <poll.h>

namespace skippy::cache {
namespace {

// Reply objects of our own, so the parser can refuse shapes the tier never asks for.
redis_value * make_value(const redisReadTask * task, redis_value::kind k) {
    if (task->parent != nullptr) return nullptr;  // inside an array: refused with the array
    auto * v = new redis_value();
    v->type = k;
    return v;
}

void * create_string(const redisReadTask * task, char * str, size_t len) {
    redis_value::kind k = redis_value::kind::string;
    if (task->type == REDIS_REPLY_STATUS) k = redis_value::kind::status;
    if (task->type == REDIS_REPLY_ERROR) k = redis_value::kind::error;
    redis_value * v = make_value(task, k);
    if (v) v->str.assign(str, len);
    return v;
}

void * create_array(const redisReadTask *, int) { return nullptr; }  // the parser reports an error

void * create_integer(const redisReadTask * task, long long value) {
    redis_value * v = make_value(task, redis_value::kind::integer);
    if (v) v->integer = value;
    return v;
}

void * create_nil(const redisReadTask * task) { return make_value(task, redis_value::kind::nil); }

void free_object(void * p) { delete static_cast<redis_value *>(p); }

redisReplyObjectFunctions g_reply_functions = {create_string, create_array, create_integer, create_nil, free_object};

int remaining_ms(redis_connection::clock_type::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - redis_connection::clock_type::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

}  // namespace

result<redis_url> parse_redis_url(std::string_view text) {
    auto bad = [&](const std::string & why) {
        return make_error(error_code::invalid_argument, "Redis URL '" + std::string(text) + "': " + why);
    };
    constexpr std::string_view scheme = "redis://";
    if (text.substr(0, scheme.size()) != scheme) return bad("must start with redis://");
    std::string_view rest = text.substr(scheme.size());
    redis_url u;
    if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
        std::string_view cred = rest.substr(0, at);
        if (const size_t colon = cred.find(':'); colon != std::string_view::npos) cred = cred.substr(colon + 1);
        u.password = std::string(cred);
        rest = rest.substr(at + 1);
    }
    std::string_view hostport = rest;
    if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
        hostport = rest.substr(0, slash);
        std::string_view db = rest.substr(slash + 1);
        if (!db.empty()) {
            int v = 0;
            auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), v);
            if (ec != std::errc() || p != db.data() + db.size() || v < 0 || v > 1000000) return bad("bad database number");
            u.db = v;
        }
    }
    if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos && hostport.find(']') == std::string_view::npos) {
        std::string_view port = hostport.substr(colon + 1);
        int v = 0;
        auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
        if (ec != std::errc() || p != port.data() + port.size() || v < 1 || v > 65535) return bad("bad port");
        u.port = v;
        hostport = hostport.substr(0, colon);
    }
    if (hostport.empty()) return bad("no host");
    u.host = std::string(hostport);
    return u;
}

result<std::unique_ptr<redis_connection>> redis_connection::connect(const redis_url & url, int32_t timeout_ms) {
    const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
    timeval tv{};
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    redisContext * c = redisConnectWithTimeout(url.host.c_str(), url.port, tv);
    if (!c) return make_error(error_code::unavailable, "Redis: out of memory connecting");
    if (c->err) {
        const std::string why = c->errstr;
        redisFree(c);
        return make_error(error_code::unavailable, "Redis " + url.host + ":" + std::to_string(url.port) + ": " + why);
    }
    // Each socket call is bounded too (a full send buffer, a reply trickling in).
    (void)redisSetTimeout(c, tv);
    c->reader->fn = &g_reply_functions;
    std::unique_ptr<redis_connection> conn(new redis_connection(c));
    std::vector<redis_command> setup;
    const std::string db = std::to_string(url.db);
    static constexpr std::string_view k_auth = "AUTH", k_select = "SELECT";
    auto bytes = [](std::string_view s) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(s.data()), s.size()); };
    if (!url.password.empty()) setup.push_back({bytes(k_auth), bytes(url.password)});
    if (url.db != 0) setup.push_back({bytes(k_select), bytes(db)});
    if (!setup.empty()) {
        SKIPPY_ASSIGN_OR_RETURN(std::vector<redis_value> replies, conn->run(setup, deadline));
        for (const redis_value & v : replies) {
            if (v.type != redis_value::kind::status) return make_error(error_code::unavailable, "Redis refused AUTH or SELECT");
        }
    }
    return conn;
}

redis_connection::~redis_connection() {
    if (ctx_) redisFree(ctx_);
}

status redis_connection::fail(error_code code, const std::string & what) {
    broken_ = true;
    return make_error(code, "Redis: " + what);
}

result<std::vector<redis_value>> redis_connection::run(std::span<const redis_command> commands, clock_type::time_point deadline) {
    if (broken_) return make_error(error_code::unavailable, "Redis: connection broken");
    std::vector<const char *> argv;
    std::vector<size_t> lens;
    for (const redis_command & cmd : commands) {
        argv.clear();
        lens.clear();
        for (std::span<const uint8_t> a : cmd) {
            argv.push_back(reinterpret_cast<const char *>(a.data()));
            lens.push_back(a.size());
        }
        if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
            return fail(error_code::internal, "cannot format a command");
        }
    }
    int done = 0;
    while (!done) {
        pollfd p{ctx_->fd, POLLOUT, 0};
        const int left = remaining_ms(deadline);
        if (left == 0 || ::poll(&p, 1, left) <= 0) {
            timed_out_ = true;
            return fail(error_code::unavailable, "timed out sending");
        }
        if (redisBufferWrite(ctx_, &done) != REDIS_OK) return fail(error_code::unavailable, std::string("send: ") + ctx_->errstr);
    }
    std::vector<redis_value> out;
    out.reserve(commands.size());
    while (out.size() < commands.size()) {
        void * reply = nullptr;
        if (redisGetReplyFromReader(ctx_, &reply) != REDIS_OK) {
            return fail(error_code::invalid_data, std::string("bad reply: ") + ctx_->errstr);
        }
        if (reply) {
            std::unique_ptr<redis_value> v(static_cast<redis_value *>(reply));
            out.push_back(std::move(*v));
            continue;
        }
        pollfd p{ctx_->fd, POLLIN, 0};
        const int left = remaining_ms(deadline);
        if (left == 0 || ::poll(&p, 1, left) <= 0) {
            timed_out_ = true;
            return fail(error_code::unavailable, "timed out waiting for a reply");
        }
        if (redisBufferRead(ctx_) != REDIS_OK) return fail(error_code::unavailable, std::string("receive: ") + ctx_->errstr);
    }
    return out;
}

}  // namespace skippy::cache
