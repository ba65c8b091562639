// Fixed, valid messages of every kind: the golden tests pin their bytes, the
// malformed-input tests cut and corrupt them, and the fuzzer's seed generator writes
// them out as its starting corpus.
#pragma once

#include "protocol/protocol.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::protocol::testing {

inline stats_block sample_stats() {
    stats_block s;
    s.kv_lookup_hits = 1;
    s.kv_lookup_misses = 2;
    s.kv_lookup_errors = 3;
    s.kv_imported_pages = 4;
    s.kv_imported_tokens = 0x100;
    s.kv_recorded_pages = 5;
    s.kv_recorded_bytes = 0x10000;
    s.kv_hit_stage_mask = 0b101;
    s.kv_record_stage_mask = 0x8000000000000000ull;
    s.max_compute_us = 0x1234;
    s.max_queue_us = 7;
    s.max_forward_us = 0xfffffffe;
    return s;
}

inline request base_request(message_kind kind, message_phase phase) {
    request r;
    r.kind = kind;
    r.request_id = 0x0102030405060708ull;
    r.session_id = 0x1112131415161718ull;
    r.state.phase = phase;
    return r;
}

// Prefill: 3 tokens, stats, a f16 activation (every value exact in f16).
inline request sample_prefill() {
    request r = base_request(message_kind::prefill, message_phase::prefill);
    r.state.prompt_token_count = 5;
    r.stats = sample_stats();
    r.tokens = {1, 300, 2};
    activation_frame a;
    a.dtype = activation_dtype::f16;
    a.producer_stage = 0;
    a.layer_start = 0;
    a.layer_end = 2;
    a.n_embd = 2;
    a.values = {1.0f, -2.0f, 0.5f, 0.25f, 3.0f, -0.0f};
    r.activation = a;
    return r;
}

// PrefillFinal: 2 tokens at explicit positions, f16 preferred but 0.1 is not exact,
// so the activation goes out as f32.
inline request sample_prefill_final() {
    request r = base_request(message_kind::prefill_final, message_phase::prefill);
    r.pos_start = 3;
    r.state.prompt_token_count = 5;
    r.state.source_stage = 1;
    r.tokens = {7, 8};
    r.positions = {3, 4};
    activation_frame a;
    a.dtype = activation_dtype::f16;
    a.producer_stage = 1;
    a.layer_start = 2;
    a.layer_end = 4;
    a.n_embd = 1;
    a.values = {0.1f, 1.0f};
    r.activation = a;
    return r;
}

// Decode: one token with a bf16 activation.
inline request sample_decode() {
    request r = base_request(message_kind::decode, message_phase::decode);
    r.pos_start = 5;
    r.state.prompt_token_count = 5;
    r.state.decode_step = 1;
    r.state.current_token = 42;
    r.tokens = {42};
    activation_frame a;
    a.dtype = activation_dtype::bf16;
    a.layer_end = 2;
    a.n_embd = 2;
    a.values = {1.0f, -1.5f};
    r.activation = a;
    return r;
}

inline generation_config sample_generation() {
    generation_config g;
    g.sampling.temperature = 0.5f;
    g.sampling.top_k = 40;
    g.sampling.top_p = 0.75f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = 42;
    g.sampling.repeat_penalty = 1.0f;
    g.sampling.presence_penalty = 0.5f;
    g.sampling.frequency_penalty = 0.25f;
    g.sampling.penalty_last_n = 64;
    g.sampling.logit_bias = {{13, -1.0f}};
    g.sampling.grammar = "root ::= \"x\"";
    g.sampling.n_logprobs = 3;
    g.cache_mode = prompt_cache_mode::lookup_record;
    g.cache_min_tokens = 16;
    g.cache_key = "ab";
    return g;
}

inline request sample_configure_generation() {
    request r = base_request(message_kind::configure_generation, message_phase::control);
    r.state.prompt_token_count = 2;
    r.tokens = {1, 2};
    r.generation = sample_generation();
    return r;
}

inline request sample_control(message_kind kind, std::vector<int32_t> tokens) {
    request r = base_request(kind, message_phase::control);
    r.tokens = std::move(tokens);
    return r;
}

