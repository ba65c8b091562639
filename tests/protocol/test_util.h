// Helpers for the protocol tests: hex (goldens are written as hex, whitespace
// ignored), readable gtest output for messages, and what a receiver decodes.
#pragma once

#include "protocol/protocol.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::protocol::testing {

inline std::string to_hex(std::span<const uint8_t> bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * bytes.size());
    for (uint8_t b : bytes) {
        out += digits[b >> 4];
        out += digits[b & 0xf];
    }
    return out;
}

// Lowercase hex digits of `hex` with spaces and newlines dropped.
inline std::string normalize_hex(std::string_view hex) {
    std::string out;
    for (char c : hex) {
        if (c == ' ' || c == '\n') continue;
        out += (c >= 'A' && c <= 'F') ? static_cast<char>(c - 'A' + 'a') : c;
    }
    return out;
}

// Little-endian patches at a byte offset, for crafting malformed frames.
inline void patch_u16(std::vector<uint8_t> & b, size_t at, uint16_t v) {
    for (size_t i = 0; i < 2; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
inline void patch_u32(std::vector<uint8_t> & b, size_t at, uint32_t v) {
    for (size_t i = 0; i < 4; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
inline void patch_u64(std::vector<uint8_t> & b, size_t at, uint64_t v) {
    for (size_t i = 0; i < 8; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
// Sets a frame's length field to its size (after bytes were added or cut).
inline void reframe(std::vector<uint8_t> & b) { patch_u32(b, 0, static_cast<uint32_t>(b.size())); }

inline std::vector<uint8_t> from_hex(std::string_view hex) {
    const std::string clean = normalize_hex(hex);
    const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    std::vector<uint8_t> out(clean.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<uint8_t>(nibble(clean[2 * i]) << 4 | nibble(clean[2 * i + 1]));
    }
    return out;
}

// The message a receiver decodes from encode_request(r): the same, except that the
// activation's dtype is the one that went on the wire.
inline request as_received(request r) {
    if (r.activation) r.activation->dtype = choose_activation_dtype(r.activation->values, r.activation->dtype);
    return r;
}

// The default limits, as a stage runs with them.
inline const protocol_limits limits{};

// A refusal: not ok, with `code`, and a message that names `field`.
template <typename T>
void expect_refused(const result<T> & res, std::string_view field, error_code code = error_code::invalid_data) {
    ASSERT_FALSE(res.is_ok()) << "accepted; expected a complaint about " << field;
    EXPECT_EQ(res.error().code(), code) << res.error().to_string();
    EXPECT_NE(res.error().message().find(field), std::string::npos)
        << "message does not name " << field << ": " << res.error().to_string();
}

}  // namespace skippy::protocol::testing

namespace skippy::protocol {

// gtest prints messages as their encoding, which is what a failing comparison needs.
// An invalid message (which encoders may not be given) prints as its problem.
inline void PrintTo(const request & r, std::ostream * os) {
    const status st = validate_request(r, protocol_limits{});
    *os << message_kind_name(r.kind) << " request ";
    *os << (st.is_ok() ? testing::to_hex(encode_request(r)) : st.to_string());
}
inline void PrintTo(const reply & r, std::ostream * os) {
    const status st = validate_reply(r, protocol_limits{});
    *os << message_kind_name(r.kind) << " reply ";
    *os << (st.is_ok() ? testing::to_hex(encode_reply(r)) : st.to_string());
}

}  // namespace skippy::protocol
