// Transformer architectures and the forward pass of a layer range.
//
// The forward pass is split so that stages can run pieces of it in different
// processes:  embed(tokens) -> forward_batch([layer_start, layer_end)) -> head(rows).
// A model_slice binds only the tensors of its layer range (plus the embeddings when
// it owns layer 0 and the output norm/head when it owns the last layer).
//
// Each architecture family (llama/qwen2, qwen3, gemma3, phi3) is one graph builder in
// src/model/family_<name>.cpp over the shared pieces of src/model/blocks.h; the table
// in src/model/families.cpp maps `general.architecture` names to them (docs/model.md).
//
// Batch invariance (DESIGN §4): the hidden state of a token after any layer depends
// only on the token, its position and the KV of earlier positions of its own
// sequence, never on which other tokens or sequences share its batch, the chunking,
// or the thread count. Attention reduces over keys in blocks aligned to absolute
// positions (the KV block size), in order, with an online softmax.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace skippy {

using token_id = int32_t;

enum class model_arch { llama, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt_oss };
enum class rope_mode { normal, neox };  // pairs (2i, 2i+1) vs (i, i + n_rot/2)

// What a layer is. Attention layers today; the hybrid families add recurrent layers.
enum class layer_kind : uint8_t {
    attention,          // causal attention over every earlier position
    sliding_attention,  // causal attention over the last n_swa positions (itself included)
};

// How positions rotate queries and keys (docs/model.md, "RoPE"). For pair i:
//   theta = pos * freq_base^(-2i/n_rot) / factor_i        (factor_i: rope_freqs, else 1)
//   angle = freq_scale * theta, mixed towards theta by YaRN's ramp when ext_factor != 0
//   (cos, sin) of the angle, times mscale().
struct rope_params {
    rope_mode mode = rope_mode::normal;
    int32_t   n_rot = 0;            // rotated dimensions per head (even, <= head_dim)
    float     freq_base = 10000.0f;
    float     freq_scale = 1.0f;    // 1 / scaling factor (linear and YaRN)
    float     ext_factor = 0.0f;    // YaRN: 1 with rope.scaling.type yarn, else 0
    float     attn_factor = 1.0f;   // magnitude of cos/sin (YaRN's and rope.scaling.attn_factor)
    float     beta_fast = 32.0f;    // YaRN ramp corners, in rotations over n_ctx_orig
    float     beta_slow = 1.0f;
    int32_t   n_ctx_orig = 0;       // YaRN: the context the model was trained at
};

// How a token's router logits become its experts and their weights (docs/model.md,
// "Mixture of experts").
enum class expert_gating : uint8_t {
    softmax,         // softmax over every expert, the top k of those probabilities (qwen3moe)
    softmax_topk,    // the top k logits, then a softmax over those k (gpt-oss)
};

struct moe_params {
    int32_t       n_expert = 0;         // expert_count; 0: the model has no experts
    int32_t       n_expert_used = 0;    // expert_used_count: experts per token (top k)
    int32_t       n_ff_exp = 0;         // expert_feed_forward_length: hidden width of one expert
    int32_t       n_ff_shexp = 0;       // expert_shared_feed_forward_length (0: n_ff_exp), when shared tensors exist
    expert_gating gating = expert_gating::softmax;
    bool          norm_weights = false; // divide the k weights by their sum (expert_weights_norm)
    float         weights_scale = 0;    // expert_weights_scale: != 0 and != 1 multiplies the weights
};

struct model_hparams {
    model_arch  arch = model_arch::llama;
    std::string arch_name;
    int32_t     n_vocab = 0;
    int32_t     n_ctx_train = 0;
    int32_t     n_embd = 0;
    int32_t     n_layer = 0;
    int32_t     n_head = 0;
    int32_t     n_head_kv = 0;
    int32_t     n_ff = 0;
    int32_t     head_dim = 0;       // per attention head (K, Q and V): attention.key_length
    float       rms_eps = 1e-5f;
    rope_params rope;               // attention layers
    rope_params rope_swa;           // sliding-window layers (gemma3: its own base)
    int32_t     n_swa = 0;          // window of sliding_attention layers, in positions
    std::vector<layer_kind> layer_kinds;  // per layer of the model, n_layer entries
    bool        has_qkv_bias = false;
    float       embd_scale = 1.0f;        // token embeddings are multiplied by this (gemma3: sqrt(n_embd))
    float       final_logit_softcap = 0;  // > 0: logits = softcap * tanh(logits / softcap)
    moe_params  moe;                      // n_expert 0: dense feed-forward

    int32_t q_dim() const { return n_head * head_dim; }
    int32_t kv_dim() const { return n_head_kv * head_dim; }
    const rope_params & rope_for(int32_t il) const {
        return layer_kinds[static_cast<size_t>(il)] == layer_kind::sliding_attention ? rope_swa : rope;
    }

