// Malformed input: every case is a status naming the field, never a crash, an
// assertion or an allocation sized by a lying count (run under ASan+UBSan too).
#include "protocol/protocol.h"
#include "sample_messages.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace skippy::protocol {
namespace {

using testing::patch_u16;
using testing::patch_u32;
using testing::patch_u64;
using testing::reframe;

using testing::limits;

// Byte offsets from docs/protocol.md.
constexpr size_t at_kind = 4, at_flags = 6, at_token_count = 32, at_tokens = 140;
// In sample_prefill(): 3 tokens, then the activation.
constexpr size_t at_activation = at_tokens + 12;
// In sample_configure_generation(): 2 tokens, then the generation config.
constexpr size_t at_generation = at_tokens + 8;

using testing::expect_refused;

// ---------------------------------------------------------------------------------
// handshake

TEST(protocol_malformed, HelloWithBadMagicIsRefused) {
    auto bytes = encode_hello(testing::sample_hello());
    bytes[3] = 'Z';
    expect_refused(decode_hello(bytes), "magic");
    expect_refused(peek_hello_version(bytes), "magic");
    expect_refused(decode_hello_reply(bytes, limits), "magic");
}

TEST(protocol_malformed, HelloFromAnotherVersionIsUnsupportedWithAClearReason) {
    hello h = testing::sample_hello();
    h.version = 1;  // a stage from before kind 9 carried an activation
    const auto bytes = encode_hello(h);
    auto res = decode_hello(bytes);
    expect_refused(res, "peer speaks protocol version 1, this stage speaks 7", error_code::unsupported);
    auto v = peek_hello_version(bytes);
    ASSERT_TRUE(v.is_ok());
    EXPECT_EQ(*v, 1);
}

TEST(protocol_malformed, HelloWithUnknownLinkKindIsRefused) {
    for (uint16_t link : {uint16_t{0}, uint16_t{4}, uint16_t{0xffff}}) {
        auto bytes = encode_hello(testing::sample_hello());
        patch_u16(bytes, 6, link);
        expect_refused(decode_hello(bytes), "link_kind");
    }
}

TEST(protocol_malformed, HelloAuthFieldsAreChecked) {
    for (uint16_t auth : {uint16_t{2}, uint16_t{0xffff}}) {
        auto bytes = encode_hello(testing::sample_hello());
        patch_u16(bytes, 16, auth);
        expect_refused(decode_hello(bytes), "auth");
    }
    auto reserved = encode_hello(testing::sample_hello());
    patch_u16(reserved, 18, 1);
    expect_refused(decode_hello(reserved), "reserved");
    // No auth, yet a nonce: a hello has one encoding.
    auto nonce = encode_hello(testing::sample_hello());
    patch_u16(nonce, 16, 0);
    expect_refused(decode_hello(nonce), "nonce");
}

TEST(protocol_malformed, HelloWithTrailingBytesIsRefused) {
    auto bytes = encode_hello(testing::sample_hello());
    bytes.push_back(0);
    expect_refused(decode_hello(bytes), "trailing");
    auto challenge = encode_auth_challenge(testing::sample_auth_challenge());
    challenge.push_back(0);
    expect_refused(decode_auth_challenge(challenge), "trailing");
}

TEST(protocol_malformed, HelloReplyWithUnknownStatusIsRefused) {
    auto bytes = encode_hello_reply(testing::sample_hello_reply());
    patch_u16(bytes, 6, 5);
    expect_refused(decode_hello_reply(bytes, limits), "status");
}

TEST(protocol_malformed, HelloReplyReasonOverTheLimitOrNotUtf8IsRefused) {
    protocol_limits small = limits;
    small.max_error_message_bytes = 3;
    const auto bytes = encode_hello_reply(testing::sample_hello_reply());  // 4-byte reason
    expect_refused(decode_hello_reply(bytes, small), "reason_len");
    expect_refused(peek_hello_reply_length(bytes, small), "reason_len");
    auto bad = bytes;
    bad[10] = 0xc0;  // an overlong lead byte: never valid UTF-8
    expect_refused(decode_hello_reply(bad, limits), "UTF-8");
}

TEST(protocol_malformed, EveryTruncatedHandshakeMessageIsRefused) {
    const auto h = encode_hello(testing::sample_hello());
    for (size_t n = 0; n < h.size(); ++n) {
        const std::span<const uint8_t> cut(h.data(), n);
        EXPECT_FALSE(decode_hello(cut).is_ok()) << n;
        if (n < hello_prefix_bytes) {
            EXPECT_FALSE(peek_hello_version(cut).is_ok()) << n;
        }
    }
    const auto c = encode_auth_challenge(testing::sample_auth_challenge());
    for (size_t n = 0; n < c.size(); ++n) {
        EXPECT_FALSE(decode_auth_challenge(std::span<const uint8_t>(c.data(), n)).is_ok()) << n;
    }
    const auto r = encode_hello_reply(testing::sample_hello_reply());
    for (size_t n = 0; n < r.size(); ++n) {
        const std::span<const uint8_t> cut(r.data(), n);
        EXPECT_FALSE(decode_hello_reply(cut, limits).is_ok()) << n;
        if (n < hello_reply_fixed_bytes) {
            EXPECT_FALSE(peek_hello_reply_length(cut, limits).is_ok()) << n;
        }
    }
}

// ---------------------------------------------------------------------------------
// frame header

TEST(protocol_malformed, FrameLengthBelowTheMinimumIsRefused) {
    std::vector<uint8_t> bytes(4);
    patch_u32(bytes, 0, static_cast<uint32_t>(min_frame_bytes - 1));
    expect_refused(peek_frame_length(bytes, limits), "minimum");
    // A frame that is as short as it claims to be.
    std::vector<uint8_t> tiny(min_frame_bytes - 1, 0);
    reframe(tiny);
    patch_u16(tiny, at_kind, static_cast<uint16_t>(message_kind::ack));
    expect_refused(decode_reply(tiny, limits), "minimum");
    patch_u16(tiny, at_kind, static_cast<uint16_t>(message_kind::stop));
    expect_refused(decode_request(tiny, limits), "minimum");
    expect_refused(peek_frame_length(std::span<const uint8_t>(bytes.data(), 3), limits), "frame_bytes");
}

TEST(protocol_malformed, FrameLengthAboveTheLimitIsRefused) {
    std::vector<uint8_t> bytes(4);
    patch_u32(bytes, 0, limits.max_frame_bytes + 1);
    expect_refused(peek_frame_length(bytes, limits), "max_frame_bytes");
    patch_u32(bytes, 0, 0xffffffffu);
    expect_refused(peek_frame_length(bytes, limits), "max_frame_bytes");

    protocol_limits small = limits;
    small.max_frame_bytes = 150;
    const auto prefill = encode_request(testing::sample_prefill());  // 188 bytes
    expect_refused(decode_request(prefill, small), "max_frame_bytes");
    EXPECT_FALSE(validate_request(testing::sample_prefill(), small).is_ok());
    const auto err = encode_reply(testing::sample_replies()[3]);  // 123 bytes
    small.max_frame_bytes = 120;
    expect_refused(decode_reply(err, small), "max_frame_bytes");
    EXPECT_FALSE(validate_reply(testing::sample_replies()[3], small).is_ok());
}

TEST(protocol_malformed, FrameLengthNotMatchingTheSpanIsRefused) {
    auto bytes = encode_request(testing::sample_prefill());
    patch_u32(bytes, 0, static_cast<uint32_t>(bytes.size() - 1));
    expect_refused(decode_request(bytes, limits), "frame_bytes");
    patch_u32(bytes, 0, static_cast<uint32_t>(bytes.size() + 1));
    expect_refused(decode_request(bytes, limits), "frame_bytes");
    auto rep = encode_reply(testing::sample_replies()[0]);
    patch_u32(rep, 0, static_cast<uint32_t>(rep.size() + 4));
    expect_refused(decode_reply(rep, limits), "frame_bytes");
}

TEST(protocol_malformed, UnknownKindsAreRefused) {
    for (uint16_t kind : {uint16_t{0}, uint16_t{14}, uint16_t{63}, uint16_t{68}, uint16_t{0xffff}}) {
        auto req = encode_request(testing::sample_trim_session());
        patch_u16(req, at_kind, kind);
        expect_refused(decode_request(req, limits), "kind");
        expect_refused(peek_frame_kind(req), "kind");
        auto rep = encode_reply(testing::sample_replies()[1]);
        patch_u16(rep, at_kind, kind);
        expect_refused(decode_reply(rep, limits), "kind");
    }
}

TEST(protocol_malformed, RequestsAndRepliesAreNotMistakenForEachOther) {
    expect_refused(decode_request(encode_reply(testing::sample_replies()[0]), limits), "is a reply");
    expect_refused(decode_reply(encode_request(testing::sample_prefill()), limits), "is a request");
}

TEST(protocol_malformed, UnknownFlagBitsAreRefused) {
    for (uint16_t bit = 3; bit < 16; ++bit) {
        auto req = encode_request(testing::sample_prefill());
        patch_u16(req, at_flags, static_cast<uint16_t>(0x0004 | (1u << bit)));
        expect_refused(decode_request(req, limits), "unknown flag bits");
        auto rep = encode_reply(testing::sample_replies()[0]);
        patch_u16(rep, at_flags, static_cast<uint16_t>(1u << bit));
        expect_refused(decode_reply(rep, limits), "unknown flag bits");
    }
    auto rep = encode_reply(testing::sample_replies()[0]);
    patch_u16(rep, at_flags, 1);
    expect_refused(decode_reply(rep, limits), "flags");
}

TEST(protocol_malformed, TrailingBytesAreRefused) {
    for (const request & r : testing::sample_requests()) {
        auto bytes = encode_request(r);
        bytes.push_back(0);
        reframe(bytes);
        // A frame with an activation reads the extra byte as part of the values.
        expect_refused(decode_request(bytes, limits), r.activation ? "activation.values" : "trailing");
    }
    for (const reply & r : testing::sample_replies()) {
        auto bytes = encode_reply(r);
        bytes.push_back(0);
        reframe(bytes);
        expect_refused(decode_reply(bytes, limits), "trailing");
    }
}

// Every cut of a valid frame is refused: once as it arrives (length field too big)
// and once with the length field patched to the cut, so the body decoder meets the
// end of its span at every field.
TEST(protocol_malformed, EveryTruncationOfEveryKindIsRefused) {
    for (const request & r : testing::sample_requests()) {
        const auto full = encode_request(r);
        for (size_t n = 0; n < full.size(); ++n) {
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
            EXPECT_FALSE(decode_request(cut, limits).is_ok()) << message_kind_name(r.kind) << " cut at " << n;
            if (n >= 4) {
                reframe(cut);
                auto res = decode_request(cut, limits);
                EXPECT_FALSE(res.is_ok()) << message_kind_name(r.kind) << " reframed at " << n;
            }
        }
    }
    for (const reply & r : testing::sample_replies()) {
        const auto full = encode_reply(r);
        for (size_t n = 0; n < full.size(); ++n) {
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
            EXPECT_FALSE(decode_reply(cut, limits).is_ok()) << message_kind_name(r.kind) << " cut at " << n;
            if (n >= 4) {
                reframe(cut);
                EXPECT_FALSE(decode_reply(cut, limits).is_ok()) << message_kind_name(r.kind) << " reframed at " << n;
            }
        }
    }
}

// A truncation names the field that ran out.
TEST(protocol_malformed, TruncationNamesTheFieldThatRanOut) {
    // Cut at byte 120, inside the stats block (which starts at 56), length patched.
    auto bytes = encode_request(testing::sample_prefill());
    bytes.resize(120);
    reframe(bytes);
    expect_refused(decode_request(bytes, limits), "kv_record_stage_mask (byte 120): truncated");

    // Cut inside the activation values, length patched.
    auto act = encode_request(testing::sample_prefill());
    act.resize(act.size() - 1);
    reframe(act);
    expect_refused(decode_request(act, limits), "activation.values");
}

// ---------------------------------------------------------------------------------
// counts over limits

TEST(protocol_malformed, TokenCountOverTheLimitIsRefusedBeforeReading) {
    protocol_limits small = limits;
    small.max_tokens_per_message = 2;
    expect_refused(decode_request(encode_request(testing::sample_prefill()), small), "max_tokens_per_message");
    EXPECT_FALSE(validate_request(testing::sample_prefill(), small).is_ok());
    // A huge count in a small frame: refused by the limit, then by the bytes left.
    auto bytes = encode_request(testing::sample_control(message_kind::probe_prefill, {1, 2, 3}));
    patch_u32(bytes, at_token_count, 0xffffffffu);
    expect_refused(decode_request(bytes, limits), "token_count");
    patch_u32(bytes, at_token_count, limits.max_tokens_per_message);
    expect_refused(decode_request(bytes, limits), "truncated");
}

TEST(protocol_malformed, LogitBiasOverTheLimitIsRefused) {
    protocol_limits small = limits;
    small.max_logit_bias = 0;
    const request r = testing::sample_configure_generation();
    expect_refused(decode_request(encode_request(r), small), "max_logit_bias");
    EXPECT_FALSE(validate_request(r, small).is_ok());
    auto bytes = encode_request(r);
    patch_u32(bytes, at_generation + 40, 0x10000000u);
    expect_refused(decode_request(bytes, limits), "n_logit_bias");
}

TEST(protocol_malformed, CacheKeyOverTheLimitIsRefused) {
    protocol_limits small = limits;
    small.max_cache_key_bytes = 1;
    const request r = testing::sample_configure_generation();
    expect_refused(decode_request(encode_request(r), small), "max_cache_key_bytes");
    EXPECT_FALSE(validate_request(r, small).is_ok());
    auto bytes = encode_request(r);
    patch_u16(bytes, at_generation + 57, 0xffff);
    expect_refused(decode_request(bytes, limits), "cache_key_len");
}

TEST(protocol_malformed, GrammarOverTheLimitIsRefused) {
    protocol_limits small = limits;
    small.max_grammar_bytes = 4;
    const request r = testing::sample_configure_generation();
    expect_refused(decode_request(encode_request(r), small), "max_grammar_bytes");
    EXPECT_FALSE(validate_request(r, small).is_ok());
    // A length past the limit, and one within it but past the frame's end.
    auto bytes = encode_request(r);
    patch_u32(bytes, at_generation + 61, 0xffffffffu);
    expect_refused(decode_request(bytes, limits), "grammar_len");
    patch_u32(bytes, at_generation + 61, 17);  // 12 bytes of grammar and 4 of n_logprobs are left
    expect_refused(decode_request(bytes, limits), "grammar");
    // The grammar's bytes are opaque here: any bytes round-trip (the final stage compiles them).
    request odd = r;
    odd.generation->sampling.grammar = std::string("\0\xff root", 7);
    auto back = decode_request(encode_request(odd), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, odd);
}

TEST(protocol_malformed, NLogprobsOverTheBoundIsRefused) {
    request r = testing::sample_configure_generation();
    r.generation->sampling.n_logprobs = max_logprobs;
    ASSERT_TRUE(decode_request(encode_request(r), limits).is_ok());
    r.generation->sampling.n_logprobs = max_logprobs + 1;
    EXPECT_FALSE(validate_request(r, limits).is_ok());
    expect_refused(decode_request(encode_request(r), limits), "n_logprobs");
    auto bytes = encode_request(testing::sample_configure_generation());
    patch_u32(bytes, at_generation + 77, 0xffffffffu);  // after the 12-byte grammar
    expect_refused(decode_request(bytes, limits), "n_logprobs");
}

TEST(protocol_malformed, PredictedTokenLogprobsAreBoundedAndChecked) {
    const reply good = testing::sample_replies()[1];  // 2 entries
    ASSERT_TRUE(decode_reply(encode_reply(good), limits).is_ok());
    // Counts: over the bound, and more than the frame holds.
    auto bytes = encode_reply(good);
    patch_u32(bytes, 108, max_logprobs + 1);
    expect_refused(decode_reply(bytes, limits), "n_logprobs");
    patch_u32(bytes, 108, 3);
    expect_refused(decode_reply(bytes, limits), "logprobs");
    // Values: a positive or NaN logprob, a negative token.
    auto set = [&](size_t at, uint32_t v) {
        auto b = encode_reply(good);
        patch_u32(b, at, v);
        return b;
    };
    expect_refused(decode_reply(set(112, 0x3f800000u), limits), "logprob");        // +1.0
    expect_refused(decode_reply(set(120, 0x7fc00000u), limits), "top_logprobs.logprob");  // NaN
    expect_refused(decode_reply(set(116, 0xffffffffu), limits), "top_logprobs.token");    // -1
    // The encoder's side refuses the same.
    reply r = good;
    r.top_logprobs.resize(max_logprobs + 1);
    EXPECT_FALSE(validate_reply(r, limits).is_ok());
    r = good;
    r.logprob = 0.5f;
    EXPECT_FALSE(validate_reply(r, limits).is_ok());
    r = good;
    r.top_logprobs.clear();  // none, yet a logprob
    EXPECT_FALSE(validate_reply(r, limits).is_ok());
}

TEST(protocol_malformed, ActivationWidthOverTheLimitOrZeroIsRefused) {
    protocol_limits small = limits;
    small.max_embd = 1;
    const request r = testing::sample_prefill();  // n_embd 2
    expect_refused(decode_request(encode_request(r), small), "activation.n_embd");
    EXPECT_FALSE(validate_request(r, small).is_ok());
    auto bytes = encode_request(r);
    patch_u32(bytes, at_activation + 20, 0);
    expect_refused(decode_request(bytes, limits), "activation.n_embd");
    patch_u32(bytes, at_activation + 20, 0xffffffffu);
    expect_refused(decode_request(bytes, limits), "activation.n_embd");
}

TEST(protocol_malformed, PredictedTokensOverTheLimitOrNoneAreRefused) {
    protocol_limits small = limits;
    small.max_predicted_tokens = 1;
    const reply r = testing::sample_replies()[2];  // 2 tokens
    expect_refused(decode_reply(encode_reply(r), small), "max_predicted_tokens");
    EXPECT_FALSE(validate_reply(r, small).is_ok());
    auto bytes = encode_reply(r);
    patch_u32(bytes, 100, 0);
    expect_refused(decode_reply(bytes, limits), "n_tokens");
    patch_u32(bytes, 100, 4096);
    expect_refused(decode_reply(bytes, limits), "truncated");
}

TEST(protocol_malformed, ErrorMessageOverTheLimitIsRefused) {
    protocol_limits small = limits;
    small.max_error_message_bytes = 4;
    const reply r = testing::sample_replies()[3];
    expect_refused(decode_reply(encode_reply(r), small), "max_error_message_bytes");
    EXPECT_FALSE(validate_reply(r, small).is_ok());
    auto bytes = encode_reply(r);
    patch_u32(bytes, 104, 0xffffffffu);
    expect_refused(decode_reply(bytes, limits), "message_len");
}

// ---------------------------------------------------------------------------------
// activation

TEST(protocol_malformed, ActivationByteCountMismatchIsRefused) {
    auto bytes = encode_request(testing::sample_prefill());
    patch_u32(bytes, at_activation + 20, 3);  // n_embd 3: needs 18 bytes of f16, 12 follow
    expect_refused(decode_request(bytes, limits), "activation.values");
    auto wider = encode_request(testing::sample_prefill());
    wider[at_activation] = 0;  // f32: needs 24 bytes, 12 follow
    expect_refused(decode_request(wider, limits), "activation.values");
}

TEST(protocol_malformed, ActivationTokenCountMustEqualTheRequests) {
    auto bytes = encode_request(testing::sample_prefill());
    patch_u32(bytes, at_activation + 16, 2);
    expect_refused(decode_request(bytes, limits), "activation.n_tokens");
    request r = testing::sample_prefill();
    r.activation->values.pop_back();
    EXPECT_FALSE(validate_request(r, limits).is_ok());
}

TEST(protocol_malformed, ActivationDescriptorFieldsAreChecked) {
    auto dtype = encode_request(testing::sample_prefill());
    dtype[at_activation] = 3;
    expect_refused(decode_request(dtype, limits), "activation.dtype");
    for (size_t i = 1; i <= 3; ++i) {
        auto reserved = encode_request(testing::sample_prefill());
        reserved[at_activation + i] = 1;
        expect_refused(decode_request(reserved, limits), "activation.reserved");
    }
    auto layers = encode_request(testing::sample_prefill());
    patch_u32(layers, at_activation + 8, 3);  // layer_start 3 > layer_end 2
    expect_refused(decode_request(layers, limits), "activation.layer_end");
}

TEST(protocol_malformed, NonFiniteActivationValuesAreRefused) {
    auto f16 = encode_request(testing::sample_prefill());
    patch_u16(f16, at_activation + 24 + 2 * 3, 0x7c00);  // +inf in f16
    expect_refused(decode_request(f16, limits), "token 1, dim 1");
    patch_u16(f16, at_activation + 24 + 2 * 3, 0xfe00);  // NaN
    expect_refused(decode_request(f16, limits), "not finite");

    auto f32 = encode_request(testing::sample_prefill_final());
    const size_t values_at = f32.size() - 8;
    patch_u32(f32, values_at, 0x7fc00000u);
    expect_refused(decode_request(f32, limits), "not finite");

    auto bf16 = encode_request(testing::sample_decode());
    patch_u16(bf16, bf16.size() - 2, 0xff80);  // -inf in bf16
    expect_refused(decode_request(bf16, limits), "not finite");

    request r = testing::sample_prefill();
    r.activation->values[0] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(validate_request(r, limits).is_ok());
}

// ---------------------------------------------------------------------------------
// generation config

TEST(protocol_malformed, NonFiniteSamplingFloatsAreRefused) {
    struct field_case { const char * name; size_t offset; };
    const field_case floats[] = {
        {"generation.temperature", 0},        {"generation.top_p", 8},
        {"generation.min_p", 12},             {"generation.repeat_penalty", 24},
        {"generation.presence_penalty", 28},  {"generation.frequency_penalty", 32},
        {"generation.logit_bias.bias", 48},
    };
    for (const auto & f : floats) {
        for (uint32_t bits : {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f800001u}) {
            auto bytes = encode_request(testing::sample_configure_generation());
            patch_u32(bytes, at_generation + f.offset, bits);
            expect_refused(decode_request(bytes, limits), f.name);
        }
    }
    request r = testing::sample_configure_generation();
    r.generation->sampling.temperature = std::nanf("");
    EXPECT_FALSE(validate_request(r, limits).is_ok());
    r = testing::sample_configure_generation();
    r.generation->sampling.logit_bias[0].second = -std::numeric_limits<float>::infinity();
    EXPECT_FALSE(validate_request(r, limits).is_ok());
}

TEST(protocol_malformed, GenerationConfigFieldsAreChecked) {
    auto mode = encode_request(testing::sample_configure_generation());
    mode[at_generation + 52] = 3;
    expect_refused(decode_request(mode, limits), "generation.cache_mode");
    auto bias_token = encode_request(testing::sample_configure_generation());
    patch_u32(bias_token, at_generation + 44, 0xffffffffu);
    expect_refused(decode_request(bias_token, limits), "generation.logit_bias.token");
}

// ---------------------------------------------------------------------------------
// per-kind rules and state header: each violation is refused by validate_request (our
// side) and, encoded anyway, by decode_request (the peer's side).

struct rule_case {
    const char *              name;
    request                   r;
    std::string_view          field;  // named in the decode error
    error_code                code = error_code::invalid_data;
};

std::vector<rule_case> rule_violations() {
    using testing::sample_control;
    std::vector<rule_case> cases;
    auto add = [&](const char * name, request r, std::string_view field, error_code code = error_code::invalid_data) {
        cases.push_back({name, std::move(r), field, code});
    };
    {
        request r = testing::sample_prefill();
        r.tokens.clear();
        r.activation.reset();
        add("prefill without tokens", r, "token_count");
    }
    {
        request r = testing::sample_prefill_final();
        r.tokens.clear();
        r.positions.clear();
        r.activation.reset();
        add("prefill_final without tokens", r, "token_count");
    }
    {
        request r = testing::sample_decode();
        r.tokens = {1, 2};
        r.activation.reset();
        add("decode with two tokens", r, "exactly 1");
    }
    {
        request r = testing::sample_decode();
        r.tokens.clear();
        r.activation.reset();
        add("decode without a token", r, "token_count");
    }
    add("stop with tokens", sample_control(message_kind::stop, {1}), "token_count");
    add("trim with tokens", sample_control(message_kind::trim_session, {1}), "token_count");
    add("prediction_return_open with tokens", sample_control(message_kind::prediction_return_open, {1}), "token_count");
    add("probe without tokens", sample_control(message_kind::probe_prefill, {}), "token_count");
    add("restore without tokens", sample_control(message_kind::restore_prefill, {}), "token_count");
    add("try_restore without tokens", sample_control(message_kind::try_restore_prefill, {}), "token_count");
    {
        request r = testing::sample_configure_generation();
        r.generation.reset();
        add("configure_generation without a config", r, "requires a generation config");
    }
    {
        request r = testing::sample_prefill();
        r.generation = testing::sample_generation();
        add("prefill with a config", r, "may not carry a generation config");
    }
    {
        request r = sample_control(message_kind::stop, {});
        r.generation = testing::sample_generation();
        add("stop with a config", r, "may not carry a generation config");
    }
    {
        request r = sample_control(message_kind::probe_prefill, {1, 2});
        r.positions = {0, 1};
        add("probe with positions", r, "may not carry positions");
    }
    {
        request r = sample_control(message_kind::restore_prefill, {1});
        r.activation = testing::sample_decode().activation;
        add("restore with an activation", r, "may not carry an activation");
    }
    {
        request r = testing::sample_try_restore_prefill_decode();
        r.activation.reset();
        add("try_restore_decode without an activation", r, "requires an activation");
    }
    {
        request r = testing::sample_configure_generation();
        r.tokens = {1};
        r.activation = testing::sample_decode().activation;
        add("configure with an activation", r, "may not carry an activation");
    }
    {
        request r = testing::sample_prefill();
        r.state.phase = message_phase::decode;
        add("prefill in the decode phase", r, "must have phase prefill");
    }
    {
        request r = sample_control(message_kind::stop, {});
        r.state.phase = message_phase::none;
        add("stop with phase none", r, "must have phase control");
    }
    {
        request r = sample_control(message_kind::stop, {});
        r.state.phase = static_cast<message_phase>(9);
        add("unknown phase", r, "unknown phase 9");
    }
    {
        request r = testing::sample_decode();
        r.state.version = 2;
        add("state header version 2", r, "state.version", error_code::unsupported);
    }
    {
        request r = testing::sample_decode();
        r.state.flags = 0x80;
        add("state flags", r, "state.flags");
    }
    {
        request r = testing::sample_decode();
        r.state.current_token = -2;
        add("current token below -1", r, "state.current_token");
    }
    {
        request r = testing::sample_try_restore_prefill_decode();
        r.state.current_token = -1;
        add("try_restore_decode without a current token", r, "needs a current token");
    }
    {
        request r = testing::sample_prefill_final();
        r.state.prompt_token_count = 6;
        add("prefill_final not at the prompt end", r, "state.prompt_token_count");
    }
    {
        request r = testing::sample_prefill();
        r.state.prompt_token_count = 2;
        add("prefill past the prompt end", r, "state.prompt_token_count");
    }
    {
        request r = testing::sample_trim_session();
        r.pos_start = -1;
        add("negative pos_start", r, "pos_start");
    }
    {
        request r = testing::sample_control(message_kind::probe_prefill, {1, 2});
        r.pos_start = std::numeric_limits<int32_t>::max() - 1;
        add("positions past 2^31 - 1", r, "pos_start");
    }
    {
        // The prefix ends at 2^31 - 1, but the decoded token would sit there.
        request r = testing::sample_try_restore_prefill_decode();
        r.pos_start = std::numeric_limits<int32_t>::max() - 2;
        add("try_restore_decode's decoded token past 2^31 - 1", r, "the decoded current token");
    }
    {
        request r = testing::sample_control(message_kind::probe_prefill, {1, -5});
        add("negative token id", r, "tokens");
    }
    {
        request r = testing::sample_prefill_final();
        r.positions = {3, -1};
        add("negative position", r, "positions");
    }
    return cases;
}

TEST(protocol_malformed, PerKindRuleViolationsAreRefusedOnBothSides) {
    for (const rule_case & c : rule_violations()) {
        SCOPED_TRACE(c.name);
        const status mine = validate_request(c.r, limits);
        EXPECT_FALSE(mine.is_ok());
        if (c.code == error_code::invalid_data) {
            EXPECT_EQ(mine.code(), error_code::invalid_argument) << mine.to_string();
        } else {
            EXPECT_EQ(mine.code(), c.code) << mine.to_string();
        }
        // The encoder is total for these (it asserts only on positions/tokens sizes),
        // so it can build the frame a broken peer would send.
        expect_refused(decode_request(encode_request(c.r), limits), c.field, c.code);
    }
}

// The last start the position range allows: the decoded token at 2^31 - 2 and the end
// of the range at 2^31 - 1, one position earlier than for a plain prefix of the same length.
TEST(protocol_malformed, TryRestorePrefillDecodeRangeIncludesTheDecodedToken) {
    request r = testing::sample_try_restore_prefill_decode();  // 2-token prefix
    r.pos_start = std::numeric_limits<int32_t>::max() - 3;
    ASSERT_TRUE(validate_request(r, limits).is_ok()) << validate_request(r, limits).to_string();
    auto back = decode_request(encode_request(r), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    request prefix_only = testing::sample_control(message_kind::try_restore_prefill, {1, 2});
    prefix_only.pos_start = std::numeric_limits<int32_t>::max() - 2;
    EXPECT_TRUE(validate_request(prefix_only, limits).is_ok());
}

// A TryRestorePrefillDecode frame with prefix `tokens` whose activation claims and
// holds `rows` rows (copies of the sample's f32 row). The encoder cannot write one
// with rows != 1 (it sizes the section by activation_rows), so the bytes are patched.
std::vector<uint8_t> try_restore_decode_frame(std::vector<int32_t> tokens, uint32_t rows) {
    request r = testing::sample_try_restore_prefill_decode();
    r.tokens = std::move(tokens);
    auto bytes = encode_request(r);
    const size_t at = at_tokens + 4 * r.tokens.size();  // the activation section
    const size_t row_bytes = 4 * r.activation->n_embd;
    const std::vector<uint8_t> row(bytes.end() - static_cast<std::ptrdiff_t>(row_bytes), bytes.end());
    bytes.resize(at + 24);
    patch_u32(bytes, at + 16, rows);
    for (uint32_t i = 0; i < rows; ++i) bytes.insert(bytes.end(), row.begin(), row.end());
    reframe(bytes);
    return bytes;
}

// The activation is the current token's row alone: not one per prefix token (the
// rule of every other kind), and not two or none. Refused by the validator (our side)
// and, with the frame built anyway, by the decoder (the peer's side).
TEST(protocol_malformed, TryRestorePrefillDecodeActivationIsExactlyOneRow) {
    auto one = decode_request(try_restore_decode_frame({1, 2, 3}, 1), limits);
    ASSERT_TRUE(one.is_ok()) << one.error().to_string();  // the helper builds valid frames

    struct row_case { const char * name; std::vector<int32_t> tokens; uint32_t rows; };
    const row_case cases[] = {
        {"two rows for a 3-token prefix", {1, 2, 3}, 2},
        {"one row per prefix token (n_tokens == token_count)", {1, 2}, 2},
        {"one row per prefix token, longer prefix", {1, 2, 3, 4}, 4},
        {"no rows", {1, 2}, 0},
    };
    for (const row_case & c : cases) {
        SCOPED_TRACE(c.name);
        request r = testing::sample_try_restore_prefill_decode();
        r.tokens = c.tokens;
        r.activation->values.resize(static_cast<size_t>(c.rows) * r.activation->n_embd, 1.0f);
        const status mine = validate_request(r, limits);
        EXPECT_EQ(mine.code(), error_code::invalid_argument) << mine.to_string();
        EXPECT_NE(mine.message().find("activation.values"), std::string::npos) << mine.to_string();
        const auto bytes = try_restore_decode_frame(c.tokens, c.rows);
        expect_refused(decode_request(bytes, limits), "activation.n_tokens");
        expect_refused(decode_request(bytes, limits), "the current token's row only");
    }
}

TEST(protocol_malformed, ReplyFieldsAreChecked) {
    auto outcome = encode_reply(testing::sample_replies()[0]);
    outcome[100] = 5;
    expect_refused(decode_reply(outcome, limits), "outcome");
    auto reserved = encode_reply(testing::sample_replies()[0]);
    reserved[102] = 1;
    expect_refused(decode_reply(reserved, limits), "reserved");
    auto restored = encode_reply(testing::sample_replies()[0]);
    patch_u64(restored, 104, 0x8000000000000000ull);
    expect_refused(decode_reply(restored, limits), "restored_tokens");
    auto token = encode_reply(testing::sample_replies()[1]);
    patch_u32(token, 100, 0xffffffffu);
    expect_refused(decode_reply(token, limits), "token");
    auto tokens = encode_reply(testing::sample_replies()[2]);
    patch_u32(tokens, 108, 0x80000000u);
    expect_refused(decode_reply(tokens, limits), "tokens");
    for (uint32_t code : {0u, 14u, 0xffffffffu}) {  // 14: one past peer_closed
        auto err = encode_reply(testing::sample_replies()[3]);
        patch_u32(err, 100, code);
        expect_refused(decode_reply(err, limits), "error_code");
    }
    auto text = encode_reply(testing::sample_replies()[3]);
    text[108] = 0xff;
    expect_refused(decode_reply(text, limits), "UTF-8");

    reply bad = testing::sample_replies()[3];
    bad.code = error_code::ok;
    EXPECT_FALSE(validate_reply(bad, limits).is_ok());
    bad = testing::sample_replies()[3];
    bad.message = "\xed\xa0\x80";  // a UTF-16 surrogate encoded as UTF-8
    EXPECT_FALSE(validate_reply(bad, limits).is_ok());
    bad = testing::sample_replies()[0];
    bad.restored_tokens = -1;
    EXPECT_FALSE(validate_reply(bad, limits).is_ok());
    bad.kind = message_kind::stop;
    EXPECT_FALSE(validate_reply(bad, limits).is_ok());
}

// ---------------------------------------------------------------------------------
// random corruption

// Flipping bytes of valid frames never crashes; whatever still decodes re-encodes to
// the very same bytes (the format has one encoding per message).
TEST(protocol_malformed, RandomCorruptionIsRefusedOrDecodesCanonically) {
    std::mt19937_64 rng(7);
    auto corrupt = [&](std::vector<uint8_t> bytes) {
        const int n_flips = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < n_flips; ++i) bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        if (rng() % 2) reframe(bytes);
        return bytes;
    };
    int accepted = 0;
    for (int round = 0; round < 300; ++round) {
        for (const request & r : testing::sample_requests()) {
            const auto bytes = corrupt(encode_request(r));
            auto res = decode_request(bytes, limits);
            if (res.is_ok()) {
                ++accepted;
                EXPECT_EQ(encode_request(*res), bytes);
            }
        }
        for (const reply & r : testing::sample_replies()) {
            const auto bytes = corrupt(encode_reply(r));
            auto res = decode_reply(bytes, limits);
            if (res.is_ok()) {
                ++accepted;
                EXPECT_EQ(encode_reply(*res), bytes);
            }
        }
    }
    EXPECT_GT(accepted, 0);  // flips in ids and stats are legal and must round-trip
}

}  // namespace
}  // namespace skippy::protocol