// TryRestorePrefillDecode: restore the prefix {1, 2} from position 0, then decode
// current token 3 at position 2 from its one-row f32 activation.
inline request sample_try_restore_prefill_decode() {
    request r = base_request(message_kind::try_restore_prefill_decode, message_phase::decode);
    r.state.current_token = 3;
    r.tokens = {1, 2};
    activation_frame a;
    a.dtype = activation_dtype::f32;
    a.layer_end = 2;
    a.n_embd = 2;
    a.values = {0.5f, -3.0f};
    r.activation = a;
    return r;
}

inline request sample_trim_session() {
    request r = base_request(message_kind::trim_session, message_phase::control);
    r.pos_start = 4;
    return r;
}

// One request of every kind, in kind order.
inline std::vector<request> sample_requests() {
    return {
        sample_prefill(),
        sample_prefill_final(),
        sample_decode(),
        sample_control(message_kind::stop, {}),
        sample_configure_generation(),
        sample_control(message_kind::probe_prefill, {1, 2, 3}),
        sample_control(message_kind::restore_prefill, {1, 2, 3}),
        sample_control(message_kind::try_restore_prefill, {1, 2}),
        sample_try_restore_prefill_decode(),
        sample_trim_session(),
        sample_control(message_kind::prediction_return_open, {}),
        sample_control(message_kind::heartbeat, {}),
    };
}

inline reply base_reply(message_kind kind) {
    reply r;
    r.kind = kind;
    r.request_id = 0x0102030405060708ull;
    return r;
}

// One reply of every kind, in kind order.
inline std::vector<reply> sample_replies() {
    reply ack = base_reply(message_kind::ack);
    ack.stats = sample_stats();
    ack.outcome = ack_outcome::hit;
    ack.restored_tokens = 3;
    reply one = base_reply(message_kind::predicted_token);
    one.token = 9;
    one.decode_step = 2;
    one.logprob = -0.5f;
    one.top_logprobs = {{9, -0.5f}, {4, -1.0f}};
    reply many = base_reply(message_kind::predicted_tokens);
    many.tokens = {5, 6};
    reply err = base_reply(message_kind::error);
    err.code = error_code::not_found;
    err.message = "no such session";
    return {ack, one, many, err};
}

// A Step: lane 3 decodes, lane 1 prefills two tokens; stats on the decode; a bf16
// activation (every value exact in bf16) of width 2.
inline step_frame sample_step() {
    step_frame s;
    s.step_id = 0x0a0b0c0d0e0f1011ull;
    s.source_stage = 1;
    step_entry d;
    d.kind = message_kind::decode;
    d.request_id = 0x21;
    d.session_id = 3;
    d.pos_start = 5;
    d.state.phase = message_phase::decode;
    d.state.prompt_token_count = 5;
    d.state.decode_step = 1;
    d.state.current_token = 42;
    d.state.source_stage = 1;
    d.stats = sample_stats();
    d.tokens = {42};
    step_entry p;
    p.kind = message_kind::prefill;
    p.request_id = 0x22;
    p.session_id = 1;
    p.state.phase = message_phase::prefill;
    p.state.prompt_token_count = 3;
    p.state.source_stage = 1;
    p.tokens = {7, 8};
    s.entries = {d, p};
    s.activation.dtype = activation_dtype::bf16;
    s.activation.producer_stage = 1;
    s.activation.layer_start = 2;
    s.activation.layer_end = 4;
    s.activation.n_embd = 2;
    s.activation.values = {1.0f, -1.5f, 0.5f, 2.0f, -3.0f, 0.25f};
    return s;
}

inline hello sample_hello() {
    hello h;
    h.link = link_kind::forward;
    h.lane = 2;
    h.sender_stage = 1;
    h.auth = link_auth::hmac_sha256;
    for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(i);  // 00 01 .. 1f
    return h;
}

inline auth_challenge sample_auth_challenge() {
    auth_challenge c;
    for (size_t i = 0; i < c.nonce.size(); ++i) c.nonce[i] = static_cast<uint8_t>(0xa0 + i);
    for (size_t i = 0; i < c.proof.size(); ++i) c.proof[i] = static_cast<uint8_t>(0x40 + i);
    return c;
}

inline hello_reply sample_hello_reply() {
    hello_reply r;
    r.status = hello_status::busy;
    r.reason = "busy";
    return r;
}

}  // namespace skippy::protocol::testing
