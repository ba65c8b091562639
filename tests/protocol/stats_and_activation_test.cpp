// Stats merging, the lossless activation dtype choice and error replies.
#include "base/fp16.h"
#include "protocol/protocol.h"
#include "sample_messages.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

namespace skippy::protocol {
namespace {

using testing::limits;

// ---------------------------------------------------------------------------------
// stats

TEST(protocol_stats, NamesAreUniqueAndInWireOrder) {
    std::set<std::string_view> names;
    for (size_t i = 0; i < n_stat_ids; ++i) {
        EXPECT_EQ(static_cast<size_t>(stat_descriptors[i].id), i);
        EXPECT_TRUE(names.insert(stat_descriptors[i].name).second) << stat_descriptors[i].name;
    }
    EXPECT_EQ(stat_descriptors[0].name, "kv_lookup_hits");
    EXPECT_EQ(stat_descriptors[n_stat_ids - 1].name, "max_forward_us");
}

TEST(protocol_stats, AccessorsReachEveryField) {
    stats_block s;
    for (size_t i = 0; i < n_stat_ids; ++i) set_stat(s, static_cast<stat_id>(i), 100 + i);
    for (size_t i = 0; i < n_stat_ids; ++i) EXPECT_EQ(stat_value(s, static_cast<stat_id>(i)), 100 + i);
    EXPECT_EQ(s.kv_lookup_hits, 100u);
    EXPECT_EQ(s.kv_record_stage_mask, 108u);
    EXPECT_EQ(s.max_forward_us, 111u);
    set_stat(s, stat_id::max_queue_us, 1ull << 40);  // a 4-byte stat clamps
    EXPECT_EQ(s.max_queue_us, 0xffffffffu);
}

TEST(protocol_stats, CountersAddMasksOrMaximaMax) {
    stats_block a = testing::sample_stats();
    stats_block b;
    b.kv_lookup_hits = 10;
    b.kv_lookup_misses = 20;
    b.kv_recorded_bytes = 5;
    b.kv_hit_stage_mask = 0b010;
    b.kv_record_stage_mask = 0b1;
    b.max_compute_us = 0x9999;  // larger
    b.max_queue_us = 3;         // smaller
    b.max_forward_us = 0xffffffff;
    const stats_block m = merge_stats(a, b);
    EXPECT_EQ(m.kv_lookup_hits, 11u);
    EXPECT_EQ(m.kv_lookup_misses, 22u);
    EXPECT_EQ(m.kv_lookup_errors, 3u);
    EXPECT_EQ(m.kv_imported_pages, 4u);
    EXPECT_EQ(m.kv_imported_tokens, 0x100u);
    EXPECT_EQ(m.kv_recorded_pages, 5u);
    EXPECT_EQ(m.kv_recorded_bytes, 0x10005u);
    EXPECT_EQ(m.kv_hit_stage_mask, 0b111u);
    EXPECT_EQ(m.kv_record_stage_mask, 0x8000000000000001ull);
    EXPECT_EQ(m.max_compute_us, 0x9999u);
    EXPECT_EQ(m.max_queue_us, 7u);
    EXPECT_EQ(m.max_forward_us, 0xffffffffu);
    EXPECT_EQ(merge_stats(b, a), m);  // order does not matter
}

TEST(protocol_stats, MergingWithZeroChangesNothing) {
    EXPECT_EQ(merge_stats(testing::sample_stats(), stats_block{}), testing::sample_stats());
}

TEST(protocol_stats, CountersSaturateInsteadOfWrapping) {
    stats_block a;
    a.kv_recorded_bytes = std::numeric_limits<uint64_t>::max() - 1;
    a.kv_lookup_hits = std::numeric_limits<uint64_t>::max();
    stats_block b;
    b.kv_recorded_bytes = 5;
    b.kv_lookup_hits = std::numeric_limits<uint64_t>::max();
    const stats_block m = merge_stats(a, b);
    EXPECT_EQ(m.kv_recorded_bytes, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(m.kv_lookup_hits, std::numeric_limits<uint64_t>::max());
}

TEST(protocol_stats, MergeFollowsEachDescriptor) {
    for (const stat_descriptor & d : stat_descriptors) {
        stats_block a, b;
        set_stat(a, d.id, 6);
        set_stat(b, d.id, 3);
        const uint64_t want = d.merge == stat_merge::sum ? 9 : d.merge == stat_merge::bit_or ? 7 : 6;
        EXPECT_EQ(stat_value(merge_stats(a, b), d.id), want) << d.name;
    }
}

// ---------------------------------------------------------------------------------
// activation dtype

TEST(protocol_activation, PicksF16WhenEveryValueIsExact) {
    const float exact[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -14),
                           std::ldexp(1.0f, -24) /* smallest f16 subnormal */, 1023.5f};
    EXPECT_EQ(choose_activation_dtype(exact, activation_dtype::f16), activation_dtype::f16);
    EXPECT_EQ(choose_activation_dtype({}, activation_dtype::f16), activation_dtype::f16);
}

TEST(protocol_activation, FallsBackToF32WhenOneValueWouldRound) {
    for (float inexact : {0.1f, 65520.0f /* overflows f16 */, 1e-9f /* underflows */, 1.0f + 1.0f / 4096}) {
        const float values[] = {1.0f, inexact, 2.0f};
        EXPECT_EQ(choose_activation_dtype(values, activation_dtype::f16), activation_dtype::f32) << inexact;
    }
}

TEST(protocol_activation, PicksBf16OnlyWhenTheLowMantissaIsZero) {
    const float exact[] = {1.0f, -1.5f, bf16_to_f32(0x7f00) /* 2^127 */, bf16_to_f32(0x0d00) /* 2^-101 */};
    EXPECT_EQ(choose_activation_dtype(exact, activation_dtype::bf16), activation_dtype::bf16);
    const float inexact[] = {1.0f, 1.0f + 1.0f / 256};
    EXPECT_EQ(choose_activation_dtype(inexact, activation_dtype::bf16), activation_dtype::f32);
    // f16-exact is not bf16-exact and the other way round.
    const float f16_only[] = {1.0f + 1.0f / 1024};
    EXPECT_EQ(choose_activation_dtype(f16_only, activation_dtype::bf16), activation_dtype::f32);
    EXPECT_EQ(choose_activation_dtype(f16_only, activation_dtype::f16), activation_dtype::f16);
}

TEST(protocol_activation, F32PreferenceIsAlwaysF32) {
    const float values[] = {1.0f, 2.0f};
    EXPECT_EQ(choose_activation_dtype(values, activation_dtype::f32), activation_dtype::f32);
}

// One row per token, except TryRestorePrefillDecode, whose tokens are a cached prefix
// and whose activation is the current token's row alone.
TEST(protocol_activation, RowsAreOnePerTokenExceptForTryRestorePrefillDecode) {
    for (uint16_t k = 1; k <= static_cast<uint16_t>(message_kind::prediction_return_open); ++k) {
        const auto kind = static_cast<message_kind>(k);
        for (uint32_t n : {0u, 1u, 7u}) {
            const uint32_t want = kind == message_kind::try_restore_prefill_decode ? 1 : n;
            EXPECT_EQ(activation_rows(kind, n), want) << message_kind_name(kind) << " " << n;
        }
    }
    const request r = testing::sample_try_restore_prefill_decode();
    ASSERT_TRUE(r.activation);
    EXPECT_EQ(r.activation->values.size(), r.activation->n_embd * activation_rows(r.kind, 2));
}

TEST(protocol_activation, NarrowTypesRoundTripBitForBit) {
    // Every finite f16 value survives encode -> decode as the same f32 and the same bytes.
    std::vector<float> all;
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7c00u) == 0x7c00u) continue;  // inf / NaN
        all.push_back(f16_to_f32(static_cast<uint16_t>(h)));
    }
    request r = testing::base_request(message_kind::prefill, message_phase::prefill);
    r.tokens.assign(all.size() / 8, 1);
    all.resize(r.tokens.size() * 8);
    r.state.prompt_token_count = static_cast<uint32_t>(r.tokens.size());
    activation_frame a;
    a.dtype = activation_dtype::f16;
    a.n_embd = 8;
    a.values = all;
    r.activation = a;
    ASSERT_TRUE(validate_request(r, limits).is_ok());
    const auto bytes = encode_request(r);
    EXPECT_EQ(bytes.size(), request_fixed_bytes + 4 * r.tokens.size() + 24 + 2 * all.size());
    auto back = decode_request(bytes, limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    ASSERT_TRUE(back->activation);
    EXPECT_EQ(back->activation->dtype, activation_dtype::f16);
    ASSERT_EQ(back->activation->values.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
        ASSERT_EQ(float_to_bits(back->activation->values[i]), float_to_bits(all[i])) << i;
    }
    EXPECT_EQ(encode_request(*back), bytes);
}

