#include "base/status.h"

namespace skippy {

std::string_view error_code_name(error_code code) {
    switch (code) {
        case error_code::ok:               return "ok";
        case error_code::invalid_argument: return "invalid_argument";
        case error_code::invalid_data:     return "invalid_data";
        case error_code::not_found:        return "not_found";
        case error_code::unsupported:      return "unsupported";
        case error_code::integrity:        return "integrity";
        case error_code::unavailable:      return "unavailable";
        case error_code::permission:       return "permission";
        case error_code::io:               return "io";
        case error_code::runtime:          return "runtime";
        case error_code::internal:         return "internal";
        case error_code::cancelled:        return "cancelled";
        case error_code::timed_out:        return "timed_out";
        case error_code::peer_closed:      return "peer_closed";
    }
    return "internal";
}

std::string status::to_string() const {
    if (is_ok()) return "ok";
    std::string out(error_code_name(code_));
    out += ": ";
    out += message_;
    return out;
}

status status::with_context(std::string_view context) const {
    if (is_ok()) return *this;
    std::string msg(context);
    msg += ": ";
    msg += message_;
    return status(code_, std::move(msg));
}

}  // namespace skippy
