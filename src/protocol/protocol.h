// The stage wire format (DESIGN §5; the byte-level spec is docs/protocol.md).
//
// Pure encode/decode: no sockets, no runtime types. The transport reads bytes off a
// connection and hands them here; it never interprets a byte itself.
//
//   connection:  hello ──▶            (dialer)
//                ◀── hello_reply       (listener)
//                [ ◀── auth_challenge, auth_proof ──▶, ◀── hello_reply ]  (authenticated links)
//                frame, frame, ...     (both directions)
//   frame:       u32 frame_bytes | u16 kind | body [| 32-byte MAC on authenticated links]
//
// Everything is little-endian and encoded field by field. Decoders trust nothing:
// every count and length is checked against protocol_limits and against the bytes
// left before anything is allocated, a decoder never reads outside its span, and
// what it allocates is bounded by twice the frame it was given (f16/bf16 activations
// widen to f32). Any malformed input is a status (invalid_data, or unsupported for a
// version we do not speak) naming the field and its byte offset; no input can trigger
// an assertion.
//
// Encoders are for our own, already-valid messages: each one REQUIRES that the
// matching validate_* call accepts the message (with the receiver's limits). A
// message that decodes successfully re-encodes to exactly the same bytes.
#pragma once

#include "base/status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::protocol {

// ---------------------------------------------------------------------------------
// Versions, limits, sizes

// Version of the whole wire format (handshake and frames). A change to any byte of
// the format bumps it and updates docs/protocol.md and the golden tests together.
// Version 2: TryRestorePrefillDecode carries the current token's activation row.
// Version 3: Step frames on batch links (several lanes' rows in one frame).
// Version 4: the generation config carries a grammar (GBNF text) after the cache key.
// Version 5: the generation config asks for n_logprobs; PredictedToken carries them.
// Version 6: challenge-response authentication in the handshake (no token on the
// wire) and a MAC after every frame of an authenticated link.
inline constexpr uint16_t protocol_version = 7;
// Version of the state header inside a request.
inline constexpr uint16_t state_header_version = 1;

// Bounds every decoder enforces before it allocates. The defaults are what stages use;
// tests and the fuzzer shrink them to reach the limit checks with small inputs.
struct protocol_limits {
    // Largest frame, in bytes, counting the 4-byte length field itself. Default 256 MiB:
    // a 4096-token f32 activation of width 8192 (128 MiB) fits twice over.
    uint32_t max_frame_bytes = 256u << 20;
    // Most token ids (and explicit positions) in one request. Default 65536.
    uint32_t max_tokens_per_message = 65536;
    // Widest activation row, in values (n_embd). Default 65536.
    uint32_t max_embd = 65536;
    // Most logit-bias entries in a generation config. Default 1024.
    uint32_t max_logit_bias = 1024;
    // Longest prompt cache key, in bytes. Default 256.
    uint32_t max_cache_key_bytes = 256;
    // Longest grammar in a generation config, in bytes. Default 1 MiB (the sampler's
    // own bound, sampling_bounds::max_grammar_bytes).
    uint32_t max_grammar_bytes = 1u << 20;
    // Longest error message (Error reply) or refusal reason (hello_reply), in bytes of
    // UTF-8. Default 4096.
    uint32_t max_error_message_bytes = 4096;
    // Most tokens in one PredictedTokens reply. Default 4096.
    uint32_t max_predicted_tokens = 4096;
    // Most lane entries in one Step frame. Default 1024 (the most lanes a stage serves).
    uint32_t max_step_entries = 1024;
};

// Most top log-probabilities a generation config asks for and a PredictedToken carries
// (the sampler's own bound, sampling_bounds::max_logprobs). Fixed: not a limit to tune.
inline constexpr uint32_t max_logprobs = 20;

// Frame header: u32 frame_bytes, u16 kind.
inline constexpr size_t frame_header_bytes = 6;
// Size of the stats block carried by every request and reply.
inline constexpr size_t stats_block_bytes = 84;
// Bytes of a request before its token ids (header, ids, state header, stats).
inline constexpr size_t request_fixed_bytes = 140;
// Bytes of a reply before its kind-specific part (header, flags, request id, stats).
inline constexpr size_t reply_fixed_bytes = 100;
// No valid frame of any kind is shorter than this (a PredictedTokens reply's count).
inline constexpr size_t min_frame_bytes = reply_fixed_bytes + 4;

// ---------------------------------------------------------------------------------
// Handshake

