// The ready handshake: a listener's decision on a hello and a dialer's reading of the
// answer.
#include "protocol/protocol.h"
#include "sample_messages.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <string>

namespace skippy::protocol {
namespace {

using testing::limits;

TEST(protocol_handshake, MatchingVersionAndAuthModeIsAccepted) {
    hello h = testing::sample_hello();
    for (link_auth mode : {link_auth::hmac_sha256, link_auth::none}) {
        h.auth = mode;
        const hello_reply r = decide_hello(h, mode);
        EXPECT_EQ(r.status, hello_status::ok);
        EXPECT_EQ(r.version, protocol_version);
        EXPECT_TRUE(r.reason.empty());
        EXPECT_TRUE(check_hello_reply(r).is_ok());
    }
}

TEST(protocol_handshake, AKeyOnOneSideOnlyIsUnauthorized) {
    hello h = testing::sample_hello();
    for (auto [peer, mine] : {std::pair{link_auth::none, link_auth::hmac_sha256}, std::pair{link_auth::hmac_sha256, link_auth::none}}) {
        h.auth = peer;
        const hello_reply r = decide_hello(h, mine);
        EXPECT_EQ(r.status, hello_status::unauthorized);
        EXPECT_NE(r.reason.find("--stage-key-file"), std::string::npos) << r.reason;
        const status st = check_hello_reply(r);
        EXPECT_EQ(st.code(), error_code::permission);
        EXPECT_NE(st.message().find(r.reason), std::string::npos);
    }
}

TEST(protocol_handshake, OtherVersionIsRefusedWithAHumanReason) {
    // Versions 1 (kind 9 without an activation), 2 (no steps), 3 (no grammar), 4 (no
    // logprobs), 5 (a cleartext token) and 6 (no heartbeats), and a future version alike.
    for (uint16_t version : {uint16_t{1}, uint16_t{2}, uint16_t{3}, uint16_t{4}, uint16_t{5}, uint16_t{6}, uint16_t{8}}) {
        hello h = testing::sample_hello();
        h.version = version;
        const hello_reply r = decide_hello(h, link_auth::hmac_sha256);
        EXPECT_EQ(r.status, hello_status::version_mismatch);
        EXPECT_EQ(r.version, protocol_version);
        EXPECT_EQ(r.reason, "peer speaks protocol version " + std::to_string(version) + ", this stage speaks 7");
        EXPECT_EQ(refuse_version(version), r);
        EXPECT_TRUE(validate_hello_reply(r, limits).is_ok());
        const status st = check_hello_reply(r);
        EXPECT_EQ(st.code(), error_code::unsupported);
        EXPECT_NE(st.message().find("protocol version " + std::to_string(version)), std::string::npos)
            << st.to_string();
    }
}

// The listener's flow: read the 6-byte prefix, refuse another version without reading
// on, else read the rest of the fixed-size hello.
TEST(protocol_handshake, ListenerReadsTheHelloInTwoSteps) {
    const auto bytes = encode_hello(testing::sample_hello());
    ASSERT_EQ(bytes.size(), hello_bytes);
    auto version = peek_hello_version(std::span(bytes).first(hello_prefix_bytes));
    ASSERT_TRUE(version.is_ok());
    EXPECT_EQ(*version, protocol_version);
    auto h = decode_hello(bytes);
    ASSERT_TRUE(h.is_ok());
    EXPECT_EQ(*h, testing::sample_hello());
}

TEST(protocol_handshake, DialerReadsAReplyFromAnyVersion) {
    hello_reply future;
    future.version = 8;
    future.status = hello_status::version_mismatch;
    future.reason = "peer speaks protocol version 3, this stage speaks 8";
    const auto bytes = encode_hello_reply(future);
    auto n = peek_hello_reply_length(std::span(bytes).first(hello_reply_fixed_bytes), limits);
    ASSERT_TRUE(n.is_ok());
    EXPECT_EQ(*n, bytes.size());
    auto back = decode_hello_reply(bytes, limits);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(*back, future);
    EXPECT_EQ(check_hello_reply(*back).code(), error_code::unsupported);

    // An "ok" from a listener of another version is not ok for us.
    future.status = hello_status::ok;
    future.reason.clear();
    EXPECT_EQ(check_hello_reply(future).code(), error_code::unsupported);
}

TEST(protocol_handshake, RefusalsMapToStatusCodes) {
    hello_reply r;
    r.reason = "why";
    r.status = hello_status::busy;
    EXPECT_EQ(check_hello_reply(r).code(), error_code::unavailable);
    r.status = hello_status::bad_request;
    EXPECT_EQ(check_hello_reply(r).code(), error_code::invalid_argument);
    EXPECT_NE(check_hello_reply(r).message().find("why"), std::string::npos);
}

TEST(protocol_handshake, BothLinkKindsRoundTrip) {
    hello h = testing::sample_hello();
    h.link = link_kind::direct_return;
    h.lane = 0xffffffffu;
    h.sender_stage = 3;
    h.auth = link_auth::none;
    h.nonce = {};
    ASSERT_TRUE(validate_hello(h).is_ok());
    auto back = decode_hello(encode_hello(h));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, h);
}

TEST(protocol_handshake, ValidateRefusesWhatTheEncoderCannotCarry) {
    hello h = testing::sample_hello();
    h.auth = link_auth::none;  // with the sample's nonce
    EXPECT_EQ(validate_hello(h).code(), error_code::invalid_argument);
    h = testing::sample_hello();
    h.auth = static_cast<link_auth>(2);
    EXPECT_EQ(validate_hello(h).code(), error_code::invalid_argument);
    h = testing::sample_hello();
    h.link = static_cast<link_kind>(9);
    EXPECT_FALSE(validate_hello(h).is_ok());
    hello_reply r;
    r.reason = "\xc3";  // cut in the middle of a character
    EXPECT_FALSE(validate_hello_reply(r, limits).is_ok());
    r.reason = "caf\xc3\xa9 \xf0\x9f\x98\x80";  // "café 😀"
    EXPECT_TRUE(validate_hello_reply(r, limits).is_ok());
    r.status = static_cast<hello_status>(5);
    EXPECT_FALSE(validate_hello_reply(r, limits).is_ok());
}

}  // namespace
}  // namespace skippy::protocol
