#include "cache/decisions.h"

#include <limits>
#include <string>

namespace skippy::cache {

std::string_view cache_mode_name(cache_mode m) {
    switch (m) {
        case cache_mode::off: return "off";
        case cache_mode::record: return "record";
        case cache_mode::lookup_record: return "lookup-record";
    }
    return "off";
}

result<cache_mode> parse_cache_mode(std::string_view text) {
    if (text == "off") return cache_mode::off;
    if (text == "record") return cache_mode::record;
    if (text == "lookup-record" || text == "lookup_record") return cache_mode::lookup_record;
    return make_error(error_code::invalid_argument,
                      "--kv-cache: '" + std::string(text) + "' is not off, record or lookup-record");
}

std::string_view cache_tier_name(cache_tier t) {
    switch (t) {
        case cache_tier::none: return "none";
        case cache_tier::resident: return "resident";
        case cache_tier::exact_state: return "exact_state";
        case cache_tier::disk: return "disk";
        case cache_tier::redis: return "redis";
    }
    return "none";
}

std::string_view lookup_decision_name(lookup_kind kind, lookup_outcome o) {
    switch (kind) {
        case lookup_kind::probe:
            return o == lookup_outcome::hit ? "probe_hit" : o == lookup_outcome::short_ ? "probe_short" : "probe_miss";
        case lookup_kind::restore:
            switch (o) {
                case lookup_outcome::hit: return "restore_hit";
                case lookup_outcome::short_: return "restore_short";
                case lookup_outcome::miss: return "restore_miss";
                case lookup_outcome::error: return "restore_error";
            }
            break;
        case lookup_kind::try_restore:
            switch (o) {
                case lookup_outcome::hit: return "try_restore_hit";
                case lookup_outcome::short_: return "try_restore_short";
                case lookup_outcome::miss: return "try_restore_miss";
                case lookup_outcome::error: return "try_restore_error";
            }
            break;
        case lookup_kind::try_restore_decode:
            switch (o) {
                case lookup_outcome::hit: return "try_restore_decode_hit";
                case lookup_outcome::short_: return "try_restore_decode_short";
                case lookup_outcome::miss: return "try_restore_decode_miss";
                case lookup_outcome::error: return "try_restore_decode_error";
            }
            break;
        case lookup_kind::in_band:
            switch (o) {
                case lookup_outcome::hit:
                case lookup_outcome::short_: return "resident_hit";
                case lookup_outcome::miss: return "resident_miss";
                case lookup_outcome::error: return "resident_error";
            }
            break;
    }
    return "restore_error";
}

std::string_view activation_decision_name(activation_outcome o) {
    switch (o) {
        case activation_outcome::hit: return "activation_resident_hit";
        case activation_outcome::miss: return "activation_resident_miss";
        case activation_outcome::prefix_short: return "activation_hit_prefix_short";
        case activation_outcome::kv_miss: return "activation_hit_kv_miss";
        case activation_outcome::kv_error: return "activation_hit_kv_error";
    }
    return "activation_resident_miss";
}

std::string_view record_decision_name(record_outcome o) {
    switch (o) {
        case record_outcome::recorded: return "full_prefill_record";
        case record_outcome::skipped_cached: return "record_skipped_cached";
        case record_outcome::skipped_short: return "record_skipped_short";
        case record_outcome::skipped: return "record_skipped";
        case record_outcome::error: return "record_error";
        case record_outcome::unsupported: return nonzero_token_start_decision;
    }
    return "record_error";
}

std::string_view error_class_name(error_code code) {
    switch (code) {
        case error_code::integrity: return "integrity";
        case error_code::not_found: return "not_found";
        case error_code::unsupported: return "unsupported";
        case error_code::invalid_data: return "invalid_data";
        case error_code::unavailable:
        case error_code::timed_out:
        case error_code::peer_closed: return "unavailable";
        case error_code::permission: return "permission";
        case error_code::io: return "io";
        case error_code::runtime:
        case error_code::cancelled: return "runtime";
        case error_code::ok:
        case error_code::invalid_argument:
        case error_code::internal: return "internal";
    }
    return "internal";
}

namespace {
uint64_t add_sat(uint64_t a, uint64_t b) {
    return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}
}  // namespace

cache_counters & cache_counters::merge(const cache_counters & o) {
    kv_lookup_hits = add_sat(kv_lookup_hits, o.kv_lookup_hits);
    kv_lookup_misses = add_sat(kv_lookup_misses, o.kv_lookup_misses);
    kv_lookup_errors = add_sat(kv_lookup_errors, o.kv_lookup_errors);
    kv_imported_pages = add_sat(kv_imported_pages, o.kv_imported_pages);
    kv_imported_tokens = add_sat(kv_imported_tokens, o.kv_imported_tokens);
    kv_recorded_pages = add_sat(kv_recorded_pages, o.kv_recorded_pages);
    kv_recorded_bytes = add_sat(kv_recorded_bytes, o.kv_recorded_bytes);
    kv_hit_stage_mask |= o.kv_hit_stage_mask;
    kv_record_stage_mask |= o.kv_record_stage_mask;
    return *this;
}

uint64_t stage_bit(int32_t stage_index) {
    return stage_index >= 0 && stage_index < 64 ? uint64_t{1} << stage_index : 0;
}

}  // namespace skippy::cache
