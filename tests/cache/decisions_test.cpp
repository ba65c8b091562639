// Decision values, error classes, counters merge.
#include "cache/decisions.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>

namespace skippy::cache {
namespace {

TEST(decisions, LookupValuesFollowTheDesignList) {
    EXPECT_EQ(lookup_decision_name(lookup_kind::probe, lookup_outcome::hit), "probe_hit");
    EXPECT_EQ(lookup_decision_name(lookup_kind::probe, lookup_outcome::short_), "probe_short");
    EXPECT_EQ(lookup_decision_name(lookup_kind::probe, lookup_outcome::error), "probe_miss");
    EXPECT_EQ(lookup_decision_name(lookup_kind::restore, lookup_outcome::short_), "restore_short");
    EXPECT_EQ(lookup_decision_name(lookup_kind::try_restore, lookup_outcome::miss), "try_restore_miss");
    EXPECT_EQ(lookup_decision_name(lookup_kind::try_restore_decode, lookup_outcome::error), "try_restore_decode_error");
    EXPECT_EQ(lookup_decision_name(lookup_kind::in_band, lookup_outcome::short_), "resident_hit");
    EXPECT_EQ(lookup_decision_name(lookup_kind::in_band, lookup_outcome::error), "resident_error");
    EXPECT_EQ(activation_decision_name(activation_outcome::hit), "activation_resident_hit");
    EXPECT_EQ(activation_decision_name(activation_outcome::miss), "activation_resident_miss");
    EXPECT_EQ(activation_decision_name(activation_outcome::prefix_short), "activation_hit_prefix_short");
    EXPECT_EQ(activation_decision_name(activation_outcome::kv_miss), "activation_hit_kv_miss");
    EXPECT_EQ(activation_decision_name(activation_outcome::kv_error), "activation_hit_kv_error");
    EXPECT_EQ(record_decision_name(record_outcome::recorded), "full_prefill_record");
    EXPECT_EQ(record_decision_name(record_outcome::unsupported), "nonzero_token_start_unsupported");
}

TEST(decisions, ErrorClassesComeFromTheFixedList) {
    const std::set<std::string_view> fixed{"integrity", "not_found", "unsupported", "invalid_data", "unavailable",
                                           "permission", "io", "runtime", "internal"};
    for (int c = 0; c <= static_cast<int>(error_code::peer_closed); ++c) {
        EXPECT_TRUE(fixed.count(error_class_name(static_cast<error_code>(c)))) << c;
    }
    EXPECT_EQ(error_class_name(error_code::integrity), "integrity");
    EXPECT_EQ(error_class_name(error_code::invalid_argument), "internal");
    EXPECT_EQ(error_class_name(error_code::timed_out), "unavailable");
    EXPECT_EQ(error_class_name(error_code::peer_closed), "unavailable");
}

TEST(decisions, CacheModesParse) {
    EXPECT_EQ(*parse_cache_mode("off"), cache_mode::off);
    EXPECT_EQ(*parse_cache_mode("record"), cache_mode::record);
    EXPECT_EQ(*parse_cache_mode("lookup-record"), cache_mode::lookup_record);
    EXPECT_EQ(parse_cache_mode("on").error().code(), error_code::invalid_argument);
    EXPECT_EQ(cache_mode_name(cache_mode::lookup_record), "lookup-record");
}

TEST(cache_counters, MergeAddsCountersAndOrsMasks) {
    cache_counters a, b;
    a.kv_lookup_hits = 1;
    a.kv_imported_tokens = 100;
    a.kv_hit_stage_mask = stage_bit(0);
    a.kv_record_stage_mask = stage_bit(2);
    b.kv_lookup_hits = 2;
    b.kv_lookup_errors = 1;
    b.kv_imported_tokens = 50;
    b.kv_hit_stage_mask = stage_bit(1) | stage_bit(0);
    b.kv_recorded_bytes = std::numeric_limits<uint64_t>::max();
    a.kv_recorded_bytes = 5;
    a.merge(b);
    EXPECT_EQ(a.kv_lookup_hits, 3u);
    EXPECT_EQ(a.kv_lookup_errors, 1u);
    EXPECT_EQ(a.kv_imported_tokens, 150u);
    EXPECT_EQ(a.kv_hit_stage_mask, 0b011u);
    EXPECT_EQ(a.kv_record_stage_mask, 0b100u);
    EXPECT_EQ(a.kv_recorded_bytes, std::numeric_limits<uint64_t>::max());  // saturates
    EXPECT_EQ(stage_bit(64), 0u);
    EXPECT_EQ(stage_bit(-1), 0u);
}

}  // namespace
}  // namespace skippy::cache
