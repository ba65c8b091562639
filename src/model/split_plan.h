// How `skippy split-plan` cuts a model's layers into stages (docs/transport.md).
//
// Layers of equal weight bytes are split evenly by count (the first stages take the
// remainder). When layers differ (mixtures of experts with dense layers, quantization
// mixes giving some layers more bits), stages are balanced by bytes of weights
// instead: the contiguous split whose heaviest stage (its layers' tensors, the last
// stage also its output norm and head) is lightest.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <vector>

namespace skippy {

struct layer_split {
    std::vector<layer_range> stages;       // tile [0, n_layer) in order, none empty
    std::vector<int64_t>     stage_bytes;  // weight bytes each stage binds (head on the last)
    bool                     by_bytes = false;  // false: layers are even, split by count
};

// REQUIRES: nothing. Errors: n_stages outside [1, n_layer] (invalid_argument).
result<layer_split> plan_layer_split(const gguf::file & f, int32_t n_layer, int32_t n_stages);

}  // namespace skippy
