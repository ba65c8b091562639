// hello / hello_reply: the "ready" exchange at the start of every connection.
#include "protocol/protocol.h"
#include "protocol/wire.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace skippy::protocol {

namespace {

constexpr std::string_view hello_name = "hello";
constexpr std::string_view hello_reply_name = "hello_reply";

std::string version_reason(uint16_t peer_version) {
    return "peer speaks protocol version " + wire::num(peer_version) + ", this stage speaks " +
           wire::num(protocol_version);
}

bool known_link(uint16_t v) {
    return v == static_cast<uint16_t>(link_kind::forward) || v == static_cast<uint16_t>(link_kind::direct_return) ||
           v == static_cast<uint16_t>(link_kind::batch);
}

bool known_hello_status(uint16_t v) { return v <= static_cast<uint16_t>(hello_status::busy); }

status read_magic(wire::field_reader & r) {
    std::span<const uint8_t> magic;
    SKIPPY_TRY(r.bytes("magic", hello_magic.size(), magic));
    if (!std::equal(magic.begin(), magic.end(), hello_magic.begin())) {
        return r.fail("magic", 0, "not \"SKPY\": the peer is not a skippy stage");
    }
    return status::ok();
}

// Reads the version of a hello and refuses anything but ours.
status read_hello_version(wire::field_reader & r) {
    uint16_t version = 0;
    SKIPPY_TRY(r.u16("version", version));
    if (version != protocol_version) {
        return make_error(error_code::unsupported, std::string(hello_name) + " field version (byte 4): " + version_reason(version));
    }
    return status::ok();
}

status check_reason_length(wire::field_reader & r, uint16_t n, size_t at, const protocol_limits & limits) {
    if (n > limits.max_error_message_bytes) {
        return r.fail("reason_len", at,
                      wire::num(n) + " exceeds max_error_message_bytes " + wire::num(limits.max_error_message_bytes));
    }
    return status::ok();
}

std::string_view as_chars(std::span<const uint8_t> bytes) {
    return {reinterpret_cast<const char *>(bytes.data()), bytes.size()};
}

bool known_auth(uint16_t v) {
    return v == static_cast<uint16_t>(link_auth::none) || v == static_cast<uint16_t>(link_auth::hmac_sha256);
}

bool all_zero(std::span<const uint8_t> bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

// ---------------------------------------------------------------------------------
// hello

status validate_hello(const hello & h) {
    if (!known_link(static_cast<uint16_t>(h.link))) {
        return make_error(error_code::invalid_argument, "hello: unknown link kind " + wire::num(static_cast<uint16_t>(h.link)));
    }
    if (!known_auth(static_cast<uint16_t>(h.auth))) {
        return make_error(error_code::invalid_argument, "hello: unknown auth mode " + wire::num(static_cast<uint16_t>(h.auth)));
    }
    if (h.auth == link_auth::none && !all_zero(h.nonce)) {
        return make_error(error_code::invalid_argument, "hello: a nonce without auth");
    }
    return status::ok();
}

std::vector<uint8_t> encode_hello(const hello & h) {
    std::vector<uint8_t> out;
    out.reserve(hello_bytes);
    byte_writer w(out);
    w.put_bytes(hello_magic.data(), hello_magic.size());
    w.put_u16(h.version);
    w.put_u16(static_cast<uint16_t>(h.link));
    w.put_u32(h.lane);
    w.put_u32(h.sender_stage);
    w.put_u16(static_cast<uint16_t>(h.auth));
    w.put_u16(0);  // reserved
    w.put_bytes(h.nonce.data(), h.nonce.size());
    assert(out.size() == hello_bytes);
    return out;
}

result<uint16_t> peek_hello_version(std::span<const uint8_t> prefix) {
    wire::field_reader r(prefix.first(std::min(prefix.size(), hello_prefix_bytes)), hello_name);
    SKIPPY_TRY(read_magic(r));
    uint16_t version = 0;
    SKIPPY_TRY(r.u16("version", version));
    return version;
}

result<hello> decode_hello(std::span<const uint8_t> bytes) {
    wire::field_reader r(bytes, hello_name);
    hello h;
    SKIPPY_TRY(read_magic(r));
    SKIPPY_TRY(read_hello_version(r));
    uint16_t link = 0;
    const size_t link_at = r.offset();
    SKIPPY_TRY(r.u16("link_kind", link));
    if (!known_link(link)) return r.fail("link_kind", link_at, "unknown link kind " + wire::num(link));
    h.link = static_cast<link_kind>(link);
    SKIPPY_TRY(r.u32("lane", h.lane));
    SKIPPY_TRY(r.u32("sender_stage", h.sender_stage));
    uint16_t auth = 0;
    const size_t auth_at = r.offset();
    SKIPPY_TRY(r.u16("auth", auth));
    if (!known_auth(auth)) return r.fail("auth", auth_at, "unknown auth mode " + wire::num(auth));
    h.auth = static_cast<link_auth>(auth);
    uint16_t reserved = 0;
    const size_t reserved_at = r.offset();
    SKIPPY_TRY(r.u16("reserved", reserved));
    if (reserved != 0) return r.fail("reserved", reserved_at, "must be zero");
    std::span<const uint8_t> nonce;
    const size_t nonce_at = r.offset();
    SKIPPY_TRY(r.bytes("nonce", auth_nonce_bytes, nonce));
    if (h.auth == link_auth::none && !all_zero(nonce)) return r.fail("nonce", nonce_at, "must be zero without auth");
    std::copy(nonce.begin(), nonce.end(), h.nonce.begin());
    SKIPPY_TRY(r.expect_end());
    return h;
}

// ---------------------------------------------------------------------------------
// auth_challenge

std::vector<uint8_t> encode_auth_challenge(const auth_challenge & c) {
    std::vector<uint8_t> out(c.nonce.begin(), c.nonce.end());
    out.insert(out.end(), c.proof.begin(), c.proof.end());
    return out;
}

result<auth_challenge> decode_auth_challenge(std::span<const uint8_t> bytes) {
    wire::field_reader r(bytes, "auth_challenge");
    auth_challenge c;
    std::span<const uint8_t> part;
    SKIPPY_TRY(r.bytes("nonce", auth_nonce_bytes, part));
    std::copy(part.begin(), part.end(), c.nonce.begin());
    SKIPPY_TRY(r.bytes("proof", auth_mac_bytes, part));
    std::copy(part.begin(), part.end(), c.proof.begin());
    SKIPPY_TRY(r.expect_end());
    return c;
}

// ---------------------------------------------------------------------------------
// hello_reply

status validate_hello_reply(const hello_reply & r, const protocol_limits & limits) {
    if (!known_hello_status(static_cast<uint16_t>(r.status))) {
        return make_error(error_code::invalid_argument,
                          "hello_reply: unknown status " + wire::num(static_cast<uint16_t>(r.status)));
    }
    if (r.reason.size() > limits.max_error_message_bytes || r.reason.size() > std::numeric_limits<uint16_t>::max()) {
        return make_error(error_code::invalid_argument, "hello_reply: reason of " + wire::num(r.reason.size()) +
                                                            " bytes exceeds max_error_message_bytes " +
                                                            wire::num(limits.max_error_message_bytes));
    }
    if (!wire::is_valid_utf8(r.reason)) return make_error(error_code::invalid_argument, "hello_reply: reason is not UTF-8");
    return status::ok();
}

std::vector<uint8_t> encode_hello_reply(const hello_reply & r) {
    assert(r.reason.size() <= std::numeric_limits<uint16_t>::max());
    std::vector<uint8_t> out;
    out.reserve(hello_reply_fixed_bytes + r.reason.size());
    byte_writer w(out);
    w.put_bytes(hello_magic.data(), hello_magic.size());
    w.put_u16(r.version);
    w.put_u16(static_cast<uint16_t>(r.status));
    w.put_u16(static_cast<uint16_t>(r.reason.size()));
    w.put_bytes(r.reason.data(), r.reason.size());
    return out;
}

result<size_t> peek_hello_reply_length(std::span<const uint8_t> fixed, const protocol_limits & limits) {
    wire::field_reader r(fixed.first(std::min(fixed.size(), hello_reply_fixed_bytes)), hello_reply_name);
    SKIPPY_TRY(read_magic(r));
    SKIPPY_TRY(r.need("reason_len", hello_reply_fixed_bytes - r.offset()));
    const size_t at = hello_reply_fixed_bytes - 2;
    const uint16_t n = load_u16_le(fixed.data() + at);
    SKIPPY_TRY(check_reason_length(r, n, at, limits));
    return hello_reply_fixed_bytes + n;
}

result<hello_reply> decode_hello_reply(std::span<const uint8_t> bytes, const protocol_limits & limits) {
    wire::field_reader r(bytes, hello_reply_name);
    hello_reply out;
    SKIPPY_TRY(read_magic(r));
    SKIPPY_TRY(r.u16("version", out.version));
    uint16_t st = 0;
    const size_t st_at = r.offset();
    SKIPPY_TRY(r.u16("status", st));
    if (!known_hello_status(st)) return r.fail("status", st_at, "unknown status " + wire::num(st));
    out.status = static_cast<hello_status>(st);
    uint16_t n = 0;
    const size_t n_at = r.offset();
    SKIPPY_TRY(r.u16("reason_len", n));
    SKIPPY_TRY(check_reason_length(r, n, n_at, limits));
    std::span<const uint8_t> reason;
    const size_t reason_at = r.offset();
    SKIPPY_TRY(r.bytes("reason", n, reason));
    if (!wire::is_valid_utf8(as_chars(reason))) return r.fail("reason", reason_at, "not valid UTF-8");
    out.reason.assign(as_chars(reason));
    SKIPPY_TRY(r.expect_end());
    return out;
}

// ---------------------------------------------------------------------------------
// decisions

hello_reply refuse_version(uint16_t peer_version) {
    hello_reply r;
    r.status = hello_status::version_mismatch;
    r.reason = version_reason(peer_version);
    return r;
}

hello_reply decide_hello(const hello & peer, link_auth mine) {
    if (peer.version != protocol_version) return refuse_version(peer.version);
    hello_reply r;
    if (peer.auth != mine) {
        r.status = hello_status::unauthorized;
        r.reason = mine == link_auth::none
                       ? "the peer authenticates with a stage key but this stage has none (--stage-key-file)"
                       : "this stage requires a stage key (--stage-key-file) and the peer has none";
    }
    return r;
}

status check_hello_reply(const hello_reply & r) {
    const std::string prefix = "stage refused the connection: ";
    switch (r.status) {
        case hello_status::ok:
            if (r.version == protocol_version) return status::ok();
            return make_error(error_code::unsupported, "stage accepted the connection but " +
                                                           std::string("speaks protocol version ") + wire::num(r.version) +
                                                           ", this stage speaks " + wire::num(protocol_version));
        case hello_status::version_mismatch: return make_error(error_code::unsupported, prefix + r.reason);
        case hello_status::unauthorized:     return make_error(error_code::permission, prefix + r.reason);
        case hello_status::bad_request:      return make_error(error_code::invalid_argument, prefix + r.reason);
        case hello_status::busy:             return make_error(error_code::unavailable, prefix + r.reason);
    }
    return make_error(error_code::invalid_data, "hello_reply: unknown status " + wire::num(static_cast<uint16_t>(r.status)));
}

}  // namespace skippy::protocol
