// Records handed to the record worker and not stored yet (docs/kv-cache.md §6,
// "Waiting for a queued record"): what a lookup may wait for instead of missing.
//
// A record stores one exact-state entry per length it carries (the record's tokens,
// and the shorter checkpoints merged into it). A lookup asks for the longest of those
// lengths that lies on its query's path within its target; if that beats what the
// tiers can restore now, the stage cache waits (bounded) until the record is done.
//
//   in flight: ns A, tokens [1 2 3 4 5 6], lengths {4, 6}
//   awaited(A, [1 2 3 4 5 6 7], target 6) = 6
//   awaited(A, [1 2 3 4 9],     target 5) = 4   (6 is not on the path)
//   awaited(A, [1 2 3],         target 3) = 0
//
// Not thread-safe: the caller serializes (stage_cache holds its mutex).
#pragma once

#include "cache/digest.h"
#include "cache/identity.h"

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

class inflight_records {
public:
    using ticket = uint64_t;

    // A record of `tokens` in namespace ns storing an entry at each of `lengths` (each in
    // [1, tokens.size()]). Returns the ticket that remove() takes.
    ticket add(const digest256 & ns, std::span<const token_id> tokens, std::vector<int64_t> lengths);
    // The record is stored, dropped or replaced. Unknown tickets are ignored.
    void remove(ticket t);

    // The longest length of an in-flight record of namespace ns whose tokens up to it
    // are the query's, at most `target`; 0 when none.
    int64_t awaited(const digest256 & ns, std::span<const token_id> query, int64_t target) const;

    size_t size() const { return records_.size(); }

private:
    struct record {
        digest256             ns;
        std::vector<token_id> tokens;
        std::vector<int64_t>  lengths;
    };
    std::unordered_map<ticket, record> records_;
    ticket                             next_ = 1;
};

}  // namespace skippy::cache