inline constexpr std::array<uint8_t, 4> hello_magic = {'S', 'K', 'P', 'Y'};
// magic + u16 version: the part of a hello (and a hello_reply) that every protocol
// version keeps, so a listener can always tell a peer that it speaks another version.
inline constexpr size_t hello_prefix_bytes = 6;
// A whole hello (it has no variable part): magic, version, link kind, lane, sender
// stage, auth mode, reserved, nonce.
inline constexpr size_t hello_bytes = 52;
// Random bytes each side contributes to an authenticated handshake.
inline constexpr size_t auth_nonce_bytes = 32;
// An HMAC-SHA256 value: the proofs of the handshake and the MAC after each frame.
inline constexpr size_t auth_mac_bytes = 32;
// auth_challenge: the listener's nonce and its proof.
inline constexpr size_t auth_challenge_bytes = auth_nonce_bytes + auth_mac_bytes;
// auth_proof: the dialer's proof.
inline constexpr size_t auth_proof_bytes = auth_mac_bytes;
// A hello_reply up to its reason: magic, version, status, reason length. This layout
// is frozen across versions so that a refusal is always readable.
inline constexpr size_t hello_reply_fixed_bytes = 10;

enum class link_kind : uint16_t {
    forward = 1,        // stage k-1 dials stage k: requests downstream, replies upstream
    direct_return = 2,  // the final stage dials stage 0 to return predicted tokens
    batch = 3,          // stage k-1 dials stage k, one per hop (lane 0): Step frames down, their acks up
};

// How a connection is authenticated (both sides must configure the same).
enum class link_auth : uint16_t {
    none = 0,         // no key: loopback-only chains
    hmac_sha256 = 1,  // challenge-response on a shared key, then a MAC after every frame
};

using auth_nonce = std::array<uint8_t, auth_nonce_bytes>;
using auth_mac = std::array<uint8_t, auth_mac_bytes>;

// First message on every connection, sent by the dialer.
struct hello {
    uint16_t   version = protocol_version;
    link_kind  link = link_kind::forward;
    uint32_t   lane = 0;
    uint32_t   sender_stage = 0;
    link_auth  auth = link_auth::none;
    auth_nonce nonce{};  // the dialer's random bytes; all zero when auth is none

    bool operator==(const hello &) const = default;
};

// The listener's half of an authenticated handshake, sent right after an ok
// hello_reply: its own nonce and its proof of the key over both nonces.
struct auth_challenge {
    auth_nonce nonce{};
    auth_mac   proof{};

    bool operator==(const auth_challenge &) const = default;
};

enum class hello_status : uint16_t {
    ok = 0,
    version_mismatch = 1,
    unauthorized = 2,
    bad_request = 3,
    busy = 4,
};

// The listener's answer to a hello. Anything but ok is followed by a close.
struct hello_reply {
    uint16_t     version = protocol_version;  // the listener's own version
    hello_status status = hello_status::ok;
    std::string  reason;  // UTF-8, for humans; empty when ok

    bool operator==(const hello_reply &) const = default;
};

// REQUIRES: validate_hello(h) is ok.
std::vector<uint8_t> encode_hello(const hello & h);
status validate_hello(const hello & h);

// Reads the magic and version from the first hello_prefix_bytes of a hello. A listener
// reads these first and, on a version other than protocol_version, answers
// refuse_version() without reading further (a future hello may be laid out otherwise).
// REQUIRES: prefix.size() >= hello_prefix_bytes.
result<uint16_t> peek_hello_version(std::span<const uint8_t> prefix);

// Decodes a whole hello (exactly hello_bytes). A version other than protocol_version
// is `unsupported`, with the same reason refuse_version() gives; an unknown auth mode,
// a reserved field that is not zero or a nonce that is not zero without auth is
// invalid_data.
result<hello> decode_hello(std::span<const uint8_t> bytes);

// Exactly auth_challenge_bytes (nonce, proof); any bytes decode.
std::vector<uint8_t> encode_auth_challenge(const auth_challenge & c);
result<auth_challenge> decode_auth_challenge(std::span<const uint8_t> bytes);

// REQUIRES: validate_hello_reply(r, receiver limits) is ok.
std::vector<uint8_t> encode_hello_reply(const hello_reply & r);
status validate_hello_reply(const hello_reply & r, const protocol_limits & limits);

