// Per-session accumulation of the prompt a session prefilled (DESIGN §6 "Records").
//
// Each Prefill appends its tokens when it continues exactly where the session's
// accumulated prompt ends. pos_start == 0 starts over. A chunk that leaves a gap or
// rewrites earlier positions makes the accumulated tokens unknowable: the session is
// marked broken (counted) and records nothing until the next pos_start == 0.
//
//   note(0, [a b c])   tokens [a b c]     dirty
//   mark_recorded()    tokens [a b c]     clean
//   note(3, [d])       tokens [a b c d]   dirty
//   note(7, [x])       broken (gap)       -> nothing to record
//   note(0, [a])       tokens [a]         dirty
//
// Not thread-safe: the caller serializes.
#pragma once

#include "cache/identity.h"

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

struct accumulator_stats {
    int64_t n_sessions = 0;
    int64_t n_gaps = 0;  // cumulative: chunks that broke a session's accumulation
};

class session_accumulator {
public:
    // Adds a prefilled chunk. false when it broke the accumulation (gap / rewrite).
    bool note_prefill(int32_t session, int64_t pos_start, std::span<const token_id> tokens);

    // The session's prompt is known to be `tokens` (a restore put their KV in place);
    // clean: a record of exactly these adds nothing.
    void seed(int32_t session, std::span<const token_id> tokens);

    // The accumulated tokens; empty when none or broken.
    std::span<const token_id> tokens(int32_t session) const;
    // Tokens were added since the last seed / mark_recorded, and the session is whole.
    bool dirty(int32_t session) const;
    void mark_recorded(int32_t session);
    void reset(int32_t session);

    accumulator_stats stats() const;

private:
    struct state {
        std::vector<token_id> tokens;
        bool                  dirty = false;
        bool                  broken = false;
    };
    std::unordered_map<int32_t, state> sessions_;
    int64_t                            n_gaps_ = 0;
};

}  // namespace skippy::cache
