// Request frames: layout, per-kind rules, encode and decode.
//
// The rules live in one place (check_shape and the content checks below) and serve
// both validate_request, for our own messages before they are encoded, and
// decode_request, for bytes from a peer, which checks each rule as soon as the fields
// it needs are read and before anything is allocated.
#include "protocol/protocol.h"
#include "protocol/wire.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace skippy::protocol {

namespace {

constexpr std::string_view request_name = "request";

constexpr uint16_t flag_generation = 1u << 0;
constexpr uint16_t flag_positions = 1u << 1;
constexpr uint16_t flag_activation = 1u << 2;
constexpr uint16_t known_flags = flag_generation | flag_positions | flag_activation;

// Byte offsets of the fixed fields (docs/protocol.md), for error messages about rules
// that are checked once several fields are known.
constexpr size_t at_kind = 4;
constexpr size_t at_flags = 6;
constexpr size_t at_pos_start = 24;
constexpr size_t at_token_count = 32;
constexpr size_t at_state_version = 36;
constexpr size_t at_phase = 38;
constexpr size_t at_state_flags = 39;
constexpr size_t at_prompt_token_count = 40;
constexpr size_t at_current_token = 48;
[[maybe_unused]] constexpr size_t at_tokens = request_fixed_bytes;  // only asserted on

// Size of the generation config without its logit bias entries, cache key and grammar.
constexpr size_t generation_fixed_bytes = 40 + 4 + 1 + 4 + 2 + 4 + 4;

enum class presence : uint8_t { forbidden, optional, required };

// One row of the per-kind table in docs/protocol.md.
struct kind_rule {
    message_kind  kind;
    message_phase phase;
    uint32_t      min_tokens;
    uint32_t      max_tokens;  // before limits.max_tokens_per_message
    presence      positions;
    presence      generation;
    presence      activation;
    // state.current_token follows the tokens: the request decodes it at
    // pos_start + token_count, so it must be >= 0, takes one more position, and the
    // activation is its row alone (activation_rows). Only TryRestorePrefillDecode,
    // whose tokens are a cached prefix to restore rather than tokens to compute.
    bool          decodes_current_token;
};

constexpr uint32_t any = std::numeric_limits<uint32_t>::max();
using enum presence;

constexpr kind_rule kind_rules[] = {
    {message_kind::prefill,                    message_phase::prefill, 1, any, optional,  forbidden, optional,  false},
    {message_kind::prefill_final,              message_phase::prefill, 1, any, optional,  forbidden, optional,  false},
    {message_kind::decode,                     message_phase::decode,  1, 1,   optional,  forbidden, optional,  false},
    {message_kind::stop,                       message_phase::control, 0, 0,   forbidden, forbidden, forbidden, false},
    {message_kind::configure_generation,       message_phase::control, 0, any, forbidden, required,  forbidden, false},
    {message_kind::probe_prefill,              message_phase::control, 1, any, forbidden, forbidden, forbidden, false},
    {message_kind::restore_prefill,            message_phase::control, 1, any, forbidden, forbidden, forbidden, false},
    {message_kind::try_restore_prefill,        message_phase::control, 1, any, forbidden, forbidden, forbidden, false},
    {message_kind::try_restore_prefill_decode, message_phase::decode,  1, any, forbidden, forbidden, required,  true},
    {message_kind::trim_session,               message_phase::control, 0, 0,   forbidden, forbidden, forbidden, false},
    {message_kind::prediction_return_open,     message_phase::control, 0, 0,   forbidden, forbidden, forbidden, false},
};
static_assert(std::size(kind_rules) == static_cast<size_t>(message_kind::prediction_return_open));
// After Step's number, so outside the table.
constexpr kind_rule heartbeat_rule = {message_kind::heartbeat, message_phase::control, 0, 0, forbidden, forbidden, forbidden, false};

const kind_rule & rule_for(message_kind kind) {
    assert(is_request_kind(kind));
    if (kind == message_kind::heartbeat) return heartbeat_rule;
    return kind_rules[static_cast<size_t>(kind) - 1];
}

// Why a request of `kind` has the activation rows it has, for error messages.
std::string_view rows_rule(message_kind kind) {
    return is_request_kind(kind) && rule_for(kind).decodes_current_token ? "the current token's row only"
                                                                         : "one per token";
}

std::string_view phase_name(message_phase p) {
    switch (p) {
        case message_phase::none:    return "none";
        case message_phase::prefill: return "prefill";
        case message_phase::decode:  return "decode";
        case message_phase::control: return "control";
    }
    return "unknown";
}

// A broken rule: the field it concerns, that field's byte offset in the frame, and
// what is wrong. Offsets of variable-position fields are filled in by the caller.
struct problem {
    std::string_view field;
    size_t           offset = 0;
    std::string      detail;
    error_code       code = error_code::invalid_data;
};
using check = std::optional<problem>;

// What check_shape needs: everything in the fixed part plus which sections follow.
struct request_shape {
    message_kind kind;
    uint16_t     flags;
    int64_t      pos_start;
    uint32_t     token_count;
    state_header state;
};

check check_presence(std::string_view what, presence rule, bool present, message_kind kind) {
    if (rule == forbidden && present) {
        return problem{"flags", at_flags, std::string(message_kind_name(kind)) + " may not carry " + std::string(what)};
    }
    if (rule == required && !present) {
        return problem{"flags", at_flags, std::string(message_kind_name(kind)) + " requires " + std::string(what)};
    }
    return std::nullopt;
}

// The rules that need only the fixed part of a request (docs/protocol.md, "Per-kind
// rules"). Checked before any token is read.
check check_shape(const request_shape & s, const protocol_limits & limits) {
    using wire::num;
    if (!is_request_kind(s.kind)) {
        return problem{"kind", at_kind, "kind " + num(static_cast<uint16_t>(s.kind)) + " is not a request"};
    }
    const kind_rule & rule = rule_for(s.kind);
    const std::string kind_name(message_kind_name(s.kind));
    if ((s.flags & ~known_flags) != 0) {
        return problem{"flags", at_flags, "unknown flag bits 0x" + wire::hex16(s.flags & ~known_flags)};
    }
    if (s.token_count > limits.max_tokens_per_message) {
        return problem{"token_count", at_token_count,
                       num(s.token_count) + " exceeds max_tokens_per_message " + num(limits.max_tokens_per_message)};
    }
    if (s.token_count < rule.min_tokens || s.token_count > rule.max_tokens) {
        std::string want = rule.min_tokens == rule.max_tokens ? "exactly " + num(rule.min_tokens)
                                                              : "at least " + num(rule.min_tokens);
        return problem{"token_count", at_token_count, kind_name + " needs " + want + " tokens, has " + num(s.token_count)};
    }
    if (s.pos_start < 0) return problem{"pos_start", at_pos_start, wire::num_signed(s.pos_start) + " is negative"};
    // Every position of the message must fit an i32 (explicit positions are i32),
    // including that of a current token decoded after the tokens.
    constexpr int64_t max_position_end = std::numeric_limits<int32_t>::max();
    const int64_t n_positions = static_cast<int64_t>(s.token_count) + (rule.decodes_current_token ? 1 : 0);
    if (s.pos_start > max_position_end - n_positions) {
        return problem{"pos_start", at_pos_start,
                       "pos_start " + wire::num_signed(s.pos_start) + " + token_count " + num(s.token_count) +
                           (rule.decodes_current_token ? " + 1 (the decoded current token)" : "") +
                           " passes 2^31 - 1"};
    }
    if (auto p = check_presence("positions", rule.positions, (s.flags & flag_positions) != 0, s.kind)) return p;
    if (auto p = check_presence("a generation config", rule.generation, (s.flags & flag_generation) != 0, s.kind)) return p;
    if (auto p = check_presence("an activation", rule.activation, (s.flags & flag_activation) != 0, s.kind)) return p;

    const state_header & st = s.state;
    if (st.version != state_header_version) {
        return problem{"state.version", at_state_version,
                       "state header version " + num(st.version) + ", this stage speaks " + num(state_header_version),
                       error_code::unsupported};
    }
    if (st.phase != rule.phase) {
        const auto v = static_cast<uint8_t>(st.phase);
        const std::string got = v <= static_cast<uint8_t>(message_phase::control) ? std::string(phase_name(st.phase))
                                                                                   : "unknown phase " + num(v);
        return problem{"state.phase", at_phase,
                       kind_name + " must have phase " + std::string(phase_name(rule.phase)) + ", has " + got};
    }
    if (st.flags != 0) return problem{"state.flags", at_state_flags, "must be 0, is " + num(st.flags)};
    if (st.current_token < -1) {
        return problem{"state.current_token", at_current_token, wire::num_signed(st.current_token) + " is below -1"};
    }
    const int64_t end = s.pos_start + s.token_count;
    if (s.kind == message_kind::prefill_final && end != st.prompt_token_count) {
        return problem{"state.prompt_token_count", at_prompt_token_count,
                       "prefill_final ends at " + wire::num_signed(end) + " but the prompt has " +
                           num(st.prompt_token_count) + " tokens"};
    }
    if (s.kind == message_kind::prefill && end > st.prompt_token_count) {
        return problem{"state.prompt_token_count", at_prompt_token_count,
                       "prefill ends at " + wire::num_signed(end) + ", past the prompt's " +
                           num(st.prompt_token_count) + " tokens"};
    }
    if (rule.decodes_current_token && st.current_token < 0) {
        return problem{"state.current_token", at_current_token, kind_name + " needs a current token"};
    }
    return std::nullopt;
}

check check_token(std::string_view field, int32_t v) {
    if (v < 0) return problem{field, 0, wire::num_signed(v) + " is negative"};
    return std::nullopt;
}

check check_finite(std::string_view field, float v) {
    if (!std::isfinite(v)) return problem{field, 0, "is not finite"};
    return std::nullopt;
}

check check_cache_mode(uint8_t v) {
    if (v > static_cast<uint8_t>(prompt_cache_mode::lookup_record)) {
        return problem{"generation.cache_mode", 0, "unknown cache mode " + wire::num(v)};
    }
    return std::nullopt;
}

// An activation of ours holds `rows` rows of finite values and a valid descriptor.
check check_activation(const activation_frame & a, uint64_t rows, std::string_view rule, const protocol_limits & limits) {
    if (static_cast<uint8_t>(a.dtype) > static_cast<uint8_t>(activation_dtype::bf16)) {
        return problem{"activation.dtype", 0, "unknown dtype " + wire::num(static_cast<uint8_t>(a.dtype))};
    }
    if (a.layer_end < a.layer_start) {
        return problem{"activation.layer_end", 0, wire::num(a.layer_end) + " is below layer_start " + wire::num(a.layer_start)};
    }
    if (a.n_embd == 0 || a.n_embd > limits.max_embd) {
        return problem{"activation.n_embd", 0, wire::num(a.n_embd) + " is outside [1, max_embd " + wire::num(limits.max_embd) + "]"};
    }
    if (a.values.size() != rows * a.n_embd) {
        return problem{"activation.values", 0, wire::num(a.values.size()) + " values for " + wire::num(rows) + " rows (" +
                                                   std::string(rule) + ") x n_embd " + wire::num(a.n_embd)};
    }
    for (size_t i = 0; i < a.values.size(); ++i) {
        if (!std::isfinite(a.values[i])) return problem{"activation.values", 0, "value " + wire::num(i) + " is not finite"};
    }
    return std::nullopt;
}

uint16_t flags_of(const request & r) {
    uint16_t f = 0;
    if (r.generation) f |= flag_generation;
    if (!r.positions.empty()) f |= flag_positions;
    if (r.activation) f |= flag_activation;
    return f;
}

request_shape shape_of(const request & r) {
    // A count that does not fit u32 is clamped so that the limit check reports it.
    const uint32_t n = r.tokens.size() > any ? any : static_cast<uint32_t>(r.tokens.size());
    return {r.kind, flags_of(r), r.pos_start, n, r.state};
}

status to_argument_error(const problem & p) {
    return make_error(p.code == error_code::invalid_data ? error_code::invalid_argument : p.code,
                      "request field " + std::string(p.field) + ": " + p.detail);
}

status to_data_error(const wire::field_reader & r, const problem & p, size_t offset) {
    if (p.code != error_code::invalid_data) {
        return make_error(p.code, "request field " + std::string(p.field) + " (byte " + wire::num(offset) + "): " + p.detail);
    }
    return r.fail(p.field, offset, p.detail);
}

size_t generation_bytes(const generation_config & g) {
    return generation_fixed_bytes + 8 * g.sampling.logit_bias.size() + g.cache_key.size() + g.sampling.grammar.size();
}

size_t encoded_size(const request & r, activation_dtype wire_dtype) {
    size_t n = request_fixed_bytes + 4 * r.tokens.size() + 4 * r.positions.size();
    if (r.generation) n += generation_bytes(*r.generation);
    if (r.activation) {
        n += wire::activation_header_bytes + r.activation->values.size() * wire::activation_elem_bytes(wire_dtype);
    }
    return n;
}

activation_dtype wire_dtype_of(const request & r) {
    return r.activation ? choose_activation_dtype(r.activation->values, r.activation->dtype) : activation_dtype::f32;
}

// --- generation config on the wire

void put_generation(byte_writer & w, const generation_config & g) {
    const sampling_params & s = g.sampling;
    w.put_f32(s.temperature);
    w.put_i32(s.top_k);
    w.put_f32(s.top_p);
    w.put_f32(s.min_p);
    w.put_u64(s.seed);
    w.put_f32(s.repeat_penalty);
    w.put_f32(s.presence_penalty);
    w.put_f32(s.frequency_penalty);
    w.put_i32(s.penalty_last_n);
    w.put_u32(static_cast<uint32_t>(s.logit_bias.size()));
    for (const auto & [token, bias] : s.logit_bias) {
        w.put_i32(token);
        w.put_f32(bias);
    }
    w.put_u8(static_cast<uint8_t>(g.cache_mode));
    w.put_u32(g.cache_min_tokens);
    w.put_u16(static_cast<uint16_t>(g.cache_key.size()));
    w.put_bytes(g.cache_key.data(), g.cache_key.size());
    w.put_u32(static_cast<uint32_t>(s.grammar.size()));
    w.put_bytes(s.grammar.data(), s.grammar.size());
    w.put_u32(s.n_logprobs);
}

status get_finite(wire::field_reader & r, std::string_view field, float & v) {
    const size_t at = r.offset();
    SKIPPY_TRY(r.f32(field, v));
    if (auto p = check_finite(field, v)) return r.fail(field, at, p->detail);
    return status::ok();
}

// A length-prefixed byte string: the length (a u16 or u32 named `<field>_len`) is
// checked against `max` before the bytes are read.
template <typename len_type>
status get_bounded_bytes(wire::field_reader & r, const std::string & field, uint32_t max, std::string_view limit_name,
                         std::string & out) {
    const std::string len_field = field + "_len";
    len_type len = 0;
    const size_t len_at = r.offset();
    if constexpr (sizeof(len_type) == 2) {
        SKIPPY_TRY(r.u16(len_field, len));
    } else {
        SKIPPY_TRY(r.u32(len_field, len));
    }
    if (len > max) return r.fail(len_field, len_at, wire::num(len) + " exceeds " + std::string(limit_name) + " " + wire::num(max));
    std::span<const uint8_t> bytes;
    SKIPPY_TRY(r.bytes(field, len, bytes));
    out.assign(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    return status::ok();
}

status get_generation(wire::field_reader & r, const protocol_limits & limits, generation_config & g) {
    sampling_params & s = g.sampling;
    SKIPPY_TRY(get_finite(r, "generation.temperature", s.temperature));
    SKIPPY_TRY(r.i32("generation.top_k", s.top_k));
    SKIPPY_TRY(get_finite(r, "generation.top_p", s.top_p));
    SKIPPY_TRY(get_finite(r, "generation.min_p", s.min_p));
    SKIPPY_TRY(r.u64("generation.seed", s.seed));
    SKIPPY_TRY(get_finite(r, "generation.repeat_penalty", s.repeat_penalty));
    SKIPPY_TRY(get_finite(r, "generation.presence_penalty", s.presence_penalty));
    SKIPPY_TRY(get_finite(r, "generation.frequency_penalty", s.frequency_penalty));
    SKIPPY_TRY(r.i32("generation.penalty_last_n", s.penalty_last_n));
    uint32_t n_bias = 0;
    const size_t n_bias_at = r.offset();
    SKIPPY_TRY(r.u32("generation.n_logit_bias", n_bias));
    if (n_bias > limits.max_logit_bias) {
        return r.fail("generation.n_logit_bias", n_bias_at,
                      wire::num(n_bias) + " exceeds max_logit_bias " + wire::num(limits.max_logit_bias));
    }
    SKIPPY_TRY(r.need("generation.logit_bias", 8ull * n_bias));
    s.logit_bias.resize(n_bias);
    for (auto & [token, bias] : s.logit_bias) {
        const size_t at = r.offset();
        SKIPPY_TRY(r.i32("generation.logit_bias.token", token));
        if (auto p = check_token("generation.logit_bias.token", token)) return r.fail(p->field, at, p->detail);
        SKIPPY_TRY(get_finite(r, "generation.logit_bias.bias", bias));
    }
    uint8_t mode = 0;
    const size_t mode_at = r.offset();
    SKIPPY_TRY(r.u8("generation.cache_mode", mode));
    if (auto p = check_cache_mode(mode)) return r.fail(p->field, mode_at, p->detail);
    g.cache_mode = static_cast<prompt_cache_mode>(mode);
    SKIPPY_TRY(r.u32("generation.cache_min_tokens", g.cache_min_tokens));
    SKIPPY_TRY(get_bounded_bytes<uint16_t>(r, "generation.cache_key", limits.max_cache_key_bytes, "max_cache_key_bytes", g.cache_key));
    SKIPPY_TRY(get_bounded_bytes<uint32_t>(r, "generation.grammar", limits.max_grammar_bytes, "max_grammar_bytes", s.grammar));
    const size_t n_logprobs_at = r.offset();
    SKIPPY_TRY(r.u32("generation.n_logprobs", s.n_logprobs));
    if (s.n_logprobs > max_logprobs) {
        return r.fail("generation.n_logprobs", n_logprobs_at, wire::num(s.n_logprobs) + " exceeds max_logprobs " + wire::num(max_logprobs));
    }
    return status::ok();
}

// Reads n i32 values that must each be >= 0 (token ids, positions).
status get_non_negative_i32s(wire::field_reader & r, std::string_view field, uint32_t n, std::vector<int32_t> & out) {
    const size_t at = r.offset();
    std::span<const uint8_t> data;
    SKIPPY_TRY(r.bytes(field, 4ull * n, data));  // checked against the bytes left first
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
        out[i] = static_cast<int32_t>(load_u32_le(data.data() + 4ull * i));
        if (auto p = check_token(field, out[i])) return r.fail(field, at + 4ull * i, "[" + wire::num(i) + "] " + p->detail);
    }
    return status::ok();
}

}  // namespace

