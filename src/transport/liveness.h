// Liveness of stage links (docs/transport.md, "Liveness"): how long a stage may take to
// answer the work sent to it before the requests on it fail with `timed_out`.
//
// A reply's deadline is computed from the work it answers, not fixed: a base (round
// trips, scheduling) plus a floor rate per token (the slowest pace we accept from a
// stage), counted for every hop the reply has to come back through. A step queued
// behind unacknowledged ones is charged their tokens too, since the peer runs them
// first. A frozen or partitioned stage thus fails a decode in seconds, while a long
// prefill chunk still gets the time its size needs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace skippy::transport {

struct liveness_options {
    // Per hop: the fixed part of every reply's budget.
    std::chrono::milliseconds step_base{2000};
    // Per hop and token: the slowest pace a stage may run at before it counts as stuck.
    std::chrono::milliseconds step_per_token{20};
};

// The longest a reply to `n_tokens` of work may take to come back through `n_hops`
// stages: n_hops * (step_base + n_tokens * step_per_token). REQUIRES: n_tokens >= 0,
// n_hops >= 1. PROMISES: saturates at one day instead of overflowing (any sane budget is
// far below), and is at least 1 ms.
inline std::chrono::milliseconds step_budget(const liveness_options & o, int64_t n_tokens, int32_t n_hops = 1) {
    constexpr int64_t cap_ms = 24LL * 3600 * 1000;
    const int64_t base = std::max<int64_t>(0, o.step_base.count());
    const int64_t per = std::max<int64_t>(0, o.step_per_token.count());
    const int64_t tokens = std::max<int64_t>(0, n_tokens);
    const int64_t hops = std::max<int32_t>(1, n_hops);
    // Each factor is checked against the cap before multiplying, so nothing overflows.
    if (per > 0 && tokens > cap_ms / per) return std::chrono::milliseconds(cap_ms);
    const int64_t one_hop = std::min(cap_ms, base + tokens * per);
    if (one_hop > cap_ms / hops) return std::chrono::milliseconds(cap_ms);
    return std::chrono::milliseconds(std::max<int64_t>(1, one_hop * hops));
}

}  // namespace skippy::transport
