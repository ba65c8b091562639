// Golden bytes: every message kind encodes to exactly the bytes docs/protocol.md
// describes, written out here by hand, and decodes back to the same message. Any
// change to the format breaks these; update the spec, protocol_version and these
// goldens in the same commit.
#include "protocol/protocol.h"
#include "sample_messages.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace skippy::protocol {
namespace {

using testing::from_hex;
using testing::normalize_hex;
using testing::to_hex;

using testing::limits;

// request_id 0x0102030405060708, session_id 0x1112131415161718, little-endian.
const std::string ids_hex = "0807060504030201 1817161514131211";

const std::string zero_stats_hex(2 * stats_block_bytes, '0');

// testing::sample_stats(), field by field.
const std::string sample_stats_hex =
    "0100000000000000"  // kv_lookup_hits 1
    "0200000000000000"  // kv_lookup_misses 2
    "0300000000000000"  // kv_lookup_errors 3
    "0400000000000000"  // kv_imported_pages 4
    "0001000000000000"  // kv_imported_tokens 0x100
    "0500000000000000"  // kv_recorded_pages 5
    "0000010000000000"  // kv_recorded_bytes 0x10000
    "0500000000000000"  // kv_hit_stage_mask 0b101: stages 0 and 2
    "0000000000000080"  // kv_record_stage_mask: stage 63
    "34120000"          // max_compute_us 0x1234
    "07000000"          // max_queue_us 7
    "feffffff";         // max_forward_us 0xfffffffe

void expect_request_golden(const request & r, const std::string & hex) {
    ASSERT_TRUE(validate_request(r, limits).is_ok()) << validate_request(r, limits).to_string();
    const auto bytes = encode_request(r);
    EXPECT_EQ(to_hex(bytes), normalize_hex(hex));
    EXPECT_EQ(bytes.size(), encoded_request_bytes(r));
    auto back = decode_request(from_hex(hex), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, testing::as_received(r));
}

void expect_reply_golden(const reply & r, const std::string & hex) {
    ASSERT_TRUE(validate_reply(r, limits).is_ok()) << validate_reply(r, limits).to_string();
    EXPECT_EQ(to_hex(encode_reply(r)), normalize_hex(hex));
    auto back = decode_reply(from_hex(hex), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, r);
}

TEST(protocol_golden, StatsBlockWidthsSumToTheBlockSize) {
    EXPECT_EQ(normalize_hex(sample_stats_hex).size(), 2 * stats_block_bytes);
    EXPECT_EQ(stats_block_bytes, 84u);
    EXPECT_EQ(request_fixed_bytes, 140u);
    EXPECT_EQ(reply_fixed_bytes, 100u);
}

TEST(protocol_golden, Hello) {
    const std::string hex =
        "534b5059"   // magic "SKPY"
        "0700"       // protocol_version 7
        "0100"       // link_kind 1: forward
        "02000000"   // lane 2
        "01000000"   // sender_stage 1
        "0100"       // auth 1: hmac_sha256
        "0000"       // reserved
        "000102030405060708090a0b0c0d0e0f"   // nonce (32 bytes)
        "101112131415161718191a1b1c1d1e1f";
    const hello h = testing::sample_hello();
    EXPECT_EQ(to_hex(encode_hello(h)), hex);
    auto back = decode_hello(from_hex(hex));
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, h);
    EXPECT_EQ(from_hex(hex).size(), hello_bytes);
}

TEST(protocol_golden, AuthChallenge) {
    const std::string hex =
        "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"   // the listener's nonce (32 bytes)
        "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "404142434445464748494a4b4c4d4e4f"   // its proof (32 bytes)
        "505152535455565758595a5b5c5d5e5f";
    const auth_challenge c = testing::sample_auth_challenge();
    EXPECT_EQ(to_hex(encode_auth_challenge(c)), hex);
    auto back = decode_auth_challenge(from_hex(hex));
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, c);
}

TEST(protocol_golden, HelloReply) {
    const std::string hex =
        "534b5059"   // magic "SKPY"
        "0700"       // protocol_version 7
        "0400"       // status 4: busy
        "0400"       // reason_len 4
        "62757379";  // "busy"
    const hello_reply r = testing::sample_hello_reply();
    EXPECT_EQ(to_hex(encode_hello_reply(r)), hex);
    auto back = decode_hello_reply(from_hex(hex), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, r);
    auto n = peek_hello_reply_length(from_hex(hex), limits);
    ASSERT_TRUE(n.is_ok());
    EXPECT_EQ(*n, 14u);
}