// ---------------------------------------------------------------------------------

uint32_t activation_rows(message_kind kind, uint32_t token_count) {
    // A non-request kind has no activation; answering token_count keeps this total.
    if (is_request_kind(kind) && rule_for(kind).decodes_current_token) return 1;
    return token_count;
}

status validate_request(const request & r, const protocol_limits & limits) {
    if (auto p = check_shape(shape_of(r), limits)) return to_argument_error(*p);
    for (size_t i = 0; i < r.tokens.size(); ++i) {
        if (auto p = check_token("tokens", r.tokens[i])) return to_argument_error(*p);
    }
    if (!r.positions.empty()) {
        if (r.positions.size() != r.tokens.size()) {
            return to_argument_error({"positions", 0, wire::num(r.positions.size()) + " positions for " +
                                                          wire::num(r.tokens.size()) + " tokens"});
        }
        for (int32_t v : r.positions) {
            if (auto p = check_token("positions", v)) return to_argument_error(*p);
        }
    }
    if (r.generation) {
        const generation_config & g = *r.generation;
        const sampling_params & s = g.sampling;
        const std::pair<std::string_view, float> floats[] = {
            {"generation.temperature", s.temperature},
            {"generation.top_p", s.top_p},
            {"generation.min_p", s.min_p},
            {"generation.repeat_penalty", s.repeat_penalty},
            {"generation.presence_penalty", s.presence_penalty},
            {"generation.frequency_penalty", s.frequency_penalty},
        };
        for (const auto & [field, v] : floats) {
            if (auto p = check_finite(field, v)) return to_argument_error(*p);
        }
        if (s.logit_bias.size() > limits.max_logit_bias) {
            return to_argument_error({"generation.n_logit_bias", 0, wire::num(s.logit_bias.size()) +
                                                                        " exceeds max_logit_bias " +
                                                                        wire::num(limits.max_logit_bias)});
        }
        for (const auto & [token, bias] : s.logit_bias) {
            if (auto p = check_token("generation.logit_bias.token", token)) return to_argument_error(*p);
            if (auto p = check_finite("generation.logit_bias.bias", bias)) return to_argument_error(*p);
        }
        if (auto p = check_cache_mode(static_cast<uint8_t>(g.cache_mode))) return to_argument_error(*p);
        if (g.cache_key.size() > limits.max_cache_key_bytes || g.cache_key.size() > std::numeric_limits<uint16_t>::max()) {
            return to_argument_error({"generation.cache_key_len", 0, wire::num(g.cache_key.size()) +
                                                                         " exceeds max_cache_key_bytes " +
                                                                         wire::num(limits.max_cache_key_bytes)});
        }
        if (s.grammar.size() > limits.max_grammar_bytes || s.grammar.size() > std::numeric_limits<uint32_t>::max()) {
            return to_argument_error({"generation.grammar_len", 0, wire::num(s.grammar.size()) +
                                                                       " exceeds max_grammar_bytes " +
                                                                       wire::num(limits.max_grammar_bytes)});
        }
        if (s.n_logprobs > max_logprobs) {
            return to_argument_error({"generation.n_logprobs", 0, wire::num(s.n_logprobs) + " exceeds max_logprobs " +
                                                                      wire::num(max_logprobs)});
        }
    }
    if (r.activation) {
        // check_shape() above bounded the token count by max_tokens_per_message: it fits u32.
        const uint64_t rows = activation_rows(r.kind, static_cast<uint32_t>(r.tokens.size()));
        if (auto p = check_activation(*r.activation, rows, rows_rule(r.kind), limits)) return to_argument_error(*p);
    }
    const size_t n_bytes = encoded_size(r, wire_dtype_of(r));
    if (n_bytes > limits.max_frame_bytes) {
        return to_argument_error({"frame_bytes", 0, "the encoded request takes " + wire::num(n_bytes) +
                                                        " bytes, over max_frame_bytes " +
                                                        wire::num(limits.max_frame_bytes)});
    }
    return status::ok();
}

