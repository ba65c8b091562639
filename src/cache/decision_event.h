// Decision events with named attributes (docs/kv-cache.md "Decisions and attributes").
//
// Every attribute a cache event may carry is one row of attr_descriptors: its id, its
// name and its JSON type. The table is in enum order and its names are unique and
// start with "skippy." (static_asserts below), so a misspelt or mistyped attribute is
// a compile error, not a silently missing key:
//
//   decision_event ev(lookup_event_name, ns.stage_index);
//   ev.num<attr::kv_query_tokens>(n).text<attr::kv_decision>("restore_hit");
//   ev.num<attr::kv_decision>(1);   // does not compile: kv_decision is text
//
// num / real / text / flag set integer, floating-point, string and boolean attributes
// (separate names, so a string literal never converts to a boolean).
//
// Setting an attribute twice keeps the last value; the event lists attributes in
// table order. Not thread-safe (one event is built by one thread).
#pragma once

#include "telemetry/telemetry.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace skippy::cache {

enum class attr_type : uint8_t { integer, real, text, boolean };

enum class attr : uint8_t {
    // Context of the call
    kv_session,
    kv_request_id,
    kv_message_kind,
    kv_token_start,
    kv_token_count,
    // Lookups
    kv_decision,
    kv_restore_decision,
    kv_query_tokens,
    kv_max_tokens,
    kv_matched_tokens,
    kv_restorable_tokens,
    kv_restored_tokens,
    kv_tier,
    kv_candidates,
    kv_imported_pages,
    kv_lookup_ms,
    kv_resident_matched_tokens,
    kv_page_id,
    kv_error_class,
    exact_matched_tokens,
    exact_entries,
    exact_physical_bytes,
    exact_logical_bytes,
    exact_quarantined,
    disk_matched_tokens,
    disk_error_class,
    disk_quarantined,
    redis_matched_tokens,
    redis_error_class,
    activation_hit,
    activation_width,
    activation_bytes,
    kv_resident_reason,
    kv_recurrent,
    kv_record_wait_ms,
    // Records
    kv_reason,
    kv_record_tokens,
    kv_record_ms,
    kv_resident,
    kv_recorded_bytes,
    exact_record,
    disk_record,
    redis_record,
    // Admission (stage.kv_cache_eviction)
    kv_needed_blocks,
    kv_evicted_entries,
    kv_demoted_entries,
    kv_lost_entries,
    kv_free_blocks,
    kv_enough,
    // Background stores (stage.kv_*_record_done)
    exact_pages,
    exact_page_bytes,
    exact_evicted_entries,
    disk_pages,
    disk_bytes_written,
    disk_evicted_entries,
    disk_entries,
    disk_bytes,
    redis_pages,
    redis_bytes_written,
    exact_state_bytes,
    exact_shared_pages,
};
inline constexpr size_t n_attrs = 61;

struct attr_descriptor {
    attr             id;
    std::string_view name;
    attr_type        type;
};