    // Reads and validates the hyper-parameters a GGUF file declares. Unknown
    // architectures and unimplemented RoPE scaling are `unsupported` (the message names
    // the key); missing or malformed keys are `invalid_data`.
    static result<model_hparams> from_gguf(const gguf::file & file);
};

// [start, end): half-open layer range.
struct layer_range {
    int32_t start = 0;
    int32_t end = 0;
    int32_t size() const { return end - start; }
};

// One sequence's share of a batch: its KV (positions [0, pos_start) valid) and n_tokens
// new tokens at positions [pos_start, pos_start + n_tokens). The recurrent families add
// their per-sequence state next to `kv` (a pointer member defaulting to null), so a
// span written {&kv, pos, n} keeps compiling.
struct sequence_span {
    kv_sequence * kv = nullptr;
    int64_t       pos_start = 0;
    int64_t       n_tokens = 0;
};

// Scratch buffers reused across forward calls (one per concurrent caller). Internal to
// the forward pass; callers only keep one alive per thread that calls forward_*.
struct forward_workspace {
    std::vector<float> cur, q, k, v, qkv, attn, gate, up;
    // Mixture of experts: router logits, per (row, rank) expert and weight, the rows
    // gathered by expert, and each (row, rank)'s expert output.
    std::vector<float>   moe_logits, moe_weights, moe_in, moe_gate, moe_up, moe_down;
    std::vector<int32_t> moe_experts, moe_slot, moe_count;
    std::vector<float> rope_cos, rope_sin;  // per rope variant, per row of a pass
    struct row_ref {
        kv_sequence * kv;
        int64_t       pos;
    };
    std::vector<row_ref> rows;
};

// Options of model_slice::bind.
struct slice_options {
    // Positions one sequence may reach (the stage's context per lane); 0: the default
    // of stage_options, min(context_length, 4096). Selects Phi-3's long or short RoPE
    // factors (long when larger than rope.scaling.original_context_length), as
    // llama.cpp does from its per-sequence context.
    int32_t n_ctx_seq = 0;
};

class model_slice {
public:
    // Binds the tensors of `range`; embeddings when range.start == 0, output norm and
    // head when range.end == n_layer. Shapes and types are validated here: a missing or
    // misshapen tensor is refused with a message naming it.
    static result<std::unique_ptr<model_slice>> bind(std::shared_ptr<const gguf::file> file, layer_range range,
                                                     const slice_options & options = {});
    ~model_slice();

    const model_hparams & hparams() const { return hparams_; }
    layer_range range() const { return range_; }
    bool has_embeddings() const { return token_embd_.data != nullptr; }
    bool has_head() const { return output_.data != nullptr; }

    // KV geometry this slice needs (its layers, kv_dim) for a given dtype.
    kv_geometry kv_geometry_for(kv_dtype dtype, int32_t block_tokens = 16) const;

    // x[n_tokens, n_embd] = embedding rows (times hparams().embd_scale). Ids outside
    // [0, n_vocab) are an error.
    // REQUIRES: has_embeddings(); x holds tokens.size() * n_embd floats.
    status embed(std::span<const token_id> tokens, float * x) const;

    // Runs this slice's layers in place on x, which holds the rows of every span in span
    // order ([sum of n_tokens, n_embd]), writing each span's K/V into its own kv.
    // Matrix products run once over all rows; each row attends over its own sequence.
    // REQUIRES: every span's kv was made from a pool of kv_geometry_for(...)'s layers and
    // width; no two spans share a kv.
    // PROMISES: every row is bitwise equal to running its sequence alone, whatever the
    // mix of spans, their order and the thread count. Errors (a span past its KV's end,
    // a pool without room for every span, bad spans) compute nothing and leave each
    // kv's positions [0, pos_start) as they were.
    status forward_batch(float * x, std::span<const sequence_span> spans, kernels::thread_pool * pool,
                         forward_workspace & ws) const;

    // The one-span case of forward_batch: tokens at [pos_start, pos_start + n_tokens).
    status forward_layers(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                          kernels::thread_pool * pool, forward_workspace & ws) const;

    // logits[n_rows, n_vocab] from final hidden rows x[n_rows, n_embd] (not modified).
    // REQUIRES: has_head().
    void head(const float * x, int64_t n_rows, float * logits, kernels::thread_pool * pool,
              forward_workspace & ws) const;

    struct bound_layers;  // the family and the layer weights (model/family.h)

private:
    model_slice() = default;
    void forward_pass(float * x, std::span<const forward_workspace::row_ref> rows, kernels::thread_pool * pool,
                      forward_workspace & ws) const;

    std::shared_ptr<const gguf::file> file_;
    model_hparams                     hparams_;
    layer_range                       range_;
    kernels::matrix_view              token_embd_;
    const float *                     output_norm_ = nullptr;
    kernels::matrix_view              output_;
    std::unique_ptr<bound_layers>     layers_;
};

}  // namespace skippy
