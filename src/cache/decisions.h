// Decision values, error classes and per-request counters of the stage cache
// (DESIGN §6 "Decisions"; docs/kv-cache.md "Decisions and attributes").
#pragma once

#include "base/status.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace skippy::cache {

// Event names.
inline constexpr std::string_view lookup_event_name = "stage.binary_kv_lookup_decision";
inline constexpr std::string_view record_event_name = "stage.binary_kv_record_decision";
// Debug level, or summary when an entry left the cache or room could not be made:
inline constexpr std::string_view eviction_event_name = "stage.kv_cache_eviction";       // admission evicted entries
inline constexpr std::string_view exact_store_event_name = "stage.kv_exact_record_done";  // a background record ended
inline constexpr std::string_view disk_store_event_name = "stage.kv_disk_record_done";    // a background disk write ended
inline constexpr std::string_view redis_store_event_name = "stage.kv_redis_record_done";  // a background Redis publish ended

// --kv-cache off|record|lookup-record.
enum class cache_mode : uint8_t {
    off,            // no lookups, no records
    record,         // records only (warming a cache another run reads)
    lookup_record,  // both (default)
};
std::string_view cache_mode_name(cache_mode m);
// "off" | "record" | "lookup-record" (also "lookup_record"); invalid_argument otherwise.
result<cache_mode> parse_cache_mode(std::string_view text);

// Which control path asked: it prefixes the decision value.
enum class lookup_kind : uint8_t {
    probe,               // ProbePrefill: probe_hit|probe_short|probe_miss
    restore,             // RestorePrefill: restore_hit|short|miss|error
    try_restore,         // TryRestorePrefill: try_restore_*
    try_restore_decode,  // TryRestorePrefillDecode: try_restore_decode_*
    in_band,             // a Prefill at pos_start 0: resident_hit|resident_miss|resident_error
};

enum class lookup_outcome : uint8_t {
    hit,     // the whole target restored (or, for a probe, restorable)
    short_,  // fewer tokens than the target, at least min_tokens
    miss,    // nothing usable
    error,   // a tier failed; nothing restored, the caller computes
};

// The tiers, in lookup order (resident first, then exact state, disk, Redis).
enum class cache_tier : uint8_t { none, resident, exact_state, disk, redis };
inline constexpr size_t n_cache_tiers = 4;  // without none
std::string_view cache_tier_name(cache_tier t);

// The decision value of a lookup. In-band partial restores are "resident_hit" (the
// stage computes only the suffix); a probe never errs ("probe_miss").
std::string_view lookup_decision_name(lookup_kind kind, lookup_outcome outcome);

// Activation decisions (non-final stages, in-band).
enum class activation_outcome : uint8_t {
    hit,           // activation_resident_hit: frame found and KV restored to full length
    miss,          // activation_resident_miss: no frame
    prefix_short,  // activation_hit_prefix_short: frame found, KV restored only a prefix
    kv_miss,       // activation_hit_kv_miss
    kv_error,      // activation_hit_kv_error
};
std::string_view activation_decision_name(activation_outcome o);

// Record decisions.
enum class record_outcome : uint8_t {
    recorded,        // full_prefill_record: at least one tier took (or queued) it
    skipped_cached,  // record_skipped_cached: every enabled tier already serves it
    skipped_short,   // record_skipped_short: fewer than min_tokens (or broken accumulation)
    skipped,         // record_skipped: no tier could take it (entry cap, worker stopping)
    error,           // record_error
    unsupported,     // nonzero_token_start_unsupported
};
std::string_view record_decision_name(record_outcome o);

inline constexpr std::string_view nonzero_token_start_decision = "nonzero_token_start_unsupported";

// skippy.kv.resident_reason of every lookup and record on a stage with recurrent layers
// (qwen35): their per-sequence state is not in the KV, so the resident tier, which
// holds KV blocks only, serves none of its prefixes; the exact-state tier does, with the
// snapshot of the state taken at the prefix's length.
inline constexpr std::string_view recurrent_layers_reason = "recurrent layers cannot be restored from KV alone";

// The fixed error class of a status code: integrity, not_found, unsupported,
// invalid_data, unavailable, permission, io, runtime or internal. A bad argument from
// our own caller is "internal"; a cancellation is "runtime". Never raw error text.
std::string_view error_class_name(error_code code);

// What the cache did for one request on one stage: the cache's share of the wire
// stats block (protocol.h stat_id). Counters add, stage masks OR.
struct cache_counters {
    uint64_t kv_lookup_hits = 0;        // restores that restored >= min_tokens
    uint64_t kv_lookup_misses = 0;      // restores that restored nothing (incl. short refused)
    uint64_t kv_lookup_errors = 0;      // restores that failed (quarantines included)
    uint64_t kv_imported_pages = 0;     // exact-state pages imported; a resident restore counts one
    uint64_t kv_imported_tokens = 0;    // tokens restored, either tier
    uint64_t kv_recorded_pages = 0;     // resident entries recorded (one page each) + pages demoted
    uint64_t kv_recorded_bytes = 0;     // KV bytes of those
    uint64_t kv_hit_stage_mask = 0;     // bit stage_index when a restore hit
    uint64_t kv_record_stage_mask = 0;  // bit stage_index when a record took

    bool operator==(const cache_counters &) const = default;

    // Counters add (saturating at UINT64_MAX), masks OR.
    cache_counters & merge(const cache_counters & other);
};

// Bit of a stage in a mask; 0 for a stage index outside [0, 64).
uint64_t stage_bit(int32_t stage_index);

}  // namespace skippy::cache