// The total size of a hello_reply from its first hello_reply_fixed_bytes.
// REQUIRES: fixed.size() >= hello_reply_fixed_bytes.
result<size_t> peek_hello_reply_length(std::span<const uint8_t> fixed, const protocol_limits & limits);

// Decodes a whole hello_reply. Any version is accepted here (the layout is frozen);
// check_hello_reply() decides whether the dialer may go on.
result<hello_reply> decode_hello_reply(std::span<const uint8_t> bytes, const protocol_limits & limits);

// The listener's decision on a decoded hello: version_mismatch when the versions
// differ, unauthorized when the peer's auth mode is not `mine` (one side has a key,
// the other none), else ok (for an authenticated link: go on with the challenge).
// Proofs, lane ranges and busy lanes are the transport's to check. The reason names
// what was wrong, e.g. "peer speaks protocol version 1, this stage speaks 2".
hello_reply decide_hello(const hello & peer, link_auth mine);

// The refusal for a peer whose hello announced `peer_version` != protocol_version.
hello_reply refuse_version(uint16_t peer_version);

// The dialer's view of a hello_reply: ok only for status ok from a listener of our
// version. Otherwise: version_mismatch -> unsupported, unauthorized -> permission,
// busy -> unavailable, bad_request -> invalid_argument; the message carries the reason.
status check_hello_reply(const hello_reply & r);

// ---------------------------------------------------------------------------------
// Frames

enum class message_kind : uint16_t {
    // requests (travel downstream; PredictionReturnOpen on the return link)
    prefill = 1,
    prefill_final = 2,  // last prompt chunk: the final stage samples
    decode = 3,
    stop = 4,
    configure_generation = 5,
    probe_prefill = 6,
    restore_prefill = 7,
    try_restore_prefill = 8,
    try_restore_prefill_decode = 9,
    trim_session = 10,
    prediction_return_open = 11,
    // a step of several lanes (travels downstream on a batch link; decode_step reads it)
    step = 12,
    // a liveness ping on an idle forward or batch link (v7): the next stage answers it
    // at once with an Ack of its request_id and never forwards it
    heartbeat = 13,
    // replies (travel upstream, or to stage 0 on the return link)
    ack = 64,
    predicted_token = 65,
    predicted_tokens = 66,
    error = 67,
};

// Request kinds are 1..11 and 13 (Heartbeat) (decode_request); Step (12) has its own
// layout (decode_step).
bool is_request_kind(message_kind kind);
bool is_step_kind(message_kind kind);
bool is_reply_kind(message_kind kind);
// "prefill_final"; "unknown" for a value outside the enum.
std::string_view message_kind_name(message_kind kind);

// Validates a frame's length field: >= min_frame_bytes and <= limits.max_frame_bytes.
// The transport reads exactly that many bytes (including these 4) as one frame.
// REQUIRES: first4.size() >= 4.
result<uint32_t> peek_frame_length(std::span<const uint8_t> first4, const protocol_limits & limits);

// The kind of a frame (request, step or reply) from its first frame_header_bytes; an
// unknown kind is invalid_data. REQUIRES: header.size() >= frame_header_bytes.
result<message_kind> peek_frame_kind(std::span<const uint8_t> header);

// The largest frame a kind can have: max_frame_bytes for the kinds that carry
// activation rows (Prefill, PrefillFinal, Decode, TryRestorePrefillDecode, Step), a
// bound of a few MiB derived from the limits (token ids, generation config, predicted
// tokens, messages) for every other kind. The transport refuses a longer length field
// before it reads the body.
uint32_t max_frame_bytes_of_kind(message_kind kind, const protocol_limits & limits);

// ---------------------------------------------------------------------------------
// Stats block: what a request met on its way, merged hop by hop (DESIGN §5)

// Every stat, in wire order. stat_descriptors (below) is its parallel table of names
// and merge rules; telemetry reuses the names.
enum class stat_id : uint8_t {
    kv_lookup_hits,
    kv_lookup_misses,
    kv_lookup_errors,
    kv_imported_pages,
    kv_imported_tokens,
    kv_recorded_pages,
    kv_recorded_bytes,
    kv_hit_stage_mask,     // bit i: stage i hit
    kv_record_stage_mask,  // bit i: stage i recorded
    max_compute_us,
    max_queue_us,
    max_forward_us,
};
inline constexpr size_t n_stat_ids = 12;

enum class stat_merge : uint8_t {
    sum,     // counters: a + b, saturating at the maximum
    bit_or,  // stage masks
    max,     // timing maxima
};