size_t encoded_request_bytes(const request & r) { return encoded_size(r, wire_dtype_of(r)); }

std::vector<uint8_t> encode_request(const request & r) {
    assert(r.positions.empty() || r.positions.size() == r.tokens.size());
    const activation_dtype wire_dtype = wire_dtype_of(r);
    const size_t n_bytes = encoded_size(r, wire_dtype);
    assert(n_bytes <= std::numeric_limits<uint32_t>::max());
    std::vector<uint8_t> out;
    out.reserve(n_bytes);
    byte_writer w(out);
    w.put_u32(static_cast<uint32_t>(n_bytes));
    w.put_u16(static_cast<uint16_t>(r.kind));
    w.put_u16(flags_of(r));
    w.put_u64(r.request_id);
    w.put_u64(r.session_id);
    w.put_i64(r.pos_start);
    w.put_u32(static_cast<uint32_t>(r.tokens.size()));
    w.put_u16(r.state.version);
    w.put_u8(static_cast<uint8_t>(r.state.phase));
    w.put_u8(r.state.flags);
    w.put_u32(r.state.prompt_token_count);
    w.put_u32(r.state.decode_step);
    w.put_i32(r.state.current_token);
    w.put_u32(r.state.source_stage);
    wire::put_stats(w, r.stats);
    for (int32_t t : r.tokens) w.put_i32(t);
    for (int32_t p : r.positions) w.put_i32(p);
    if (r.generation) put_generation(w, *r.generation);
    if (r.activation) {
        const uint32_t rows = activation_rows(r.kind, static_cast<uint32_t>(r.tokens.size()));
        wire::put_activation(out, *r.activation, rows, wire_dtype);
    }
    assert(out.size() == n_bytes);
    return out;
}

