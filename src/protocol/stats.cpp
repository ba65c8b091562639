// The stats block: accessors by id and the hop-by-hop merge, both driven by
// stat_descriptors so that a stat's wire width and merge rule live in one table.
#include "protocol/protocol.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace skippy::protocol {

namespace {

// The one place that maps ids to fields; a new stat_id without a case here is a
// -Wswitch warning, and one without a descriptor fails the static_assert in the header.
template <typename Block>
auto * stat_field(Block & s, stat_id id) {
    switch (id) {
        case stat_id::kv_lookup_hits:       return &s.kv_lookup_hits;
        case stat_id::kv_lookup_misses:     return &s.kv_lookup_misses;
        case stat_id::kv_lookup_errors:     return &s.kv_lookup_errors;
        case stat_id::kv_imported_pages:    return &s.kv_imported_pages;
        case stat_id::kv_imported_tokens:   return &s.kv_imported_tokens;
        case stat_id::kv_recorded_pages:    return &s.kv_recorded_pages;
        case stat_id::kv_recorded_bytes:    return &s.kv_recorded_bytes;
        case stat_id::kv_hit_stage_mask:    return &s.kv_hit_stage_mask;
        case stat_id::kv_record_stage_mask: return &s.kv_record_stage_mask;
        case stat_id::max_compute_us:
        case stat_id::max_queue_us:
        case stat_id::max_forward_us:
            break;
    }
    return static_cast<decltype(&s.kv_lookup_hits)>(nullptr);
}

template <typename Block>
auto * stat_field32(Block & s, stat_id id) {
    switch (id) {
        case stat_id::max_compute_us: return &s.max_compute_us;
        case stat_id::max_queue_us:   return &s.max_queue_us;
        case stat_id::max_forward_us: return &s.max_forward_us;
        default: break;
    }
    return static_cast<decltype(&s.max_compute_us)>(nullptr);
}

}  // namespace

uint64_t stat_value(const stats_block & s, stat_id id) {
    if (const uint64_t * p = stat_field(s, id)) return *p;
    const uint32_t * p32 = stat_field32(s, id);
    assert(p32 != nullptr && "stat_id without a field");
    return p32 ? *p32 : 0;
}

void set_stat(stats_block & s, stat_id id, uint64_t value) {
    if (uint64_t * p = stat_field(s, id)) {
        *p = value;
        return;
    }
    uint32_t * p32 = stat_field32(s, id);
    assert(p32 != nullptr && "stat_id without a field");
    if (p32) *p32 = static_cast<uint32_t>(std::min<uint64_t>(value, std::numeric_limits<uint32_t>::max()));
}

stats_block merge_stats(const stats_block & a, const stats_block & b) {
    stats_block out;
    for (const stat_descriptor & d : stat_descriptors) {
        const uint64_t x = stat_value(a, d.id);
        const uint64_t y = stat_value(b, d.id);
        uint64_t v = 0;
        switch (d.merge) {
            case stat_merge::sum:
                // Saturate rather than wrap: a wrapped counter would read as tiny.
                v = x > std::numeric_limits<uint64_t>::max() - y ? std::numeric_limits<uint64_t>::max() : x + y;
                break;
            case stat_merge::bit_or: v = x | y; break;
            case stat_merge::max:    v = std::max(x, y); break;
        }
        set_stat(out, d.id, v);
    }
    return out;
}

}  // namespace skippy::protocol
