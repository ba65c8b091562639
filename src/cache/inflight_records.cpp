#include "cache/inflight_records.h"

#include <algorithm>

namespace skippy::cache {

inflight_records::ticket inflight_records::add(const digest256 & ns, std::span<const token_id> tokens, std::vector<int64_t> lengths) {
    const ticket t = next_++;
    records_.emplace(t, record{ns, std::vector<token_id>(tokens.begin(), tokens.end()), std::move(lengths)});
    return t;
}

void inflight_records::remove(ticket t) { records_.erase(t); }

int64_t inflight_records::awaited(const digest256 & ns, std::span<const token_id> query, int64_t target) const {
    const int64_t limit = std::min<int64_t>(target, static_cast<int64_t>(query.size()));
    int64_t best = 0;
    for (const auto & [t, r] : records_) {
        if (r.ns != ns) continue;
        // The record's tokens and the query agree on their first `common` tokens.
        const size_t n = std::min(r.tokens.size(), static_cast<size_t>(std::max<int64_t>(limit, 0)));
        const int64_t common = std::mismatch(r.tokens.begin(), r.tokens.begin() + static_cast<ptrdiff_t>(n), query.begin()).first - r.tokens.begin();
        for (int64_t len : r.lengths) {
            if (len <= common && len > best) best = len;
        }
    }
    return best;
}

}  // namespace skippy::cache