TEST(protocol_golden, Prefill) {
    expect_request_golden(testing::sample_prefill(),
        "bc000000"           // frame_bytes 188 = 140 + 3 tokens x 4 + activation 24 + 6 values x 2
        "0100"               // kind 1: prefill
        "0400"               // flags: bit 2 (activation)
        + ids_hex +
        "0000000000000000"   // pos_start 0
        "03000000"           // token_count 3
        "0100"               // state.version 1
        "01"                 // state.phase 1: prefill
        "00"                 // state.flags
        "05000000"           // state.prompt_token_count 5
        "00000000"           // state.decode_step 0
        "ffffffff"           // state.current_token -1
        "00000000"           // state.source_stage 0
        + sample_stats_hex +
        "01000000 2c010000 02000000"  // tokens 1, 300, 2
        "01 000000"          // activation.dtype 1: f16, reserved
        "00000000"           // producer_stage 0
        "00000000 02000000"  // layers [0, 2)
        "03000000"           // n_tokens 3
        "02000000"           // n_embd 2
        "003c 00c0"          // token 0: 1.0, -2.0 (f16)
        "0038 0034"          // token 1: 0.5, 0.25
        "0042 0080");        // token 2: 3.0, -0.0
}

TEST(protocol_golden, PrefillFinal) {
    expect_request_golden(testing::sample_prefill_final(),
        "bc000000"           // frame_bytes 188 = 140 + 8 tokens + 8 positions + activation 24 + 2 values x 4
        "0200"               // kind 2: prefill_final
        "0600"               // flags: bits 1 (positions) and 2 (activation)
        + ids_hex +
        "0300000000000000"   // pos_start 3
        "02000000"           // token_count 2
        "0100 01 00"         // state: version 1, phase prefill, flags 0
        "05000000"           // prompt_token_count 5 (= pos_start + token_count)
        "00000000"           // decode_step
        "ffffffff"           // current_token -1
        "01000000"           // source_stage 1
        + zero_stats_hex +
        "07000000 08000000"  // tokens 7, 8
        "03000000 04000000"  // positions 3, 4
        "00 000000"          // activation.dtype 0: f32 (f16 asked, 0.1 is not exact in f16)
        "01000000"           // producer_stage 1
        "02000000 04000000"  // layers [2, 4)
        "02000000"           // n_tokens 2
        "01000000"           // n_embd 1
        "cdcccc3d"           // 0.1f
        "0000803f");         // 1.0f
}

TEST(protocol_golden, Decode) {
    expect_request_golden(testing::sample_decode(),
        "ac000000"           // frame_bytes 172 = 140 + 4 + activation 24 + 2 values x 2
        "0300"               // kind 3: decode
        "0400"               // flags: activation
        + ids_hex +
        "0500000000000000"   // pos_start 5
        "01000000"           // token_count 1
        "0100 02 00"         // state: version 1, phase decode, flags 0
        "05000000"           // prompt_token_count 5
        "01000000"           // decode_step 1
        "2a000000"           // current_token 42
        "00000000"           // source_stage 0
        + zero_stats_hex +
        "2a000000"           // token 42
        "02 000000"          // activation.dtype 2: bf16
        "00000000"           // producer_stage 0
        "00000000 02000000"  // layers [0, 2)
        "01000000"           // n_tokens 1
        "02000000"           // n_embd 2
        "803f c0bf");        // 1.0, -1.5 (bf16)
}

// The control kinds without sections share one layout; only kind, phase, pos_start
// and tokens differ.
std::string control_hex(std::string frame_bytes, std::string kind, std::string pos_start, std::string token_count,
                        std::string phase, std::string current_token, std::string tokens) {
    return frame_bytes + kind + "0000" + ids_hex + pos_start + token_count + "0100" + phase + "00" +
           "00000000 00000000" + current_token + "00000000" + zero_stats_hex + tokens;
}

TEST(protocol_golden, Stop) {
    auto requests = testing::sample_requests();
    expect_request_golden(requests[3], control_hex("8c000000", "0400", "0000000000000000", "00000000", "03",
                                                   "ffffffff", ""));
}