struct stat_descriptor {
    stat_id          id;
    std::string_view name;
    stat_merge       merge;
    uint8_t          wire_bytes;  // 8 (u64) or 4 (u32)
};

inline constexpr stat_descriptor stat_descriptors[] = {
    {stat_id::kv_lookup_hits,       "kv_lookup_hits",       stat_merge::sum,    8},
    {stat_id::kv_lookup_misses,     "kv_lookup_misses",     stat_merge::sum,    8},
    {stat_id::kv_lookup_errors,     "kv_lookup_errors",     stat_merge::sum,    8},
    {stat_id::kv_imported_pages,    "kv_imported_pages",    stat_merge::sum,    8},
    {stat_id::kv_imported_tokens,   "kv_imported_tokens",   stat_merge::sum,    8},
    {stat_id::kv_recorded_pages,    "kv_recorded_pages",    stat_merge::sum,    8},
    {stat_id::kv_recorded_bytes,    "kv_recorded_bytes",    stat_merge::sum,    8},
    {stat_id::kv_hit_stage_mask,    "kv_hit_stage_mask",    stat_merge::bit_or, 8},
    {stat_id::kv_record_stage_mask, "kv_record_stage_mask", stat_merge::bit_or, 8},
    {stat_id::max_compute_us,       "max_compute_us",       stat_merge::max,    4},
    {stat_id::max_queue_us,         "max_queue_us",         stat_merge::max,    4},
    {stat_id::max_forward_us,       "max_forward_us",       stat_merge::max,    4},
};
static_assert(std::size(stat_descriptors) == n_stat_ids, "one descriptor per stat_id");

namespace detail {
constexpr bool stat_table_is_consistent() {
    size_t wire = 0;
    for (size_t i = 0; i < std::size(stat_descriptors); ++i) {
        if (static_cast<size_t>(stat_descriptors[i].id) != i) return false;
        if (stat_descriptors[i].wire_bytes != 4 && stat_descriptors[i].wire_bytes != 8) return false;
        wire += stat_descriptors[i].wire_bytes;
    }
    return wire == stats_block_bytes;
}
}  // namespace detail
static_assert(detail::stat_table_is_consistent(), "stat_descriptors: in enum order, widths sum to stats_block_bytes");

struct stats_block {
    uint64_t kv_lookup_hits = 0;
    uint64_t kv_lookup_misses = 0;
    uint64_t kv_lookup_errors = 0;
    uint64_t kv_imported_pages = 0;
    uint64_t kv_imported_tokens = 0;
    uint64_t kv_recorded_pages = 0;
    uint64_t kv_recorded_bytes = 0;
    uint64_t kv_hit_stage_mask = 0;
    uint64_t kv_record_stage_mask = 0;
    uint32_t max_compute_us = 0;
    uint32_t max_queue_us = 0;
    uint32_t max_forward_us = 0;

    bool operator==(const stats_block &) const = default;
};

uint64_t stat_value(const stats_block & s, stat_id id);
// Sets one stat; a 4-byte stat stores min(value, UINT32_MAX).
void set_stat(stats_block & s, stat_id id, uint64_t value);

// a and b merged by each stat's rule: counters add (saturating), masks OR, maxima max.
stats_block merge_stats(const stats_block & a, const stats_block & b);

// ---------------------------------------------------------------------------------
// Requests

// What a request does to the session. `none` is a session's idle state; no request
// carries it (see the per-kind rules).
enum class message_phase : uint8_t { none = 0, prefill = 1, decode = 2, control = 3 };

// The session state a request carries (DESIGN §5), checked by every stage.
struct state_header {
    uint16_t      version = state_header_version;
    message_phase phase = message_phase::none;  // must match the kind (docs/protocol.md)
    uint8_t       flags = 0;                    // no bits defined in version 1: must be 0
    uint32_t      prompt_token_count = 0;
    uint32_t      decode_step = 0;
    int32_t       current_token = -1;           // -1: none
    uint32_t      source_stage = 0;             // stage that sent the message

    bool operator==(const state_header &) const = default;
};

enum class prompt_cache_mode : uint8_t { off = 0, record = 1, lookup_record = 2 };

