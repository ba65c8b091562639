// Internal to src/model: what a model family (one graph builder) implements, the
// per-layer weights it binds, and the table of GGUF tensor names.
//
// A family reads its own metadata, binds the tensors of one layer, and runs one layer
// over the rows of a pass with the shared pieces of blocks.h. Adding a family is one
// file family_<name>.cpp plus rows in families.cpp (and tensor names below if it has
// new ones); nothing else in the forward pass changes.
#pragma once

#include "model/hparams_read.h"
#include "model/model.h"

#include <array>
#include <string_view>

namespace skippy {

// Per-layer tensors as GGUF names them: blk.<il>.<name>.weight (or .bias).
enum class tensor_role : uint8_t {
    attn_norm,
    attn_q,
    attn_k,
    attn_v,
    attn_qkv,        // fused [q; k; v] rows (phi3)
    attn_output,
    attn_q_norm,     // per-head RMS norm weights (qwen3, gemma3)
    attn_k_norm,
    attn_post_norm,  // after the attention output (gemma3)
    ffn_norm,
    ffn_gate,
    ffn_up,          // phi3: fused [gate; up] rows
    ffn_down,
    ffn_post_norm,   // after the feed-forward output (gemma3)
    ffn_gate_inp,    // router [n_embd, n_expert] (mixtures of experts)
    ffn_gate_exps,   // experts [n_embd, n_ff_exp, n_expert]
    ffn_up_exps,
    ffn_down_exps,   // [n_ff_exp, n_embd, n_expert]
    ffn_gate_inp_shexp,  // shared expert's sigmoid gate [n_embd]
    ffn_gate_shexp,  // shared expert [n_embd, n_ff_shexp]
    ffn_up_shexp,
    ffn_down_shexp,
    attn_sinks,      // per-head logit in the softmax denominator [n_head] (gpt-oss)
    attn_gate,       // delta-net output gate z [n_embd, d_inner] (qwen35)
    ssm_conv1d,      // delta-net causal convolution [d_conv, conv_channels]
    ssm_dt,          // delta-net decay bias [n_v_head] (ssm_dt.bias)
    ssm_a,           // delta-net decay rate -exp(A_log) [n_v_head] (no suffix)
    ssm_beta,        // delta-net write strength [n_embd, n_v_head]
    ssm_alpha,       // delta-net decay input [n_embd, n_v_head]
    ssm_norm,        // delta-net per-head output norm [d_state]
    ssm_out,         // delta-net output projection [d_inner, n_embd]
    count,
};

inline constexpr std::array<std::string_view, static_cast<size_t>(tensor_role::count)> k_tensor_names = {
    "attn_norm", "attn_q",   "attn_k",   "attn_v",   "attn_qkv",          "attn_output", "attn_q_norm",
    "attn_k_norm", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",  "post_ffw_norm",
    "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_inp_shexp", "ffn_gate_shexp",
    "ffn_up_shexp", "ffn_down_shexp", "attn_sinks", "attn_gate", "ssm_conv1d", "ssm_dt", "ssm_a", "ssm_beta",
    "ssm_alpha", "ssm_norm", "ssm_out",
};

// The experts of one layer stored as one 3-D tensor [n_cols, n_rows, n_expert]: expert
// e's matrix starts e * expert_bytes into data.
struct expert_matrices {
    kernels::matrix_view first;  // expert 0
    size_t               expert_bytes = 0;
    kernels::matrix_view of(int32_t e) const {
        kernels::matrix_view m = first;
        m.data += static_cast<size_t>(e) * expert_bytes;
        return m;
    }
};

// The feed-forward network of a mixture-of-experts layer.
struct moe_weights {
    kernels::matrix_view router;                  // ffn_gate_inp
    const float *        router_bias = nullptr;   // [n_expert] (gpt-oss)
    expert_matrices      gate, up, down;
    const float *        gate_bias = nullptr;     // [n_expert][n_ff_exp] (gpt-oss)
    const float *        up_bias = nullptr;
    const float *        down_bias = nullptr;     // [n_expert][n_embd]
    // Optional shared expert, run on every row and added (times its sigmoid gate when
    // shexp_gate_inp is present).
    kernels::matrix_view shexp_gate, shexp_up, shexp_down;
    kernels::matrix_view shexp_gate_inp;          // [n_embd] as a 1-row matrix
};

// The tensors of one layer. A family fills the slots it uses; the others stay empty.
struct layer_weights {
    layer_kind           kind = layer_kind::attention;
    int32_t              rope_variant = 0;  // index into bound_layers::ropes
    const float *        attn_norm = nullptr;
    kernels::matrix_view wq, wk, wv, wqkv, wo;
    const float *        bq = nullptr;
    const float *        bk = nullptr;
    const float *        bv = nullptr;
    const float *        q_norm = nullptr;
    const float *        k_norm = nullptr;
    const float *        attn_post_norm = nullptr;
    const float *        ffn_norm = nullptr;
    kernels::matrix_view ffn_gate, ffn_up, ffn_down;
    const float *        ffn_post_norm = nullptr;
    const float *        bo = nullptr;     // attn_output bias (gpt-oss)
    const float *        sinks = nullptr;  // attn_sinks [n_head] (gpt-oss)
    moe_weights          moe;              // used when hp.moe.n_expert > 0
    // Gated delta-net (layer_kind::recurrent): wqkv holds [q | k | v] before the conv.
    int32_t              recurrent_index = -1;  // among the slice's recurrent layers
    int32_t              kv_index = -1;         // among the slice's layers with KV (its layer in the KV pool)
    kernels::matrix_view ssm_z, ssm_beta, ssm_alpha, ssm_out;
    const float *        ssm_conv1d = nullptr;  // [conv_channels][d_conv]
    const float *        ssm_dt = nullptr;
    const float *        ssm_a = nullptr;
    const float *        ssm_norm = nullptr;
};

// Binds the tensors of layer il, checking shapes and types.
class tensor_binder {
public:
    tensor_binder(const gguf::file & file, int32_t il) : file_(file), il_(il) {}
    int32_t il() const { return il_; }
    // blk.<il>.<role>.<suffix>; an empty suffix names blk.<il>.<role> (ssm_a).
    std::string name(tensor_role role, std::string_view suffix = "weight") const;
    bool has(tensor_role role, std::string_view suffix = "weight") const { return file_.find_tensor(name(role, suffix)) != nullptr; }
    // A 2-D weight [n_cols, n_rows] of a type the kernels support; required.
    result<kernels::matrix_view> matrix(tensor_role role, int64_t n_cols, int64_t n_rows) const;
    // A 1-D F32 vector of n elements; null when absent and not required.
    result<const float *> vector(tensor_role role, int64_t n, bool required, std::string_view suffix = "weight") const;
    // A 3-D weight [n_cols, n_rows, n_expert] of a type the kernels support; required.
    result<expert_matrices> experts(tensor_role role, int64_t n_cols, int64_t n_rows, int64_t n_expert) const;
    // A 2-D F32 array [n_cols, n_rows] (per-expert biases); null when absent and not required.
    result<const float *> array(tensor_role role, int64_t n_cols, int64_t n_rows, bool required, std::string_view suffix) const;

private:
    const gguf::file & file_;
    int32_t            il_;
};

// Binding helpers shared with model_slice (global tensors).
result<kernels::matrix_view> bind_matrix(const gguf::file & f, const std::string & name, int64_t n_cols, int64_t n_rows);
result<const float *> bind_vector(const gguf::file & f, const std::string & name, int64_t n, bool required);

// One rope variant of the slice with its per-pair frequency factors (null: none).
struct rope_variant {
    rope_params   params;
    const float * freq_factors = nullptr;  // n_rot / 2 divisors of theta (rope_freqs, Phi-3 long/short)
    float         corr_low = 0, corr_high = 0;  // YaRN ramp corners, in pairs (blocks::prepare_rope)
    float         mscale = 1.0f;                // cos/sin magnitude (blocks::prepare_rope)
};

// Per-row cos/sin of one rope variant for the rows of a pass: row t's n_rot/2 pairs
// start at t * half.
struct rope_table {
    const rope_params * params = nullptr;
    const float *       cos = nullptr;
    const float *       sin = nullptr;
    int32_t             half = 0;
};

// One layer over the rows of a pass.
struct layer_pass {
    const model_hparams &                       hp;
    int32_t                                     il = 0;  // the layer's KV layer (kv_index; 0 for a layer without KV)
    float *                                     x = nullptr;  // [n_rows, n_embd], updated in place
    int64_t                                     n_rows = 0;
    std::span<const forward_workspace::row_ref> rows;    // per row: its sequence's KV and position
    rope_table                                  rope;
    forward_workspace &                         ws;
    kernels::thread_pool *                      pool = nullptr;
};

class family_i {
public:
    virtual ~family_i() = default;
    // Family keys and defaults, after the common keys are in hp (rope modes, biases,
    // layer kinds, scales; hp.rope_swa is a copy of hp.rope).
    virtual status read_hparams(const metadata_reader & r, model_hparams & hp) const = 0;
    // Binds layer il (kind and rope_variant are set by the caller).
    virtual status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const = 0;
    // Runs one layer in place on p.x.
    virtual void forward_layer(const layer_pass & p, const layer_weights & lw) const = 0;
};

// The family serving `general.architecture` = arch_name, or null (families.cpp).
struct family_entry {
    std::string_view arch_name;
    model_arch       arch;
    const family_i & family;
};
const family_entry * find_family(std::string_view arch_name);
std::string family_names();  // "llama, qwen2, ..." for error texts

// The layers a slice binds (model.h forward-declares it).
struct model_slice::bound_layers {
    const family_i *           family = nullptr;
    std::vector<rope_variant>  ropes;   // [0]: attention layers, [1]: sliding-window layers
    std::vector<layer_weights> layers;  // [0, range.size())
};

}  // namespace skippy
