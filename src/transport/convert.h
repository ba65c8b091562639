// Conversions between runtime types and their wire mirrors (the protocol stays a leaf).
#pragma once

#include "protocol/protocol.h"
#include "runtime/sampler.h"

#include <algorithm>

namespace skippy::transport {

inline sampling_config to_sampling_config(const protocol::sampling_params & p) {
    sampling_config c;
    c.temperature = p.temperature;
    c.top_k = p.top_k;
    c.top_p = p.top_p;
    c.min_p = p.min_p;
    c.seed = p.seed;
    c.repeat_penalty = p.repeat_penalty;
    c.presence_penalty = p.presence_penalty;
    c.frequency_penalty = p.frequency_penalty;
    c.penalty_last_n = p.penalty_last_n;
    c.logit_bias.assign(p.logit_bias.begin(), p.logit_bias.end());
    c.grammar = p.grammar;
    c.n_logprobs = static_cast<int32_t>(std::min<uint32_t>(p.n_logprobs, protocol::max_logprobs));
    return c;
}

inline protocol::sampling_params to_sampling_params(const sampling_config & c) {
    protocol::sampling_params p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = c.seed;
    p.repeat_penalty = c.repeat_penalty;
    p.presence_penalty = c.presence_penalty;
    p.frequency_penalty = c.frequency_penalty;
    p.penalty_last_n = c.penalty_last_n;
    p.logit_bias.assign(c.logit_bias.begin(), c.logit_bias.end());
    p.grammar = c.grammar;
    p.n_logprobs = static_cast<uint32_t>(std::clamp<int32_t>(c.n_logprobs, 0, static_cast<int32_t>(protocol::max_logprobs)));
    return p;
}

// A predicted token's logprobs into its PredictedToken reply, and back.
inline void put_logprobs(protocol::reply & r, const token_logprobs & lp) {
    r.top_logprobs.clear();
    r.logprob = 0.0f;
    if (lp.empty()) return;
    r.logprob = lp.sampled;
    for (const token_logprob & e : lp.top) r.top_logprobs.push_back({e.id, e.logprob});
}

inline token_logprobs get_logprobs(const protocol::reply & r) {
    token_logprobs lp;
    if (r.top_logprobs.empty()) return lp;
    lp.sampled = r.logprob;
    for (const protocol::logprob_entry & e : r.top_logprobs) lp.top.push_back({e.token, e.logprob});
    return lp;
}

}  // namespace skippy::transport

#include "cache/decisions.h"

namespace skippy::transport {

// Adds a stage's cache counters to a stats block (counters add, masks OR).
inline void add_cache_counters(protocol::stats_block & s, const cache::cache_counters & c) {
    protocol::stats_block local;
    local.kv_lookup_hits = c.kv_lookup_hits;
    local.kv_lookup_misses = c.kv_lookup_misses;
    local.kv_lookup_errors = c.kv_lookup_errors;
    local.kv_imported_pages = c.kv_imported_pages;
    local.kv_imported_tokens = c.kv_imported_tokens;
    local.kv_recorded_pages = c.kv_recorded_pages;
    local.kv_recorded_bytes = c.kv_recorded_bytes;
    local.kv_hit_stage_mask = c.kv_hit_stage_mask;
    local.kv_record_stage_mask = c.kv_record_stage_mask;
    s = protocol::merge_stats(s, local);
}

inline cache::cache_mode to_cache_mode(protocol::prompt_cache_mode m) {
    switch (m) {
        case protocol::prompt_cache_mode::off: return cache::cache_mode::off;
        case protocol::prompt_cache_mode::record: return cache::cache_mode::record;
        case protocol::prompt_cache_mode::lookup_record: return cache::cache_mode::lookup_record;
    }
    return cache::cache_mode::off;
}

inline protocol::prompt_cache_mode to_prompt_cache_mode(cache::cache_mode m) {
    switch (m) {
        case cache::cache_mode::off: return protocol::prompt_cache_mode::off;
        case cache::cache_mode::record: return protocol::prompt_cache_mode::record;
        case cache::cache_mode::lookup_record: return protocol::prompt_cache_mode::lookup_record;
    }
    return protocol::prompt_cache_mode::off;
}

inline protocol::ack_outcome to_ack_outcome(cache::lookup_outcome o) {
    switch (o) {
        case cache::lookup_outcome::hit: return protocol::ack_outcome::hit;
        case cache::lookup_outcome::short_: return protocol::ack_outcome::short_hit;
        case cache::lookup_outcome::miss: return protocol::ack_outcome::miss;
        case cache::lookup_outcome::error: return protocol::ack_outcome::error;
    }
    return protocol::ack_outcome::miss;
}

}  // namespace skippy::transport
