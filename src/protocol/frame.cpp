// Frame header: kinds and the length check the transport reads by.
#include "protocol/protocol.h"
#include "protocol/wire.h"

#include <algorithm>

namespace skippy::protocol {

std::string_view message_kind_name(message_kind kind) {
    switch (kind) {
        case message_kind::prefill:                    return "prefill";
        case message_kind::prefill_final:              return "prefill_final";
        case message_kind::decode:                     return "decode";
        case message_kind::stop:                       return "stop";
        case message_kind::configure_generation:       return "configure_generation";
        case message_kind::probe_prefill:              return "probe_prefill";
        case message_kind::restore_prefill:            return "restore_prefill";
        case message_kind::try_restore_prefill:        return "try_restore_prefill";
        case message_kind::try_restore_prefill_decode: return "try_restore_prefill_decode";
        case message_kind::trim_session:               return "trim_session";
        case message_kind::prediction_return_open:     return "prediction_return_open";
        case message_kind::step:                       return "step";
        case message_kind::heartbeat:                  return "heartbeat";
        case message_kind::ack:                        return "ack";
        case message_kind::predicted_token:            return "predicted_token";
        case message_kind::predicted_tokens:           return "predicted_tokens";
        case message_kind::error:                      return "error";
    }
    return "unknown";
}

bool is_request_kind(message_kind kind) {
    const auto v = static_cast<uint16_t>(kind);
    return (v >= static_cast<uint16_t>(message_kind::prefill) &&
            v <= static_cast<uint16_t>(message_kind::prediction_return_open)) ||
           kind == message_kind::heartbeat;
}

bool is_step_kind(message_kind kind) { return kind == message_kind::step; }

bool is_reply_kind(message_kind kind) {
    const auto v = static_cast<uint16_t>(kind);
    return v >= static_cast<uint16_t>(message_kind::ack) && v <= static_cast<uint16_t>(message_kind::error);
}

result<uint32_t> peek_frame_length(std::span<const uint8_t> first4, const protocol_limits & limits) {
    if (first4.size() < 4) {
        return wire::bad_field("frame", "frame_bytes", 0, "truncated: needs 4 bytes, " + wire::num(first4.size()) + " given");
    }
    const uint32_t n = load_u32_le(first4.data());
    if (n < min_frame_bytes) {
        return wire::bad_field("frame", "frame_bytes", 0, wire::num(n) + " is below the minimum frame of " + wire::num(min_frame_bytes));
    }
    if (n > limits.max_frame_bytes) {
        return wire::bad_field("frame", "frame_bytes", 0, wire::num(n) + " exceeds max_frame_bytes " + wire::num(limits.max_frame_bytes));
    }
    return n;
}

result<message_kind> peek_frame_kind(std::span<const uint8_t> header) {
    if (header.size() < frame_header_bytes) {
        return wire::bad_field("frame", "kind", 4, "truncated: needs 6 bytes, " + wire::num(header.size()) + " given");
    }
    const auto kind = static_cast<message_kind>(load_u16_le(header.data() + 4));
    if (!is_request_kind(kind) && !is_step_kind(kind) && !is_reply_kind(kind)) {
        return wire::bad_field("frame", "kind", 4, "unknown kind " + wire::num(static_cast<uint16_t>(kind)));
    }
    return kind;
}

uint32_t max_frame_bytes_of_kind(message_kind kind, const protocol_limits & limits) {
    switch (kind) {
        case message_kind::prefill:
        case message_kind::prefill_final:
        case message_kind::decode:
        case message_kind::try_restore_prefill_decode:
        case message_kind::step:
            return limits.max_frame_bytes;
        default:
            break;
    }
    // Generous on purpose (the decoders check the exact layout): every variable part any
    // other kind can hold, at its limit, plus 1 MiB for the fixed fields.
    const uint64_t bound = (uint64_t{1} << 20) + 8ull * limits.max_tokens_per_message + limits.max_cache_key_bytes +
                           limits.max_grammar_bytes + 16ull * limits.max_logit_bias + 64ull * limits.max_predicted_tokens +
                           8ull * (max_logprobs + 1) + limits.max_error_message_bytes;
    return static_cast<uint32_t>(std::min<uint64_t>(bound, limits.max_frame_bytes));
}

}  // namespace skippy::protocol