// ---------------------------------------------------------------------------------
// error replies

TEST(protocol_error_reply, CarriesCodeAndMessage) {
    const reply r = make_error_reply(9, make_error(error_code::not_found, "session 4 is gone"), limits);
    EXPECT_EQ(r.kind, message_kind::error);
    EXPECT_EQ(r.request_id, 9u);
    ASSERT_TRUE(validate_reply(r, limits).is_ok());
    auto back = decode_reply(encode_reply(r), limits);
    ASSERT_TRUE(back.is_ok());
    const status st = error_reply_status(*back);
    EXPECT_EQ(st.code(), error_code::not_found);
    EXPECT_EQ(st.message(), "session 4 is gone");
}

TEST(protocol_error_reply, LongOrBrokenTextIsMadeSendable) {
    protocol_limits small = limits;
    small.max_error_message_bytes = 8;
    // "ab" + a 3-byte character + an invalid byte + "é" (2 bytes) + more.
    const std::string text = "ab\xe2\x82\xac\xff\xc3\xa9zzz";
    const reply r = make_error_reply(1, make_error(error_code::io, text), small);
    EXPECT_TRUE(validate_reply(r, small).is_ok()) << validate_reply(r, small).to_string();
    EXPECT_LE(r.message.size(), 8u);
    EXPECT_EQ(r.message, "ab\xe2\x82\xac\xef\xbf\xbd");  // cut before the "é" that no longer fits
    const reply every_code = make_error_reply(1, make_error(error_code::cancelled, ""), limits);
    EXPECT_TRUE(validate_reply(every_code, limits).is_ok());
}

TEST(protocol_error_reply, TimeoutsAndClosedPeersKeepTheirCodesOnTheWire) {
    for (error_code code : {error_code::timed_out, error_code::peer_closed}) {
        const reply r = make_error_reply(3, make_error(code, "stage 2"), limits);
        auto back = decode_reply(encode_reply(r), limits);
        ASSERT_TRUE(back.is_ok()) << back.error().to_string();
        EXPECT_EQ(error_reply_status(*back).code(), code);
    }
    // The code after the last one is still refused.
    reply unknown = make_error_reply(3, make_error(error_code::peer_closed, "x"), limits);
    unknown.code = static_cast<error_code>(static_cast<uint32_t>(error_code::peer_closed) + 1);
    EXPECT_FALSE(decode_reply(encode_reply(unknown), limits).is_ok());
}

}  // namespace
}  // namespace skippy::protocol