TEST(protocol_golden, ConfigureGeneration) {
    expect_request_golden(testing::sample_configure_generation(),
        "e5000000"           // frame_bytes 229 = 140 + 8 tokens + generation 81
        "0500"               // kind 5: configure_generation
        "0100"               // flags: bit 0 (generation config)
        + ids_hex +
        "0000000000000000"   // pos_start 0
        "02000000"           // token_count 2
        "0100 03 00"         // state: version 1, phase control, flags 0
        "02000000"           // prompt_token_count 2
        "00000000"           // decode_step
        "ffffffff"           // current_token -1
        "00000000"           // source_stage
        + zero_stats_hex +
        "01000000 02000000"  // tokens 1, 2
        "0000003f"           // temperature 0.5
        "28000000"           // top_k 40
        "0000403f"           // top_p 0.75
        "00000000"           // min_p 0
        "2a00000000000000"   // seed 42
        "0000803f"           // repeat_penalty 1.0
        "0000003f"           // presence_penalty 0.5
        "0000803e"           // frequency_penalty 0.25
        "40000000"           // penalty_last_n 64
        "01000000"           // n_logit_bias 1
        "0d000000 000080bf"  // token 13: bias -1.0
        "02"                 // cache_mode 2: lookup_record
        "10000000"           // cache_min_tokens 16
        "0200 6162"          // cache_key "ab"
        "0c000000"           // grammar_len 12
        "726f6f74203a3a3d202278 22"  // grammar `root ::= "x"`
        "03000000");         // n_logprobs 3
}

TEST(protocol_golden, ProbePrefill) {
    expect_request_golden(testing::sample_requests()[5],
                          control_hex("98000000", "0600", "0000000000000000", "03000000", "03", "ffffffff",
                                      "01000000 02000000 03000000"));
}

TEST(protocol_golden, RestorePrefill) {
    expect_request_golden(testing::sample_requests()[6],
                          control_hex("98000000", "0700", "0000000000000000", "03000000", "03", "ffffffff",
                                      "01000000 02000000 03000000"));
}

TEST(protocol_golden, TryRestorePrefill) {
    expect_request_golden(testing::sample_requests()[7],
                          control_hex("94000000", "0800", "0000000000000000", "02000000", "03", "ffffffff",
                                      "01000000 02000000"));
}

// The activation holds one row, the current token's, whatever the prefix length.
TEST(protocol_golden, TryRestorePrefillDecode) {
    expect_request_golden(testing::sample_try_restore_prefill_decode(),
        "b4000000"           // frame_bytes 180 = 140 + 8 tokens + activation 24 + 2 values x 4
        "0900"               // kind 9: try_restore_prefill_decode
        "0400"               // flags: bit 2 (activation)
        + ids_hex +
        "0000000000000000"   // pos_start 0: the prefix starts at 0
        "02000000"           // token_count 2: the prefix to restore
        "0100 02 00"         // state: version 1, phase decode, flags 0
        "00000000"           // prompt_token_count
        "00000000"           // decode_step
        "03000000"           // current_token 3, decoded at pos_start + token_count = 2
        "00000000"           // source_stage
        + zero_stats_hex +
        "01000000 02000000"  // tokens 1, 2
        "00 000000"          // activation.dtype 0: f32
        "00000000"           // producer_stage 0
        "00000000 02000000"  // layers [0, 2)
        "01000000"           // n_tokens 1: the current token's row, not token_count
        "02000000"           // n_embd 2
        "0000003f"           // 0.5f
        "000040c0");         // -3.0f
}

TEST(protocol_golden, TrimSession) {
    expect_request_golden(testing::sample_trim_session(),
                          control_hex("8c000000", "0a00", "0400000000000000", "00000000", "03", "ffffffff", ""));
}

TEST(protocol_golden, PredictionReturnOpen) {
    expect_request_golden(testing::sample_requests()[10],
                          control_hex("8c000000", "0b00", "0000000000000000", "00000000", "03", "ffffffff", ""));
}

TEST(protocol_golden, Heartbeat) {
    expect_request_golden(testing::sample_requests()[11],
                          control_hex("8c000000", "0d00", "0000000000000000", "00000000", "03", "ffffffff", ""));
}

TEST(protocol_golden, Ack) {
    expect_reply_golden(testing::sample_replies()[0],
        "70000000"           // frame_bytes 112
        "4000"               // kind 64: ack
        "0000"               // flags
        "0807060504030201"   // request_id
        + sample_stats_hex +
        "01 000000"          // outcome 1: hit, reserved
        "0300000000000000"); // restored_tokens 3
}

