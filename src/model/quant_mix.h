// Which weight type make-model writes for each tensor of a file ("Q4_K_M", "Q8_0", ...).
//
// A file type is either one plain type for every matrix ("F16", "BF16", and the pure
// "Q4_K") or a quantization mix chosen tensor by tensor as llama-quantize does for its
// file type of that name (llama.cpp's llama-quant.cpp): the output head in Q6_K (Q8_0
// stays Q8_0), more bits for attn_v, attn_output and ffn_down in some layers and file
// types, and a fallback to a 32-value block type for rows that 256-value super-blocks
// do not divide. Knowledge of tensor names lives here so that the synthetic model
// builder only asks, tensor by tensor, which type to use.
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
    bool        is_mix = false;     // llama-quantize's per-tensor rules apply (else one type, up to the fallback)
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
    int32_t          n_gqa = 1;   // n_head / n_head_kv (Q2_K and IQ4 give attn_v more bits from 4)
    bool             tied_output = false;  // token_embd.weight is also the output head (no output.weight)
    int32_t          n_expert = 0;  // experts per layer of a mixture of experts (0: dense); 8 gets Q8_0 attn_k/v
};

// The type of that tensor in the mix. PROMISES: n_cols is a multiple of the returned
// type's block size: as llama-quantize, a type whose block does not divide the row
// falls back to IQ4_XS -> IQ4_NL, Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, and to F16 when even 32 does not divide it.
tensor_type type_for_weight(const quant_mix & mix, const weight_slot & slot);

// The comma-separated list of accepted names, for error and help texts.
std::string quant_mix_names();

}  // namespace skippy
