#include "cache/session_accumulator.h"

namespace skippy::cache {

bool session_accumulator::note_prefill(int32_t session, int64_t pos_start, std::span<const token_id> tokens) {
    state & s = sessions_[session];
    if (pos_start == 0) {
        s.tokens.assign(tokens.begin(), tokens.end());
        s.broken = false;
        s.dirty = !tokens.empty();
        return true;
    }
    if (s.broken) return false;  // already counted
    if (pos_start != static_cast<int64_t>(s.tokens.size())) {
        s.tokens.clear();
        s.broken = true;
        s.dirty = false;
        ++n_gaps_;
        return false;
    }
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    if (!tokens.empty()) s.dirty = true;
    return true;
}

void session_accumulator::seed(int32_t session, std::span<const token_id> tokens) {
    state & s = sessions_[session];
    s.tokens.assign(tokens.begin(), tokens.end());
    s.broken = false;
    s.dirty = false;
}

std::span<const token_id> session_accumulator::tokens(int32_t session) const {
    auto it = sessions_.find(session);
    if (it == sessions_.end() || it->second.broken) return {};
    return it->second.tokens;
}

bool session_accumulator::dirty(int32_t session) const {
    auto it = sessions_.find(session);
    return it != sessions_.end() && !it->second.broken && it->second.dirty;
}

void session_accumulator::mark_recorded(int32_t session) {
    auto it = sessions_.find(session);
    if (it != sessions_.end()) it->second.dirty = false;
}

void session_accumulator::reset(int32_t session) { sessions_.erase(session); }

accumulator_stats session_accumulator::stats() const {
    return accumulator_stats{static_cast<int64_t>(sessions_.size()), n_gaps_};
}

}  // namespace skippy::cache