TEST(protocol_golden, PredictedToken) {
    expect_reply_golden(testing::sample_replies()[1],
        "84000000"           // frame_bytes 132
        "4100"               // kind 65: predicted_token
        "0000"               // flags
        "0807060504030201"   // request_id
        + zero_stats_hex +
        "09000000"           // token 9
        "02000000"           // decode_step 2
        "02000000"           // n_logprobs 2
        "000000bf"           // logprob -0.5
        "09000000 000000bf"  // top: token 9, -0.5
        "04000000 000080bf");// token 4, -1.0
}

TEST(protocol_golden, PredictedTokenWithoutLogprobs) {
    reply r = testing::sample_replies()[1];
    r.logprob = 0.0f;
    r.top_logprobs.clear();
    expect_reply_golden(r,
        "70000000"           // frame_bytes 112
        "4100"               // kind 65: predicted_token
        "0000"               // flags
        "0807060504030201"   // request_id
        + zero_stats_hex +
        "09000000"           // token 9
        "02000000"           // decode_step 2
        "00000000");         // n_logprobs 0: nothing follows
}

TEST(protocol_golden, PredictedTokens) {
    expect_reply_golden(testing::sample_replies()[2],
        "70000000"           // frame_bytes 112
        "4200"               // kind 66: predicted_tokens
        "0000"               // flags
        "0807060504030201"   // request_id
        + zero_stats_hex +
        "02000000"           // n 2
        "05000000 06000000");// tokens 5, 6
}

TEST(protocol_golden, Error) {
    expect_reply_golden(testing::sample_replies()[3],
        "7b000000"           // frame_bytes 123 = 100 + 8 + 15
        "4300"               // kind 67: error
        "0000"               // flags
        "0807060504030201"   // request_id
        + zero_stats_hex +
        "03000000"           // error_code 3: not_found
        "0f000000"           // message_len 15
        "6e6f2073756368207365737369 6f6e");  // "no such session"
}

// The worked example of docs/protocol.md, "Steps": lane 3 decodes token 42 at
// position 5 while lane 1 prefills tokens 7, 8 at positions 0 and 1, one f32 row of
// width 2 per token (step_id 9, from stage 0, stats zero).
TEST(protocol_golden, Step) {
    step_frame s;
    s.step_id = 9;
    s.source_stage = 0;
    step_entry d;
    d.kind = message_kind::decode;
    d.request_id = 0x21;
    d.session_id = 3;
    d.pos_start = 5;
    d.state.phase = message_phase::decode;
    d.state.prompt_token_count = 5;
    d.state.decode_step = 1;
    d.state.current_token = 42;
    d.tokens = {42};
    step_entry p;
    p.kind = message_kind::prefill;
    p.request_id = 0x22;
    p.session_id = 1;
    p.pos_start = 0;
    p.state.phase = message_phase::prefill;
    p.state.prompt_token_count = 3;
    p.tokens = {7, 8};
    s.entries = {d, p};
    s.activation.layer_start = 0;
    s.activation.layer_end = 2;
    s.activation.n_embd = 2;
    s.activation.values = {1.0f, -1.5f, 0.5f, 2.0f, -3.0f, 0.25f};
    const std::string hex =
        "64010000"            // frame_bytes 356 = 24 + (136 + 4) + (136 + 8) + 24 + 6 values x 4
        "0c00"                // kind 12: step
        "0400"                // flags: bit 2 (activation)
        "0900000000000000"    // step_id 9
        "00000000"            // source_stage 0
        "02000000"            // n_entries 2
        // entry 0
        "0300 0000"           // kind 3: decode, entry flags 0
        "2100000000000000"    // request_id 0x21
        "0300000000000000"    // session_id: lane 3
        "0500000000000000"    // pos_start 5
        "01000000"            // token_count 1
        "0100 02 00"          // state: version 1, phase decode, flags 0
        "05000000 01000000"   // prompt_token_count 5, decode_step 1
        "2a000000 00000000"   // current_token 42, source_stage 0
        + zero_stats_hex +
        "2a000000"            // tokens: 42
        // entry 1
        "0100 0000"           // kind 1: prefill, entry flags 0
        "2200000000000000"    // request_id 0x22
        "0100000000000000"    // session_id: lane 1
        "0000000000000000"    // pos_start 0
        "02000000"            // token_count 2
        "0100 01 00"          // state: version 1, phase prefill, flags 0
        "03000000 00000000"   // prompt_token_count 3, decode_step 0
        "ffffffff 00000000"   // current_token -1, source_stage 0
        + zero_stats_hex +
        "07000000 08000000"   // tokens: 7, 8
        // activation: the entries' rows in entry order
        "00 000000"           // activation.dtype 0: f32, 3 reserved bytes
        "00000000"            // producer_stage 0
        "00000000 02000000"   // layers [0, 2)
        "03000000"            // n_tokens 3 = 1 + 2
        "02000000"            // n_embd 2
        "0000803f 0000c0bf"   // lane 3, token 42: 1.0, -1.5
        "0000003f 00000040"   // lane 1, token 7: 0.5, 2.0
        "000040c0 0000803e";  // lane 1, token 8: -3.0, 0.25
    ASSERT_TRUE(validate_step(s, limits).is_ok()) << validate_step(s, limits).to_string();
    const auto bytes = encode_step(s);
    EXPECT_EQ(to_hex(bytes), normalize_hex(hex));
    EXPECT_EQ(bytes.size(), encoded_step_bytes(s));
    auto back = decode_step(from_hex(hex), limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, s);
    auto kind = peek_frame_kind(bytes);
    ASSERT_TRUE(kind.is_ok());
    EXPECT_EQ(*kind, message_kind::step);
    EXPECT_FALSE(decode_request(bytes, limits).is_ok()) << "a step is not a request";
    EXPECT_FALSE(decode_reply(bytes, limits).is_ok());
}