result<request> decode_request(std::span<const uint8_t> frame, const protocol_limits & limits) {
    SKIPPY_ASSIGN_OR_RETURN(const uint16_t kind, wire::check_frame(frame, limits, request_name));
    wire::field_reader r(frame, request_name);
    SKIPPY_TRY(r.skip("header", frame_header_bytes));  // checked by check_frame
    request out;
    out.kind = static_cast<message_kind>(kind);
    if (!is_request_kind(out.kind)) {
        const std::string what = is_reply_kind(out.kind)  ? " is a reply, not a request"
                                 : is_step_kind(out.kind) ? " is a step (decode_step reads it), not a request"
                                                          : " is unknown";
        return r.fail("kind", at_kind, "kind " + wire::num(kind) + what);
    }
    uint16_t flags = 0;
    uint32_t token_count = 0;
    SKIPPY_TRY(r.u16("flags", flags));
    SKIPPY_TRY(r.u64("request_id", out.request_id));
    SKIPPY_TRY(r.u64("session_id", out.session_id));
    SKIPPY_TRY(r.i64("pos_start", out.pos_start));
    SKIPPY_TRY(r.u32("token_count", token_count));
    uint8_t phase = 0;
    SKIPPY_TRY(r.u16("state.version", out.state.version));
    SKIPPY_TRY(r.u8("state.phase", phase));
    out.state.phase = static_cast<message_phase>(phase);  // any value; check_shape names a bad one
    SKIPPY_TRY(r.u8("state.flags", out.state.flags));
    SKIPPY_TRY(r.u32("state.prompt_token_count", out.state.prompt_token_count));
    SKIPPY_TRY(r.u32("state.decode_step", out.state.decode_step));
    SKIPPY_TRY(r.i32("state.current_token", out.state.current_token));
    SKIPPY_TRY(r.u32("state.source_stage", out.state.source_stage));
    SKIPPY_TRY(wire::get_stats(r, out.stats));
    assert(r.offset() == at_tokens);

    if (auto p = check_shape({out.kind, flags, out.pos_start, token_count, out.state}, limits)) {
        return to_data_error(r, *p, p->offset);
    }
    SKIPPY_TRY(get_non_negative_i32s(r, "tokens", token_count, out.tokens));
    if (flags & flag_positions) SKIPPY_TRY(get_non_negative_i32s(r, "positions", token_count, out.positions));
    if (flags & flag_generation) SKIPPY_TRY(get_generation(r, limits, out.generation.emplace()));
    if (flags & flag_activation) {
        const uint32_t rows = activation_rows(out.kind, token_count);
        SKIPPY_TRY(wire::get_activation(r, rows, rows_rule(out.kind), limits, out.activation.emplace()));
    }
    SKIPPY_TRY(r.expect_end());
    return out;
}

