// status and result<T>: skippy's one error style.
//
// Anything a peer, a file or a client can cause is reported as a status (or a
// result<T> holding either a value or a non-ok status); callers must look at it.
// Assertions are reserved for our own invariants. The codes double as the fixed error
// classes that cache decisions report (DESIGN §6): a status never leaks raw text into
// telemetry, only its code name.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace skippy {

enum class error_code {
    ok = 0,
    invalid_argument,  // a caller (CLI user, HTTP client) passed a bad value
    invalid_data,      // bytes from a file or a peer are malformed
    not_found,
    unsupported,       // well-formed but not something we implement
    integrity,         // checksum / hash mismatch
    unavailable,       // peer gone, resource busy, queue full
    permission,
    io,
    runtime,           // a failure while computing (out of KV blocks, ...)
    internal,          // a broken invariant detected without crashing
    cancelled,
    // A peer did not answer before a deadline (a stalled or frozen stage, a silent
    // dialer). Its error class is `unavailable`.
    timed_out,
    // A peer closed the connection (EOF). Its error class is `unavailable`.
    peer_closed,
};

// Stable lowercase name of a code ("invalid_data"), used in logs and telemetry.
std::string_view error_code_name(error_code code);

class [[nodiscard]] status {
public:
    status() = default;  // ok
    status(error_code code, std::string message) : code_(code), message_(std::move(message)) {}

    static status ok() { return {}; }

    bool is_ok() const { return code_ == error_code::ok; }
    explicit operator bool() const { return is_ok(); }
    error_code code() const { return code_; }
    const std::string & message() const { return message_; }

    // "invalid_data: tensor 'x' data out of bounds"
    std::string to_string() const;

    // Returns a status with the same code and "context: message".
    status with_context(std::string_view context) const;

private:
    error_code  code_ = error_code::ok;
    std::string message_;
};

inline status make_error(error_code code, std::string message) { return status(code, std::move(message)); }

// result<T>: a value, or a non-ok status explaining why there is none.
template <typename T>
class [[nodiscard]] result {
public:
    result(T value) : v_(std::move(value)) {}
    result(status st) : v_(std::move(st)) { assert(!std::get<status>(v_).is_ok() && "result built from an ok status"); }

    bool is_ok() const { return v_.index() == 0; }
    explicit operator bool() const { return is_ok(); }

    // REQUIRES: is_ok()
    T &       value() &       { assert(is_ok()); return std::get<0>(v_); }
    const T & value() const & { assert(is_ok()); return std::get<0>(v_); }
    T &&      value() &&      { assert(is_ok()); return std::get<0>(std::move(v_)); }
    T *       operator->()       { return &value(); }
    const T * operator->() const { return &value(); }
    T &       operator*()       { return value(); }
    const T & operator*() const { return value(); }

    // The error, or ok when a value is held.
    status error() const { return is_ok() ? status::ok() : std::get<1>(v_); }

private:
    std::variant<T, status> v_;
};

}  // namespace skippy

#define SKIPPY_CONCAT_INNER(a, b) a##b
#define SKIPPY_CONCAT(a, b) SKIPPY_CONCAT_INNER(a, b)

// Evaluates a status expression; returns it from the enclosing function if not ok.
#define SKIPPY_TRY(expr)                                   \
    do {                                                   \
        ::skippy::status skippy_try_st_ = (expr);          \
        if (!skippy_try_st_.is_ok()) return skippy_try_st_; \
    } while (0)

// Declares `decl` from a result<T> expression, or returns its error.
#define SKIPPY_ASSIGN_OR_RETURN(decl, expr) \
    SKIPPY_ASSIGN_OR_RETURN_IMPL(SKIPPY_CONCAT(skippy_res_, __LINE__), decl, expr)
#define SKIPPY_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
    auto tmp = (expr);                                \
    if (!tmp.is_ok()) return tmp.error();             \
    decl = std::move(tmp).value()