// Mirrors skippy::sampling_config (src/runtime/sampler.h) field for field, so the
// transport converts one to the other by name; the protocol stays a leaf.
struct sampling_params {
    float    temperature = 0.8f;
    int32_t  top_k = 40;
    float    top_p = 0.95f;
    float    min_p = 0.05f;
    uint64_t seed = 0;
    float    repeat_penalty = 1.0f;
    float    presence_penalty = 0.0f;
    float    frequency_penalty = 0.0f;
    int32_t  penalty_last_n = 64;
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token id >= 0, finite bias)
    std::string grammar;  // GBNF text, opaque bytes here (the final stage compiles it); empty: none
    uint32_t n_logprobs = 0;  // <= max_logprobs; 0: no logprobs

    bool operator==(const sampling_params &) const = default;
};

// Sent with ConfigureGeneration. Every float must be finite (value ranges are the
// sampler's to check).
struct generation_config {
    sampling_params   sampling;
    prompt_cache_mode cache_mode = prompt_cache_mode::off;
    uint32_t          cache_min_tokens = 0;
    std::string       cache_key;  // the client's prompt_cache_key: opaque bytes

    bool operator==(const generation_config &) const = default;
};

enum class activation_dtype : uint8_t { f32 = 0, f16 = 1, bf16 = 2 };

// Hidden states one stage hands the next: [n_embd, n_rows], token-major
// (values[t * n_embd + e]), where n_rows is activation_rows() of the request.
struct activation_frame {
    // Encode: the preferred wire type, used only when every value converts to it and
    // back exactly (else f32 goes on the wire). Decode: the type that was on the wire.
    activation_dtype   dtype = activation_dtype::f32;
    uint32_t           producer_stage = 0;
    uint32_t           layer_start = 0;  // [layer_start, layer_end): layers already applied
    uint32_t           layer_end = 0;
    uint32_t           n_embd = 0;       // >= 1
    std::vector<float> values;           // finite; activation_rows * n_embd of them

    bool operator==(const activation_frame &) const = default;
};

// The wire type an activation with these values gets: `preferred` when each value
// survives f32 -> preferred -> f32 bit for bit, else f32.
activation_dtype choose_activation_dtype(std::span<const float> values, activation_dtype preferred);

// One request frame. The flag bits on the wire follow from what is present:
// generation (bit 0), positions non-empty (bit 1), activation (bit 2).
//
// TryRestorePrefillDecode is the one kind whose tokens are not what its activation
// describes: `tokens` is the prefix to restore from the prefix cache (all or nothing),
// and the request then decodes state.current_token at pos_start + token count, so its
// activation is that single token's row (see activation_rows).
struct request {
    message_kind         kind = message_kind::prefill;
    uint64_t             request_id = 0;
    uint64_t             session_id = 0;
    // >= 0; pos_start + token count (+ 1 for TryRestorePrefillDecode's decoded token)
    // <= 2^31 - 1, so every position fits an i32.
    int64_t              pos_start = 0;
    state_header         state;
    stats_block          stats;          // accumulated as the request travels downstream
    std::vector<int32_t> tokens;         // token ids, each >= 0
    std::vector<int32_t> positions;      // empty: token i sits at pos_start + i; else one per token, each >= 0
    std::optional<generation_config> generation;
    std::optional<activation_frame>  activation;

    bool operator==(const request &) const = default;
};

// Rows (n_tokens) of the activation a request of `kind` with `token_count` tokens
// carries: 1 for TryRestorePrefillDecode (the current token's hidden state), else one
// per token. The validator, the encoder and the decoder all size activations by it.
uint32_t activation_rows(message_kind kind, uint32_t token_count);

// The per-kind rules and every field's range (docs/protocol.md), plus the encoded size
// against limits.max_frame_bytes. Names the offending field.
status validate_request(const request & r, const protocol_limits & limits);

// Exact size encode_request(r) produces. REQUIRES: validate_request(r, ...) is ok.
size_t encoded_request_bytes(const request & r);

// REQUIRES: validate_request(r, receiver limits) is ok. (Given a request that breaks
// only range or per-kind rules, it still writes the frame such a request describes,
// which decode_request then refuses; the tests build bad frames that way. It asserts
// that positions are empty or one per token.)
std::vector<uint8_t> encode_request(const request & r);

// `frame` is one whole frame, length field included; the length field must equal
// frame.size(). Refuses reply kinds. The result equals the request that was encoded,
// except that activation->dtype is the type that went on the wire.
result<request> decode_request(std::span<const uint8_t> frame, const protocol_limits & limits);

// ---------------------------------------------------------------------------------
// Steps (version 3): one frame carrying the rows of several lanes, so that every stage
// runs them as one batch (docs/protocol.md, "Steps")