// ---------------------------------------------------------------------------------
// Steps: a header, entries laid out as a request's fixed part (without frame_bytes)
// followed by their tokens, then one activation with every entry's rows.

namespace {

constexpr std::string_view step_name = "step";
constexpr size_t at_step_flags = 6;
constexpr size_t at_step_n_entries = 20;

bool is_step_entry_kind(message_kind k) {
    return k == message_kind::prefill || k == message_kind::prefill_final || k == message_kind::decode;
}

// "entries[3].pos_start": the field of entry i.
std::string entry_field(size_t i, std::string_view field) { return "entries[" + wire::num(i) + "]." + std::string(field); }

check check_entry(const step_entry & e, const protocol_limits & limits) {
    if (!is_step_entry_kind(e.kind)) {
        return problem{"kind", at_kind, "kind " + wire::num(static_cast<uint16_t>(e.kind)) + " (" +
                                            std::string(message_kind_name(e.kind)) + ") cannot be a step entry"};
    }
    const uint32_t n = e.tokens.size() > any ? any : static_cast<uint32_t>(e.tokens.size());
    // An entry's rows are in the step's activation, as a request's would be in its own.
    return check_shape({e.kind, flag_activation, e.pos_start, n, e.state}, limits);
}

uint64_t step_rows(const step_frame & s) {
    uint64_t rows = 0;
    for (const auto & e : s.entries) rows += e.tokens.size();
    return rows;
}

size_t step_size(const step_frame & s, activation_dtype wire_dtype) {
    size_t n = step_fixed_bytes + wire::activation_header_bytes + s.activation.values.size() * wire::activation_elem_bytes(wire_dtype);
    for (const auto & e : s.entries) n += step_entry_fixed_bytes + 4 * e.tokens.size();
    return n;
}

status step_argument_error(size_t entry, const problem & p) {
    return make_error(p.code == error_code::invalid_data ? error_code::invalid_argument : p.code,
                      "step field " + entry_field(entry, p.field) + ": " + p.detail);
}

}  // namespace

