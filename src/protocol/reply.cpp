// Reply frames: Ack, PredictedToken, PredictedTokens, Error.
#include "protocol/protocol.h"
#include "protocol/wire.h"

#include <cassert>
#include <cmath>
#include <limits>

namespace skippy::protocol {

namespace {

constexpr std::string_view reply_name = "reply";

// The error codes an Error reply may carry, by their numeric value (the wire uses
// skippy::error_code's numbers, so they are pinned here: renumbering the enum is a
// protocol change).
static_assert(static_cast<uint32_t>(error_code::invalid_argument) == 1);
static_assert(static_cast<uint32_t>(error_code::invalid_data) == 2);
static_assert(static_cast<uint32_t>(error_code::not_found) == 3);
static_assert(static_cast<uint32_t>(error_code::unsupported) == 4);
static_assert(static_cast<uint32_t>(error_code::integrity) == 5);
static_assert(static_cast<uint32_t>(error_code::unavailable) == 6);
static_assert(static_cast<uint32_t>(error_code::permission) == 7);
static_assert(static_cast<uint32_t>(error_code::io) == 8);
static_assert(static_cast<uint32_t>(error_code::runtime) == 9);
static_assert(static_cast<uint32_t>(error_code::internal) == 10);
static_assert(static_cast<uint32_t>(error_code::cancelled) == 11);
static_assert(static_cast<uint32_t>(error_code::timed_out) == 12);
static_assert(static_cast<uint32_t>(error_code::peer_closed) == 13);

// True for every error code but ok. A code added to skippy::error_code without a case
// here is a -Wswitch warning; until it gets one it is refused on the wire.
bool is_wire_error_code(uint32_t v) {
    switch (static_cast<error_code>(v)) {
        case error_code::ok: return false;
        case error_code::invalid_argument:
        case error_code::invalid_data:
        case error_code::not_found:
        case error_code::unsupported:
        case error_code::integrity:
        case error_code::unavailable:
        case error_code::permission:
        case error_code::io:
        case error_code::runtime:
        case error_code::internal:
        case error_code::cancelled:
        case error_code::timed_out:
        case error_code::peer_closed:
            return true;
    }
    return false;
}

size_t body_bytes(const reply & r) {
    switch (r.kind) {
        case message_kind::ack:              return 12;
        case message_kind::predicted_token:  return 12 + (r.top_logprobs.empty() ? 0 : 4 + 8 * r.top_logprobs.size());
        case message_kind::predicted_tokens: return 4 + 4 * r.tokens.size();
        case message_kind::error:            return 8 + r.message.size();
        default:                             return 0;
    }
}

bool is_logprob(float v) { return std::isfinite(v) && v <= 0.0f; }

status argument_error(std::string_view field, const std::string & detail) {
    return make_error(error_code::invalid_argument, "reply field " + std::string(field) + ": " + detail);
}

}  // namespace

status validate_reply(const reply & r, const protocol_limits & limits) {
    using wire::num;
    switch (r.kind) {
        case message_kind::ack:
            if (static_cast<uint8_t>(r.outcome) > static_cast<uint8_t>(ack_outcome::error)) {
                return argument_error("outcome", "unknown outcome " + num(static_cast<uint8_t>(r.outcome)));
            }
            if (r.restored_tokens < 0) return argument_error("restored_tokens", wire::num_signed(r.restored_tokens) + " is negative");
            break;
        case message_kind::predicted_token:
            if (r.token < 0) return argument_error("token", wire::num_signed(r.token) + " is negative");
            if (r.top_logprobs.size() > max_logprobs) {
                return argument_error("n_logprobs", num(r.top_logprobs.size()) + " exceeds max_logprobs " + num(max_logprobs));
            }
            if (r.top_logprobs.empty()) {
                if (r.logprob != 0.0f) return argument_error("logprob", "must be 0 without top_logprobs");
                break;
            }
            if (!is_logprob(r.logprob)) return argument_error("logprob", "must be finite and <= 0");
            for (const logprob_entry & e : r.top_logprobs) {
                if (e.token < 0) return argument_error("top_logprobs.token", wire::num_signed(e.token) + " is negative");
                if (!is_logprob(e.logprob)) return argument_error("top_logprobs.logprob", "must be finite and <= 0");
            }
            break;
        case message_kind::predicted_tokens:
            if (r.tokens.empty() || r.tokens.size() > limits.max_predicted_tokens) {
                return argument_error("n_tokens", num(r.tokens.size()) + " is outside [1, max_predicted_tokens " +
                                                      num(limits.max_predicted_tokens) + "]");
            }
            for (int32_t t : r.tokens) {
                if (t < 0) return argument_error("tokens", wire::num_signed(t) + " is negative");
            }
            break;
        case message_kind::error:
            if (!is_wire_error_code(static_cast<uint32_t>(r.code))) {
                return argument_error("error_code", "code " + num(static_cast<uint32_t>(r.code)) + " is not an error");
            }
            if (r.message.size() > limits.max_error_message_bytes) {
                return argument_error("message_len", num(r.message.size()) + " exceeds max_error_message_bytes " +
                                                         num(limits.max_error_message_bytes));
            }
            if (!wire::is_valid_utf8(r.message)) return argument_error("message", "not valid UTF-8");
            break;
        default:
            return argument_error("kind", "kind " + num(static_cast<uint16_t>(r.kind)) + " is not a reply");
    }
    const size_t n_bytes = reply_fixed_bytes + body_bytes(r);
    if (n_bytes > limits.max_frame_bytes) {
        return argument_error("frame_bytes", "the encoded reply takes " + num(n_bytes) + " bytes, over max_frame_bytes " +
                                                 num(limits.max_frame_bytes));
    }
    return status::ok();
}

std::vector<uint8_t> encode_reply(const reply & r) {
    assert(is_reply_kind(r.kind));
    const size_t n_bytes = reply_fixed_bytes + body_bytes(r);
    assert(n_bytes <= std::numeric_limits<uint32_t>::max());
    std::vector<uint8_t> out;
    out.reserve(n_bytes);
    byte_writer w(out);
    w.put_u32(static_cast<uint32_t>(n_bytes));
    w.put_u16(static_cast<uint16_t>(r.kind));
    w.put_u16(0);  // flags: none defined in version 1
    w.put_u64(r.request_id);
    wire::put_stats(w, r.stats);
    switch (r.kind) {
        case message_kind::ack:
            w.put_u8(static_cast<uint8_t>(r.outcome));
            w.put_zeros(3);
            w.put_i64(r.restored_tokens);
            break;
        case message_kind::predicted_token:
            w.put_i32(r.token);
            w.put_u32(r.decode_step);
            w.put_u32(static_cast<uint32_t>(r.top_logprobs.size()));
            if (r.top_logprobs.empty()) break;
            w.put_f32(r.logprob);
            for (const logprob_entry & e : r.top_logprobs) {
                w.put_i32(e.token);
                w.put_f32(e.logprob);
            }
            break;
        case message_kind::predicted_tokens:
            w.put_u32(static_cast<uint32_t>(r.tokens.size()));
            for (int32_t t : r.tokens) w.put_i32(t);
            break;
        case message_kind::error:
            w.put_u32(static_cast<uint32_t>(r.code));
            w.put_u32(static_cast<uint32_t>(r.message.size()));
            w.put_bytes(r.message.data(), r.message.size());
            break;
        default:
            break;
    }
    assert(out.size() == n_bytes);
    return out;
}

result<reply> decode_reply(std::span<const uint8_t> frame, const protocol_limits & limits) {
    using wire::num;
    SKIPPY_ASSIGN_OR_RETURN(const uint16_t kind, wire::check_frame(frame, limits, reply_name));
    wire::field_reader r(frame, reply_name);
    SKIPPY_TRY(r.skip("header", frame_header_bytes));  // checked by check_frame
    reply out;
    out.kind = static_cast<message_kind>(kind);
    if (!is_reply_kind(out.kind)) {
        const std::string what = is_request_kind(out.kind) || is_step_kind(out.kind) ? " is a request, not a reply" : " is unknown";
        return r.fail("kind", 4, "kind " + num(kind) + what);
    }
    uint16_t flags = 0;
    SKIPPY_TRY(r.u16("flags", flags));
    if (flags != 0) return r.fail("flags", 6, "unknown flag bits 0x" + wire::hex16(flags));
    SKIPPY_TRY(r.u64("request_id", out.request_id));
    SKIPPY_TRY(wire::get_stats(r, out.stats));
    switch (out.kind) {
        case message_kind::ack: {
            uint8_t outcome = 0;
            SKIPPY_TRY(r.u8("outcome", outcome));
            if (outcome > static_cast<uint8_t>(ack_outcome::error)) {
                return r.fail("outcome", reply_fixed_bytes, "unknown outcome " + num(outcome));
            }
            out.outcome = static_cast<ack_outcome>(outcome);
            for (int i = 0; i < 3; ++i) {
                uint8_t reserved = 0;
                const size_t at = r.offset();
                SKIPPY_TRY(r.u8("reserved", reserved));
                if (reserved != 0) return r.fail("reserved", at, "must be 0, is " + num(reserved));
            }
            const size_t at = r.offset();
            SKIPPY_TRY(r.i64("restored_tokens", out.restored_tokens));
            if (out.restored_tokens < 0) return r.fail("restored_tokens", at, wire::num_signed(out.restored_tokens) + " is negative");
            break;
        }
        case message_kind::predicted_token: {
            const size_t at = r.offset();
            SKIPPY_TRY(r.i32("token", out.token));
            if (out.token < 0) return r.fail("token", at, wire::num_signed(out.token) + " is negative");
            SKIPPY_TRY(r.u32("decode_step", out.decode_step));
            uint32_t n = 0;
            const size_t n_at = r.offset();
            SKIPPY_TRY(r.u32("n_logprobs", n));
            if (n > max_logprobs) return r.fail("n_logprobs", n_at, num(n) + " exceeds max_logprobs " + num(max_logprobs));
            if (n == 0) break;
            SKIPPY_TRY(r.need("logprobs", 4 + 8ull * n));
            const size_t lp_at = r.offset();
            SKIPPY_TRY(r.f32("logprob", out.logprob));
            if (!is_logprob(out.logprob)) return r.fail("logprob", lp_at, "must be finite and <= 0");
            out.top_logprobs.resize(n);
            for (logprob_entry & e : out.top_logprobs) {
                const size_t token_at = r.offset();
                SKIPPY_TRY(r.i32("top_logprobs.token", e.token));
                if (e.token < 0) return r.fail("top_logprobs.token", token_at, wire::num_signed(e.token) + " is negative");
                const size_t e_at = r.offset();
                SKIPPY_TRY(r.f32("top_logprobs.logprob", e.logprob));
                if (!is_logprob(e.logprob)) return r.fail("top_logprobs.logprob", e_at, "must be finite and <= 0");
            }
            break;
        }
        case message_kind::predicted_tokens: {
            uint32_t n = 0;
            const size_t n_at = r.offset();
            SKIPPY_TRY(r.u32("n_tokens", n));
            if (n == 0 || n > limits.max_predicted_tokens) {
                return r.fail("n_tokens", n_at, num(n) + " is outside [1, max_predicted_tokens " +
                                                    num(limits.max_predicted_tokens) + "]");
            }
            const size_t at = r.offset();
            std::span<const uint8_t> data;
            SKIPPY_TRY(r.bytes("tokens", 4ull * n, data));  // checked against the bytes left first
            out.tokens.resize(n);
            for (uint32_t i = 0; i < n; ++i) {
                out.tokens[i] = static_cast<int32_t>(load_u32_le(data.data() + 4ull * i));
                if (out.tokens[i] < 0) {
                    return r.fail("tokens", at + 4ull * i, "[" + num(i) + "] " + wire::num_signed(out.tokens[i]) + " is negative");
                }
            }
            break;
        }
        case message_kind::error: {
            uint32_t code = 0;
            const size_t code_at = r.offset();
            SKIPPY_TRY(r.u32("error_code", code));
            if (!is_wire_error_code(code)) return r.fail("error_code", code_at, "unknown error code " + num(code));
            out.code = static_cast<error_code>(code);
            uint32_t n = 0;
            const size_t n_at = r.offset();
            SKIPPY_TRY(r.u32("message_len", n));
            if (n > limits.max_error_message_bytes) {
                return r.fail("message_len", n_at, num(n) + " exceeds max_error_message_bytes " +
                                                       num(limits.max_error_message_bytes));
            }
            const size_t at = r.offset();
            std::span<const uint8_t> text;
            SKIPPY_TRY(r.bytes("message", n, text));
            out.message.assign(reinterpret_cast<const char *>(text.data()), text.size());
            if (!wire::is_valid_utf8(out.message)) return r.fail("message", at, "not valid UTF-8");
            break;
        }
        default:
            break;
    }
    SKIPPY_TRY(r.expect_end());
    return out;
}

reply make_error_reply(uint64_t request_id, const status & st, const protocol_limits & limits) {
    assert(!st.is_ok());
    reply r;
    r.kind = message_kind::error;
    r.request_id = request_id;
    r.code = st.is_ok() ? error_code::internal : st.code();
    r.message = wire::sanitize_utf8(st.message(), limits.max_error_message_bytes);
    return r;
}

status error_reply_status(const reply & r) {
    assert(r.kind == message_kind::error);
    const error_code code = is_wire_error_code(static_cast<uint32_t>(r.code)) ? r.code : error_code::internal;
    return make_error(code, r.message);
}

}  // namespace skippy::protocol
