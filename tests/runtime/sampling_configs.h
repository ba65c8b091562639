// Sampling configs the runtime tests share.
#pragma once

#include "runtime/sampler.h"

#include <cstdint>

namespace skippy::testing {

// Only temperature and seed set: no top-k, top-p or min-p cut, so every token can be drawn.
inline sampling_config plain_sampling(float temperature, uint64_t seed) {
    sampling_config c;
    c.temperature = temperature;
    c.top_k = 0;
    c.top_p = 1.0f;
    c.min_p = 0.0f;
    c.seed = seed;
    return c;
}

}  // namespace skippy::testing