status validate_step(const step_frame & s, const protocol_limits & limits) {
    auto fail = [](const std::string & field, const std::string & detail) {
        return make_error(error_code::invalid_argument, "step field " + field + ": " + detail);
    };
    if (s.entries.empty() || s.entries.size() > limits.max_step_entries) {
        return fail("n_entries", wire::num(s.entries.size()) + " is outside [1, max_step_entries " + wire::num(limits.max_step_entries) + "]");
    }
    uint64_t rows = 0;
    std::vector<uint64_t> lanes;
    for (size_t i = 0; i < s.entries.size(); ++i) {
        const step_entry & e = s.entries[i];
        if (auto p = check_entry(e, limits)) return step_argument_error(i, *p);
        for (int32_t t : e.tokens) {
            if (auto p = check_token("tokens", t)) return step_argument_error(i, *p);
        }
        rows += e.tokens.size();
        lanes.push_back(e.session_id);
    }
    if (rows > limits.max_tokens_per_message) {
        return fail("entries", "the entries hold " + wire::num(rows) + " tokens, over max_tokens_per_message " +
                                   wire::num(limits.max_tokens_per_message));
    }
    std::sort(lanes.begin(), lanes.end());
    if (auto twice = std::adjacent_find(lanes.begin(), lanes.end()); twice != lanes.end()) {
        return fail("entries", "lane " + wire::num(*twice) + " appears twice");
    }
    if (auto p = check_activation(s.activation, rows, "one per token of every entry", limits)) {
        return fail(std::string(p->field), p->detail);
    }
    const size_t n_bytes = step_size(s, choose_activation_dtype(s.activation.values, s.activation.dtype));
    if (n_bytes > limits.max_frame_bytes) {
        return fail("frame_bytes", "the encoded step takes " + wire::num(n_bytes) + " bytes, over max_frame_bytes " +
                                       wire::num(limits.max_frame_bytes));
    }
    return status::ok();
}

