// Conversions between runtime types and their wire mirrors (the protocol stays a leaf).
#pragma once

#include "protocol/protocol.h"
#include "runtime/sampler.h"

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
    return p;
}

}  // namespace skippy::transport