// Bytes of a Step before its first entry: header, flags, step_id, source_stage, n_entries.
inline constexpr size_t step_fixed_bytes = 24;
// Bytes of an entry before its tokens: a request's fixed part without frame_bytes.
inline constexpr size_t step_entry_fixed_bytes = request_fixed_bytes - 4;

// One lane's part of a step: what a Prefill, PrefillFinal or Decode request of that
// lane would carry, without its activation (the step's activation holds its rows).
struct step_entry {
    message_kind kind = message_kind::decode;  // prefill, prefill_final or decode
    uint64_t     request_id = 0;
    uint64_t     session_id = 0;  // the lane
    int64_t      pos_start = 0;
    state_header state;
    stats_block  stats;
    std::vector<int32_t> tokens;  // each >= 0

    bool operator==(const step_entry &) const = default;
};

struct step_frame {
    uint64_t                step_id = 0;       // acked with request_id = step_id
    uint32_t                source_stage = 0;  // the stage that sent the frame
    std::vector<step_entry> entries;           // 1..max_step_entries, distinct session_ids
    // One row per token of every entry, entry after entry (n_tokens = the sum of the
    // entries' token counts, at most max_tokens_per_message).
    activation_frame        activation;

    bool operator==(const step_frame &) const = default;
};

// Every entry follows the per-kind rules of its kind (as a request with an
// activation); entries name distinct lanes; the activation holds their rows; the
// encoded size fits limits.max_frame_bytes.
status validate_step(const step_frame & s, const protocol_limits & limits);
size_t encoded_step_bytes(const step_frame & s);
// REQUIRES: validate_step(s, receiver limits) is ok.
std::vector<uint8_t> encode_step(const step_frame & s);
// `frame` as for decode_request; refuses every kind but Step. Counts (entries, tokens,
// rows) are checked against the limits and the bytes left before anything is
// allocated; a lane named twice is invalid_data.
result<step_frame> decode_step(std::span<const uint8_t> frame, const protocol_limits & limits);

// ---------------------------------------------------------------------------------
// Replies

enum class ack_outcome : uint8_t { ok = 0, hit = 1, short_hit = 2, miss = 3, error = 4 };

struct logprob_entry {
    int32_t token = 0;      // >= 0
    float   logprob = 0.0f; // finite, <= 0

    bool operator==(const logprob_entry &) const = default;
};

// One reply frame. Only the fields of `kind` go on the wire; the others are ignored by
// encode_reply and left at their defaults by decode_reply.
struct reply {
    message_kind kind = message_kind::ack;
    uint64_t     request_id = 0;
    stats_block  stats;
    // ack
    ack_outcome  outcome = ack_outcome::ok;
    int64_t      restored_tokens = 0;  // >= 0
    // predicted_token
    int32_t      token = 0;            // >= 0
    uint32_t     decode_step = 0;
    // Its logprobs when the generation asked for them: top_logprobs holds 1 to
    // max_logprobs entries (the final stage's order; tokens >= 0) and logprob is the
    // token's own (finite, <= 0). None asked for: top_logprobs empty and logprob 0.
    float        logprob = 0.0f;
    std::vector<logprob_entry> top_logprobs;
    // predicted_tokens
    std::vector<int32_t> tokens;       // 1 to max_predicted_tokens ids, each >= 0
    // error
    error_code   code = error_code::internal;  // not ok
    std::string  message;                      // UTF-8, <= max_error_message_bytes

    bool operator==(const reply &) const = default;
};

status validate_reply(const reply & r, const protocol_limits & limits);

// REQUIRES: validate_reply(r, receiver limits) is ok.
std::vector<uint8_t> encode_reply(const reply & r);

// `frame` as for decode_request. Refuses request kinds.
result<reply> decode_reply(std::span<const uint8_t> frame, const protocol_limits & limits);

// An Error reply for `st` (REQUIRES: !st.is_ok()) that validates against `limits`
// (whose max_frame_bytes must leave room for max_error_message_bytes, as the defaults
// do): the message is cut to max_error_message_bytes at a character boundary and
// ill-formed UTF-8 is replaced by U+FFFD.
reply make_error_reply(uint64_t request_id, const status & st, const protocol_limits & limits);

// The status an Error reply stands for (its code and message).
// REQUIRES: r.kind == message_kind::error.
status error_reply_status(const reply & r);

}  // namespace skippy::protocol
