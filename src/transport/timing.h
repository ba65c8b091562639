// Intervals for the stats block (docs/protocol.md, "Stats block"), measured the same way
// on every stage.
#pragma once

#include "transport/socket.h"

#include <chrono>
#include <cstdint>

namespace skippy::transport {

// Whole microseconds since t0, truncated (compute times).
inline uint32_t micros_since(clock::time_point t0) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count();
    return us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us);
}

// A measured interval: rounded up, and at least 1 µs, so that 0 always means "not
// measured" (queue and forward times).
inline uint32_t measured_us_since(clock::time_point t0) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    const int64_t us = ns <= 0 ? 1 : (ns + 999) / 1000;
    return us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us);
}

}  // namespace skippy::transport
