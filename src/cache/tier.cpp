#include "cache/tier.h"

namespace skippy::cache {

std::string_view tier_store_state_name(tier_store_state s) {
    switch (s) {
        case tier_store_state::stored: return "stored";
        case tier_store_state::present: return "present";
        case tier_store_state::refused: return "refused";
        case tier_store_state::error: return "error";
    }
    return "error";
}

int choose_tier(std::span<const tier_candidate> candidates, int64_t min_tokens) {
    int best = -1;
    int64_t best_tokens = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
        const tier_candidate & c = candidates[i];
        if (!c.peeked || c.peek.error != error_code::ok) continue;
        const int64_t n = c.peek.restorable_tokens;
        // Strictly more: a tie stays with the earlier (cheaper) tier.
        if (n >= min_tokens && n > best_tokens) {
            best = static_cast<int>(i);
            best_tokens = n;
        }
    }
    return best;
}

std::string candidates_text(std::span<const tier_candidate> candidates) {
    std::string out;
    for (const tier_candidate & c : candidates) {
        if (!c.peeked) continue;
        if (!out.empty()) out += ' ';
        out += cache_tier_name(c.tier);
        out += '=';
        out += c.peek.error != error_code::ok ? std::string("error") : std::to_string(c.peek.restorable_tokens);
    }
    return out;
}

}  // namespace skippy::cache