size_t encoded_step_bytes(const step_frame & s) { return step_size(s, choose_activation_dtype(s.activation.values, s.activation.dtype)); }

std::vector<uint8_t> encode_step(const step_frame & s) {
    const activation_dtype wire_dtype = choose_activation_dtype(s.activation.values, s.activation.dtype);
    const size_t n_bytes = step_size(s, wire_dtype);
    assert(n_bytes <= std::numeric_limits<uint32_t>::max());
    std::vector<uint8_t> out;
    out.reserve(n_bytes);
    byte_writer w(out);
    w.put_u32(static_cast<uint32_t>(n_bytes));
    w.put_u16(static_cast<uint16_t>(message_kind::step));
    w.put_u16(flag_activation);
    w.put_u64(s.step_id);
    w.put_u32(s.source_stage);
    w.put_u32(static_cast<uint32_t>(s.entries.size()));
    for (const step_entry & e : s.entries) {
        w.put_u16(static_cast<uint16_t>(e.kind));
        w.put_u16(0);  // entry flags: none defined
        w.put_u64(e.request_id);
        w.put_u64(e.session_id);
        w.put_i64(e.pos_start);
        w.put_u32(static_cast<uint32_t>(e.tokens.size()));
        w.put_u16(e.state.version);
        w.put_u8(static_cast<uint8_t>(e.state.phase));
        w.put_u8(e.state.flags);
        w.put_u32(e.state.prompt_token_count);
        w.put_u32(e.state.decode_step);
        w.put_i32(e.state.current_token);
        w.put_u32(e.state.source_stage);
        wire::put_stats(w, e.stats);
        for (int32_t t : e.tokens) w.put_i32(t);
    }
    wire::put_activation(out, s.activation, static_cast<uint32_t>(step_rows(s)), wire_dtype);
    assert(out.size() == n_bytes);
    return out;
}