TEST(protocol_golden, PeekedFrameLengthAndKindMatchTheFrame) {
    for (const request & r : testing::sample_requests()) {
        const auto bytes = encode_request(r);
        auto n = peek_frame_length(bytes, limits);
        ASSERT_TRUE(n.is_ok()) << n.error().to_string();
        EXPECT_EQ(*n, bytes.size());
        auto kind = peek_frame_kind(bytes);
        ASSERT_TRUE(kind.is_ok());
        EXPECT_EQ(*kind, r.kind);
    }
    for (const reply & r : testing::sample_replies()) {
        const auto bytes = encode_reply(r);
        auto n = peek_frame_length(bytes, limits);
        ASSERT_TRUE(n.is_ok()) << n.error().to_string();
        EXPECT_EQ(*n, bytes.size());
        auto kind = peek_frame_kind(bytes);
        ASSERT_TRUE(kind.is_ok());
        EXPECT_EQ(*kind, r.kind);
    }
}

TEST(protocol_golden, KindNumbersAreFixed) {
    EXPECT_EQ(static_cast<uint16_t>(message_kind::prefill), 1);
    EXPECT_EQ(static_cast<uint16_t>(message_kind::prediction_return_open), 11);
    EXPECT_EQ(static_cast<uint16_t>(message_kind::ack), 64);
    EXPECT_EQ(static_cast<uint16_t>(message_kind::error), 67);
    EXPECT_TRUE(is_request_kind(message_kind::trim_session));
    EXPECT_FALSE(is_request_kind(message_kind::ack));
    EXPECT_TRUE(is_reply_kind(message_kind::predicted_tokens));
    EXPECT_EQ(static_cast<uint16_t>(message_kind::step), 12);
    EXPECT_TRUE(is_step_kind(message_kind::step));
    EXPECT_FALSE(is_request_kind(message_kind::step));
    EXPECT_FALSE(is_reply_kind(message_kind::step));
    EXPECT_FALSE(is_reply_kind(static_cast<message_kind>(13)));
    EXPECT_EQ(static_cast<uint16_t>(message_kind::heartbeat), 13);
    EXPECT_TRUE(is_request_kind(message_kind::heartbeat));
    EXPECT_FALSE(is_request_kind(static_cast<message_kind>(14)));
    EXPECT_EQ(static_cast<uint16_t>(link_kind::batch), 3);
    EXPECT_EQ(message_kind_name(message_kind::try_restore_prefill_decode), "try_restore_prefill_decode");
    EXPECT_EQ(message_kind_name(static_cast<message_kind>(99)), "unknown");
}

}  // namespace
}  // namespace skippy::protocol
