// How `skippy split-plan` cuts a model's layers into stages (docs/transport.md).
//
// By weight bytes (split_balance::weight_bytes): layers of equal weight
// bytes are split evenly by count (the first stages take the remainder). When layers
// differ (mixtures of experts with dense layers, quantization mixes giving some layers
// more bits), stages are balanced by bytes of weights instead: the contiguous split
// whose heaviest stage (its layers' tensors, the last stage also its output norm and
// head) is lightest. Bytes are what a stage must hold, and what a decode step reads.
//
// By compute (split_balance::compute, split-plan's default): the contiguous split whose
// heaviest stage has the fewest multiply-adds per token: a tensor's elements (an expert
// tensor's times n_expert_used / n_expert; the token embedding none, it is a lookup,
// unless it is also the head). A pipeline pays with several lanes per step, and on a
// CPU such steps are bound by compute rather than by reading weights: there a head of
// more bits per weight costs less per byte than the layers, and a head of a large
// vocabulary (ignored by an even split by count) costs many layers (docs/transport.md
// has what it measured).
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <vector>

namespace skippy {

enum class split_balance { weight_bytes, compute };

struct layer_split {
    std::vector<layer_range> stages;       // tile [0, n_layer) in order, none empty
    std::vector<int64_t>     stage_bytes;  // weight bytes each stage binds (head on the last)
    std::vector<int64_t>     stage_multiply_adds;  // per token (expert tensors at their share)
    bool                     by_bytes = false;  // weight_bytes with uneven layers
    bool                     by_compute = false;  // split_balance::compute
};

// REQUIRES: nothing. Errors: n_stages outside [1, n_layer] (invalid_argument).
result<layer_split> plan_layer_split(const gguf::file & f, int32_t n_layer, int32_t n_stages, split_balance balance);

}  // namespace skippy
