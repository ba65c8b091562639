// Step frames (docs/protocol.md, "Steps"): round trips, and every malformed lane list,
// count and entry refused with a status naming the field, before any allocation a
// lying count would size.
#include "protocol/protocol.h"
#include "sample_messages.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

namespace skippy::protocol {
namespace {

using testing::patch_u16;
using testing::patch_u32;
using testing::patch_u64;
using testing::reframe;

using testing::limits;

// Offsets in sample_step(): the header, entry 0 (one token), entry 1 (two tokens).
constexpr size_t at_step_flags = 6, at_n_entries = 20, at_entry0 = step_fixed_bytes;
constexpr size_t at_entry1 = at_entry0 + step_entry_fixed_bytes + 4;
// Within an entry (a request's fixed part less its 4-byte length).
constexpr size_t entry_kind = 0, entry_flags = 2, entry_session = 12, entry_token_count = 28, entry_phase = 34;

using testing::expect_refused;

step_frame as_received(step_frame s) {
    s.activation.dtype = choose_activation_dtype(s.activation.values, s.activation.dtype);
    return s;
}

TEST(protocol_step, SampleRoundTripsAndPeeksAsAStep) {
    const step_frame s = testing::sample_step();
    ASSERT_TRUE(validate_step(s, limits).is_ok()) << validate_step(s, limits).to_string();
    const auto bytes = encode_step(s);
    EXPECT_EQ(bytes.size(), encoded_step_bytes(s));
    auto back = decode_step(bytes, limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, as_received(s));
    EXPECT_EQ(back->activation.dtype, activation_dtype::bf16);
    auto n = peek_frame_length(bytes, limits);
    ASSERT_TRUE(n.is_ok());
    EXPECT_EQ(*n, bytes.size());
    EXPECT_EQ(*peek_frame_kind(bytes), message_kind::step);
}

TEST(protocol_step, OtherFramesAreNotSteps) {
    for (const request & r : testing::sample_requests()) expect_refused(decode_step(encode_request(r), limits), "kind");
    for (const reply & r : testing::sample_replies()) expect_refused(decode_step(encode_reply(r), limits), "kind");
    expect_refused(decode_request(encode_step(testing::sample_step()), limits), "is a step");
}

TEST(protocol_step, EntryCountMustBeInRangeAndFitTheFrame) {
    auto none = encode_step(testing::sample_step());
    patch_u32(none, at_n_entries, 0);
    expect_refused(decode_step(none, limits), "n_entries");
    // A count that no frame of this size could hold is refused before the entries
    // are allocated.
    auto lying = encode_step(testing::sample_step());
    patch_u32(lying, at_n_entries, 1000);
    expect_refused(decode_step(lying, limits), "entries");
    protocol_limits one = limits;
    one.max_step_entries = 1;
    expect_refused(decode_step(encode_step(testing::sample_step()), one), "max_step_entries");
    step_frame empty = testing::sample_step();
    empty.entries.clear();
    empty.activation.values.clear();
    const status st = validate_step(empty, limits);
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("n_entries"), std::string::npos) << st.to_string();
}

TEST(protocol_step, ALaneNamedTwiceIsAMalformedLaneList) {
    auto bytes = encode_step(testing::sample_step());
    patch_u64(bytes, at_entry1 + entry_session, 3);  // entry 0 is lane 3
    expect_refused(decode_step(bytes, limits), "lane 3 appears twice");
    step_frame s = testing::sample_step();
    s.entries[1].session_id = 3;
    const status st = validate_step(s, limits);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("lane 3 appears twice"), std::string::npos) << st.to_string();
}

TEST(protocol_step, OnlyPrefillAndDecodeEntries) {
    for (uint16_t kind : {uint16_t{4}, uint16_t{9}, uint16_t{12}, uint16_t{64}, uint16_t{0}}) {
        auto bytes = encode_step(testing::sample_step());
        patch_u16(bytes, at_entry0 + entry_kind, kind);
        expect_refused(decode_step(bytes, limits), "entries[0].kind");
    }
    step_frame s = testing::sample_step();
    s.entries[0].kind = message_kind::stop;
    EXPECT_EQ(validate_step(s, limits).code(), error_code::invalid_argument);
}

TEST(protocol_step, FlagsAreChecked) {
    auto bytes = encode_step(testing::sample_step());
    patch_u16(bytes, at_step_flags, 0);
    expect_refused(decode_step(bytes, limits), "flags");
    auto entry = encode_step(testing::sample_step());
    patch_u16(entry, at_entry1 + entry_flags, 2);
    expect_refused(decode_step(entry, limits), "entries[1].flags");
}