result<step_frame> decode_step(std::span<const uint8_t> frame, const protocol_limits & limits) {
    SKIPPY_ASSIGN_OR_RETURN(const uint16_t kind, wire::check_frame(frame, limits, step_name));
    wire::field_reader r(frame, step_name);
    SKIPPY_TRY(r.skip("header", frame_header_bytes));
    if (!is_step_kind(static_cast<message_kind>(kind))) {
        return r.fail("kind", at_kind, "kind " + wire::num(kind) + " is not a step");
    }
    uint16_t flags = 0;
    SKIPPY_TRY(r.u16("flags", flags));
    if (flags != flag_activation) {
        return r.fail("flags", at_step_flags, "must be 0x0004 (an activation), is 0x" + wire::hex16(flags));
    }
    step_frame out;
    uint32_t n_entries = 0;
    SKIPPY_TRY(r.u64("step_id", out.step_id));
    SKIPPY_TRY(r.u32("source_stage", out.source_stage));
    SKIPPY_TRY(r.u32("n_entries", n_entries));
    if (n_entries == 0 || n_entries > limits.max_step_entries) {
        return r.fail("n_entries", at_step_n_entries,
                      wire::num(n_entries) + " is outside [1, max_step_entries " + wire::num(limits.max_step_entries) + "]");
    }
    // Every entry takes at least its fixed part: a count the frame cannot hold is
    // refused before the entries are allocated.
    SKIPPY_TRY(r.need("entries", uint64_t{n_entries} * step_entry_fixed_bytes));
    out.entries.resize(n_entries);
    uint64_t rows = 0;
    std::vector<uint64_t> lanes;
    lanes.reserve(n_entries);
    for (uint32_t i = 0; i < n_entries; ++i) {
        step_entry & e = out.entries[i];
        const size_t base = r.offset();
        const std::string f = entry_field(i, "");
        uint16_t entry_kind = 0, entry_flags = 0;
        uint32_t token_count = 0;
        uint8_t phase = 0;
        SKIPPY_TRY(r.u16(f + "kind", entry_kind));
        SKIPPY_TRY(r.u16(f + "flags", entry_flags));
        SKIPPY_TRY(r.u64(f + "request_id", e.request_id));
        SKIPPY_TRY(r.u64(f + "session_id", e.session_id));
        SKIPPY_TRY(r.i64(f + "pos_start", e.pos_start));
        SKIPPY_TRY(r.u32(f + "token_count", token_count));
        SKIPPY_TRY(r.u16(f + "state.version", e.state.version));
        SKIPPY_TRY(r.u8(f + "state.phase", phase));
        e.state.phase = static_cast<message_phase>(phase);
        SKIPPY_TRY(r.u8(f + "state.flags", e.state.flags));
        SKIPPY_TRY(r.u32(f + "state.prompt_token_count", e.state.prompt_token_count));
        SKIPPY_TRY(r.u32(f + "state.decode_step", e.state.decode_step));
        SKIPPY_TRY(r.i32(f + "state.current_token", e.state.current_token));
        SKIPPY_TRY(r.u32(f + "state.source_stage", e.state.source_stage));
        SKIPPY_TRY(wire::get_stats(r, e.stats));
        e.kind = static_cast<message_kind>(entry_kind);
        if (entry_flags != 0) return r.fail(f + "flags", base + 2, "must be 0 (entries carry no positions or config), is 0x" + wire::hex16(entry_flags));
        if (!is_step_entry_kind(e.kind)) {
            return r.fail(f + "kind", base, "kind " + wire::num(entry_kind) + " (" + std::string(message_kind_name(e.kind)) +
                                                ") cannot be a step entry");
        }
        if (auto p = check_shape({e.kind, flag_activation, e.pos_start, token_count, e.state}, limits)) {
            if (p->code != error_code::invalid_data) {
                return make_error(p->code, "step field " + entry_field(i, p->field) + " (byte " + wire::num(base + p->offset - 4) + "): " + p->detail);
            }
            return r.fail(entry_field(i, p->field), base + p->offset - 4, p->detail);
        }
        rows += token_count;
        if (rows > limits.max_tokens_per_message) {
            return r.fail(f + "token_count", base + at_token_count - 4,
                          "the entries so far hold " + wire::num(rows) + " tokens, over max_tokens_per_message " +
                              wire::num(limits.max_tokens_per_message));
        }
        SKIPPY_TRY(get_non_negative_i32s(r, f + "tokens", token_count, e.tokens));
        if (std::find(lanes.begin(), lanes.end(), e.session_id) != lanes.end()) {
            return r.fail(f + "session_id", base + 12, "lane " + wire::num(e.session_id) + " appears twice in the step");
        }
        lanes.push_back(e.session_id);
    }
    SKIPPY_TRY(wire::get_activation(r, static_cast<uint32_t>(rows), "one per token of every entry", limits, out.activation));
    SKIPPY_TRY(r.expect_end());
    return out;
}

}  // namespace skippy::protocol
