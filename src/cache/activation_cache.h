// Activation cache (non-final stages): the frame a stage forwarded for a prefix
// (DESIGN §6 "Tiers"). A hit lets the stage forward the frame without computing —
// only when the KV of the same prefix also restores to full length, which the stage
// cache checks; this class only stores bytes.
//
// Keyed by (prefix hash, token count, width): the page id names the prefix in events,
// but its 16 hex digits are too short to key by (DESIGN §8: no forged collisions).
// Byte-limited LRU; a capacity of 0 turns it off; a frame larger than the capacity is
// refused.
//
// Not thread-safe: the caller serializes.
#pragma once

#include "cache/digest.h"

#include <cstdint>
#include <compare>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <vector>

namespace skippy::cache {

struct activation_key {
    digest256 prefix;      // prefix_hash(ns, tokens)
    int64_t   n_tokens = 0;
    int32_t   width = 0;   // floats per row (n_embd), or the frame's row width

    auto operator<=>(const activation_key &) const = default;
};

using activation_frame = std::shared_ptr<const std::vector<uint8_t>>;

struct activation_stats {
    int64_t n_entries = 0;
    int64_t n_bytes = 0;
    // Cumulative:
    int64_t n_hits = 0;
    int64_t n_misses = 0;
    int64_t n_stores = 0;
    int64_t n_refused = 0;    // frames larger than the capacity
    int64_t n_evictions = 0;
};

class activation_cache {
public:
    explicit activation_cache(int64_t max_bytes);

    bool enabled() const { return max_bytes_ > 0; }

    // Stores (or replaces) the frame, evicting least recently used frames to fit.
    // false when off or the frame alone exceeds the capacity.
    bool store(const activation_key & key, std::vector<uint8_t> frame);

    // The frame (refreshing its recency), or nullptr. Counts a hit or a miss.
    activation_frame lookup(const activation_key & key);
    // Whether a frame is stored; touches neither recency nor counts.
    bool contains(const activation_key & key) const;

    activation_stats stats() const;

private:
    struct slot {
        activation_key   key;
        activation_frame frame;
    };
    void erase(std::list<slot>::iterator it);

    int64_t                                               max_bytes_;
    int64_t                                               bytes_ = 0;
    std::list<slot>                                       lru_;  // front: most recent
    std::map<activation_key, std::list<slot>::iterator>   by_key_;
    activation_stats                                      counts_;
};

}  // namespace skippy::cache