inline constexpr attr_descriptor attr_descriptors[] = {
    {attr::kv_session,                 "skippy.kv.session",                 attr_type::integer},
    {attr::kv_request_id,              "skippy.kv.request_id",              attr_type::integer},
    {attr::kv_message_kind,            "skippy.kv.message_kind",            attr_type::text},
    {attr::kv_token_start,             "skippy.kv.token_start",             attr_type::integer},
    {attr::kv_token_count,             "skippy.kv.token_count",             attr_type::integer},
    {attr::kv_decision,                "skippy.kv.decision",                attr_type::text},
    {attr::kv_restore_decision,        "skippy.kv.restore_decision",        attr_type::text},
    {attr::kv_query_tokens,            "skippy.kv.query_tokens",            attr_type::integer},
    {attr::kv_max_tokens,              "skippy.kv.max_tokens",              attr_type::integer},
    {attr::kv_matched_tokens,          "skippy.kv.matched_tokens",          attr_type::integer},
    {attr::kv_restorable_tokens,       "skippy.kv.restorable_tokens",       attr_type::integer},
    {attr::kv_restored_tokens,         "skippy.kv.restored_tokens",         attr_type::integer},
    {attr::kv_tier,                    "skippy.kv.tier",                    attr_type::text},
    {attr::kv_candidates,              "skippy.kv.candidates",              attr_type::text},
    {attr::kv_imported_pages,          "skippy.kv.imported_pages",          attr_type::integer},
    {attr::kv_lookup_ms,               "skippy.kv.lookup_ms",               attr_type::real},
    {attr::kv_resident_matched_tokens, "skippy.kv.resident_matched_tokens", attr_type::integer},
    {attr::kv_page_id,                 "skippy.kv.page_id",                 attr_type::text},
    {attr::kv_error_class,             "skippy.kv.error_class",             attr_type::text},
    {attr::exact_matched_tokens,       "skippy.exact_cache.matched_tokens", attr_type::integer},
    {attr::exact_entries,              "skippy.exact_cache.entries",        attr_type::integer},
    {attr::exact_physical_bytes,       "skippy.exact_cache.physical_bytes", attr_type::integer},
    {attr::exact_logical_bytes,        "skippy.exact_cache.logical_bytes",  attr_type::integer},
    {attr::exact_quarantined,          "skippy.exact_cache.quarantined",    attr_type::boolean},
    {attr::disk_matched_tokens,        "skippy.disk_cache.matched_tokens",  attr_type::integer},
    {attr::disk_error_class,           "skippy.disk_cache.error_class",     attr_type::text},
    {attr::disk_quarantined,           "skippy.disk_cache.quarantined",     attr_type::boolean},
    {attr::redis_matched_tokens,       "skippy.redis_cache.matched_tokens", attr_type::integer},
    {attr::redis_error_class,          "skippy.redis_cache.error_class",    attr_type::text},
    {attr::activation_hit,             "skippy.activation_cache.hit",       attr_type::boolean},
    {attr::activation_width,           "skippy.activation_cache.width",     attr_type::integer},
    {attr::activation_bytes,           "skippy.activation_cache.bytes",     attr_type::integer},
    {attr::kv_resident_reason,         "skippy.kv.resident_reason",         attr_type::text},
    {attr::kv_recurrent,               "skippy.kv.recurrent",               attr_type::boolean},
    {attr::kv_record_wait_ms,          "skippy.kv.record_wait_ms",          attr_type::real},
    {attr::kv_reason,                  "skippy.kv.reason",                  attr_type::text},
    {attr::kv_record_tokens,           "skippy.kv.record_tokens",           attr_type::integer},
    {attr::kv_record_ms,               "skippy.kv.record_ms",               attr_type::real},
    {attr::kv_resident,                "skippy.kv.resident",                attr_type::text},
    {attr::kv_recorded_bytes,          "skippy.kv.recorded_bytes",          attr_type::integer},
    {attr::exact_record,               "skippy.exact_cache.record",         attr_type::text},
    {attr::disk_record,                "skippy.disk_cache.record",          attr_type::text},
    {attr::redis_record,               "skippy.redis_cache.record",         attr_type::text},
    {attr::kv_needed_blocks,           "skippy.kv.needed_blocks",           attr_type::integer},
    {attr::kv_evicted_entries,         "skippy.kv.evicted_entries",         attr_type::integer},
    {attr::kv_demoted_entries,         "skippy.kv.demoted_entries",         attr_type::integer},
    {attr::kv_lost_entries,            "skippy.kv.lost_entries",            attr_type::integer},
    {attr::kv_free_blocks,             "skippy.kv.free_blocks",             attr_type::integer},
    {attr::kv_enough,                  "skippy.kv.enough",                  attr_type::boolean},
    {attr::exact_pages,                "skippy.exact_cache.pages",          attr_type::integer},
    {attr::exact_page_bytes,           "skippy.exact_cache.page_bytes",     attr_type::integer},
    {attr::exact_evicted_entries,      "skippy.exact_cache.evicted_entries", attr_type::integer},
    {attr::disk_pages,                 "skippy.disk_cache.pages",           attr_type::integer},
    {attr::disk_bytes_written,         "skippy.disk_cache.bytes_written",   attr_type::integer},
    {attr::disk_evicted_entries,       "skippy.disk_cache.evicted_entries", attr_type::integer},
    {attr::disk_entries,               "skippy.disk_cache.entries",         attr_type::integer},
    {attr::disk_bytes,                 "skippy.disk_cache.bytes",           attr_type::integer},
    {attr::redis_pages,                "skippy.redis_cache.pages",          attr_type::integer},
    {attr::redis_bytes_written,        "skippy.redis_cache.bytes_written",  attr_type::integer},
    {attr::exact_state_bytes,          "skippy.exact_cache.state_bytes",    attr_type::integer},
    {attr::exact_shared_pages,         "skippy.exact_cache.shared_pages",   attr_type::integer},
};
static_assert(std::size(attr_descriptors) == n_attrs, "one descriptor per attr");

