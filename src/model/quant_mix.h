// Which weight type make-model writes for each tensor of a file ("Q4_K_M", "Q8_0", ...).
//
// A file type is either one plain type for every matrix ("Q8_0", "F16") or a mix in
// the manner of llama-quantize ("Q4_K_M": Q4_K with Q6_K for the output head, and for
// attn_v and ffn_down in some layers). Knowledge of tensor names lives here so that the
// synthetic model builder only asks, tensor by tensor, which type to use.
#pragma once

#include "base/status.h"
#include "base/tensor_type.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace skippy {

struct quant_mix {
    std::string name;               // as given, upper-cased ("Q4_K_M")
    tensor_type base_type = tensor_type::f32;
    uint32_t    file_type = 0;      // llama_ftype number written to general.file_type
    bool        is_mix = false;     // per-tensor choices differ from base_type
};

// Parses a file type name (case-insensitive). Unknown names and types without kernels
// are an invalid_argument error listing the accepted names.
result<quant_mix> parse_quant_mix(std::string_view name);

// What a 2-D weight is described by when choosing its type.
struct weight_slot {
    std::string_view name;      // GGUF tensor name ("blk.3.attn_v.weight", "output.weight")
    int32_t          il = -1;   // layer index, -1 for tensors outside the blocks
    int32_t          n_layer = 0;
    int64_t          n_cols = 0;  // row length (ne[0])
};

// The type of that tensor in the mix. PROMISES: n_cols is a multiple of the returned
// type's block size (falling back to a type with smaller blocks when needed, as
// llama-quantize does for rows not divisible by 256).
tensor_type type_for_weight(const quant_mix & mix, const weight_slot & slot);

// The comma-separated list of accepted names, for error and help texts.
std::string quant_mix_names();

}  // namespace skippy