TEST(protocol_step, EveryEntryFollowsTheRulesOfItsKind) {
    // A decode of two tokens: the decode rule (exactly one), named with the entry.
    step_frame two = testing::sample_step();
    two.entries[0].tokens = {42, 43};
    two.activation.values.insert(two.activation.values.begin() + 2, {0.5f, 0.5f});
    const auto bytes = encode_step(two);
    expect_refused(decode_step(bytes, limits), "entries[0].token_count");
    EXPECT_EQ(validate_step(two, limits).code(), error_code::invalid_argument);
    // A phase that does not match the kind.
    auto phase = encode_step(testing::sample_step());
    phase[at_entry1 + entry_phase] = static_cast<uint8_t>(message_phase::decode);
    expect_refused(decode_step(phase, limits), "entries[1].state.phase");
    // Prefill past the prompt.
    step_frame past = testing::sample_step();
    past.entries[1].state.prompt_token_count = 1;
    expect_refused(decode_step(encode_step(past), limits), "entries[1].state.prompt_token_count");
}

TEST(protocol_step, TokenCountsAreBoundedBeforeReading) {
    auto huge = encode_step(testing::sample_step());
    patch_u32(huge, at_entry0 + entry_token_count, 0xffffffffu);
    expect_refused(decode_step(huge, limits), "token_count");
    // The entries together may hold at most max_tokens_per_message tokens.
    protocol_limits two = limits;
    two.max_tokens_per_message = 2;
    expect_refused(decode_step(encode_step(testing::sample_step()), two), "max_tokens_per_message");
    EXPECT_FALSE(validate_step(testing::sample_step(), two).is_ok());
}

TEST(protocol_step, TheActivationHoldsEveryEntrysRows) {
    // n_tokens must be the sum of the entries' token counts (3 here).
    auto bytes = encode_step(testing::sample_step());
    const size_t activation_at = at_entry1 + step_entry_fixed_bytes + 8;
    patch_u32(bytes, activation_at + 16, 2);
    expect_refused(decode_step(bytes, limits), "activation.n_tokens");
    step_frame s = testing::sample_step();
    s.activation.values.pop_back();
    EXPECT_EQ(validate_step(s, limits).code(), error_code::invalid_argument);
    s = testing::sample_step();
    s.activation.values[3] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(validate_step(s, limits).code(), error_code::invalid_argument);
}

TEST(protocol_step, EveryTruncationAndTrailingByteIsRefused) {
    const auto bytes = encode_step(testing::sample_step());
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
        EXPECT_FALSE(decode_step(cut, limits).is_ok()) << "cut at " << n;
        if (n >= 4) {
            reframe(cut);
            EXPECT_FALSE(decode_step(cut, limits).is_ok()) << "reframed at " << n;
        }
    }
    auto longer = bytes;
    longer.push_back(0);
    reframe(longer);
    EXPECT_FALSE(decode_step(longer, limits).is_ok());
}

// Random steps of random lanes and sizes round-trip exactly; random corruption of a
// valid step is refused or decodes to a message that re-encodes to the same bytes.
TEST(protocol_step, RandomStepsRoundTripAndCorruptionDecodesCanonically) {
    std::mt19937 rng(7);
    for (int round = 0; round < 200; ++round) {
        step_frame s;
        s.step_id = rng();
        s.source_stage = rng() % 4;
        const int n_entries = 1 + static_cast<int>(rng() % 6);
        std::vector<uint64_t> lanes(16);
        for (size_t i = 0; i < lanes.size(); ++i) lanes[i] = i;
        std::shuffle(lanes.begin(), lanes.end(), rng);
        s.activation.n_embd = 1 + rng() % 4;
        s.activation.layer_start = 1;
        s.activation.layer_end = 3;
        uint32_t rows = 0;
        for (int i = 0; i < n_entries; ++i) {
            step_entry e;
            e.session_id = lanes[static_cast<size_t>(i)];
            e.request_id = rng();
            const bool decode = rng() % 2 == 0;
            e.kind = decode ? message_kind::decode : message_kind::prefill;
            e.state.phase = decode ? message_phase::decode : message_phase::prefill;
            const size_t n = decode ? 1 : 1 + rng() % 5;
            e.pos_start = rng() % 100;
            e.state.prompt_token_count = static_cast<uint32_t>(e.pos_start + static_cast<int64_t>(n) + rng() % 3);
            for (size_t t = 0; t < n; ++t) e.tokens.push_back(static_cast<int32_t>(rng() % 1000));
            if (decode) e.state.current_token = e.tokens[0];
            rows += static_cast<uint32_t>(n);
            s.entries.push_back(std::move(e));
        }
        for (uint32_t v = 0; v < rows * s.activation.n_embd; ++v) s.activation.values.push_back(static_cast<float>(rng() % 64) / 8.0f);
        ASSERT_TRUE(validate_step(s, limits).is_ok()) << validate_step(s, limits).to_string();
        auto bytes = encode_step(s);
        auto back = decode_step(bytes, limits);
        ASSERT_TRUE(back.is_ok()) << back.error().to_string();
        EXPECT_EQ(*back, as_received(s));
        for (int k = 0; k < 8; ++k) {
            auto bad = bytes;
            bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
            auto res = decode_step(bad, limits);
            if (res.is_ok()) {
                EXPECT_TRUE(validate_step(*res, limits).is_ok());
                EXPECT_EQ(encode_step(*res), bad);
            }
        }
    }
}

}  // namespace
}  // namespace skippy::protocol