namespace detail {
constexpr bool attr_table_is_consistent() {
    for (size_t i = 0; i < std::size(attr_descriptors); ++i) {
        if (static_cast<size_t>(attr_descriptors[i].id) != i) return false;
        if (attr_descriptors[i].name.substr(0, 7) != "skippy.") return false;
        for (size_t j = 0; j < i; ++j) {
            if (attr_descriptors[j].name == attr_descriptors[i].name) return false;
        }
    }
    return true;
}
}  // namespace detail
static_assert(detail::attr_table_is_consistent(), "attr_descriptors: in enum order, names unique and under skippy.");

constexpr const attr_descriptor & describe(attr a) { return attr_descriptors[static_cast<size_t>(a)]; }

class decision_event {
public:
    decision_event(std::string_view name, int32_t stage, telemetry::event_level level = telemetry::event_level::summary);

    template <attr A>
    decision_event & num(int64_t v) {
        static_assert(describe(A).type == attr_type::integer, "attribute is not an integer");
        values_[static_cast<size_t>(A)] = telemetry::attr_value{v};
        return *this;
    }
    template <attr A>
    decision_event & real(double v) {
        static_assert(describe(A).type == attr_type::real, "attribute is not a real number");
        values_[static_cast<size_t>(A)] = telemetry::attr_value{v};
        return *this;
    }
    template <attr A>
    decision_event & text(std::string_view v) {
        static_assert(describe(A).type == attr_type::text, "attribute is not text");
        values_[static_cast<size_t>(A)] = telemetry::attr_value{std::string(v)};
        return *this;
    }
    template <attr A>
    decision_event & flag(bool v) {
        static_assert(describe(A).type == attr_type::boolean, "attribute is not a boolean");
        values_[static_cast<size_t>(A)] = telemetry::attr_value{v};
        return *this;
    }
    // Moves the value of `From` to `To` (same type), leaving `From` unset.
    template <attr From, attr To>
    decision_event & move() {
        static_assert(describe(From).type == describe(To).type, "attributes of different types");
        values_[static_cast<size_t>(To)] = std::move(values_[static_cast<size_t>(From)]);
        values_[static_cast<size_t>(From)].reset();
        return *this;
    }
    bool has(attr a) const { return values_[static_cast<size_t>(a)].has_value(); }
    void set_level(telemetry::event_level level) { level_ = level; }

    // The event: name, stage, level and the set attributes in table order.
    telemetry::event to_event() const;

private:
    std::string                                         name_;
    int32_t                                             stage_ = 0;
    telemetry::event_level                              level_;
    std::array<std::optional<telemetry::attr_value>, n_attrs> values_;
};

}  // namespace skippy::cache
