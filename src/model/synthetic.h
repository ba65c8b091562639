// Random-weight models in standard GGUF form (`skippy make-model`), so that a fresh
// machine has a model to run and tests and benchmarks can build any shape.
#pragma once

#include "base/status.h"
#include "base/tensor_type.h"
#include "gguf/gguf.h"

#include <cstdint>
#include <optional>
#include <string>

namespace skippy {

struct synthetic_model_options {
    // llama | llama3 (llama with Llama 3.1 RoPE factors, rope_freqs.weight) | qwen2 |
    // qwen3 | gemma3 | phi3 | qwen3moe | gpt-oss | qwen35 (docs/model.md lists what each writes).
    std::string arch = "llama";
    int32_t     n_embd = 128;
    int32_t     n_layer = 4;
    int32_t     n_head = 4;
    int32_t     n_head_kv = 2;
    int32_t     n_ff = 384;       // mixtures of experts: the width of one expert
    int32_t     n_expert = 8;     // qwen3moe: experts per layer
    int32_t     n_expert_used = 2;  // qwen3moe: experts per token
    int32_t     head_dim = 0;     // attention head size; 0: n_embd / n_head (qwen3: twice that, as Qwen3-0.6B)
    int32_t     sliding_window = 0;  // gemma3's window in positions; 0: 16
    int32_t     n_vocab = 512;    // generated SPM vocabulary size (ignored with vocab_from)
    int32_t     n_ctx = 4096;     // context length written to the metadata
    // Weight type of the 2-D tensors; "Q4_K_M" mixes Q4_K with Q6_K as llama.cpp does.
    std::string type = "F32";
    uint64_t    seed = 1;
    std::string name = "skippy-synthetic";
    // Copy the tokenizer.* metadata of this GGUF file (its token count sets n_vocab).
    const gguf::file * vocab_from = nullptr;
};

// Known presets: "tiny" (README demo) and "bench-200m" (benchmarks).
std::optional<synthetic_model_options> synthetic_preset(const std::string & name);

// The architectures build_synthetic_model accepts, for help and error texts.
const char * synthetic_arch_names();

// Validates the options and builds the model. Shapes must suit the type's block size
// (e.g. n_embd and n_ff multiples of 256 for K-quants).
result<gguf::writer> build_synthetic_model(const synthetic_model_options & options);

}  // namespace skippy
