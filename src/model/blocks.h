// Internal to src/model: the pieces every family's graph builder is made of (norms,
// RoPE, the KV store, attention over the paged KV, feed-forward networks, residuals).
//
// Each piece works per row (one token) or, for matrix products and attention, over the
// rows of a pass with results that depend on the row alone; so a family composed of
// them keeps batch invariance without further thought. Row-level helpers are plain
// functions a family may fuse into one for_rows job.
#pragma once

#include "model/family.h"

#include <functional>

namespace skippy::blocks {

// fn(t0, t1) over rows [0, n_rows) in a few contiguous chunks per thread, for per-row
// work (each row's result depends on that row alone, so the split cannot change a bit).
// One row runs inline: decode does not pay for a job.
void for_rows(kernels::thread_pool * pool, int64_t n_rows, const std::function<void(int64_t t0, int64_t t1)> & fn);

// y = x / rms(x) * w over n elements, the mean of squares summed in double as the
// reference does. y may be x.
void rms_norm(const float * x, const float * w, int64_t n, float eps, float * y);

// RMS norm of each of n_heads heads of width head_dim in place, with the same weights
// (qwen3 and gemma3 q/k norms).
void rms_norm_heads(float * row, const float * w, int32_t n_heads, int32_t head_dim, float eps);

// x[i] += y[i] for n elements.
void add(float * x, const float * y, int64_t n);

// cos/sin of each rotated pair at position pos for one rope variant, built the way
// ggml's rope cache is (theta multiplied pair by pair, YaRN's ramp and magnitude) so
// positions rotate identically to the reference.
void rope_angles(const rope_variant & v, int64_t pos, float * cos_out, float * sin_out);

// YaRN's ramp corners (corr_dims) and cos/sin magnitude of a variant, filled in once.
void prepare_rope(rope_variant & v);

// Rotates the first n_rot dimensions of n_heads heads of width head_dim at `row`, by
// the angles of pass row t.
void rope_row(const layer_pass & p, int64_t t, float * row, int32_t n_heads);

// Writes pass row t's K and V rows (kv_dim each) into its sequence's KV at its position.
void store_kv(const layer_pass & p, int64_t t, const float * k, const float * v);

struct attention_params {
    float   kq_scale = 1.0f;  // scores are q.k * kq_scale
    int32_t n_swa = 0;        // > 0: keys older than pos - n_swa + 1 are masked
    // Round the normalized probabilities to f16 before weighting V, as llama.cpp's
    // non-flash CPU path does (its KQ x V product converts them to V's type). Takes
    // two passes over the row's keys (scores kept, linear in the sequence) instead of
    // the online softmax's one.
    bool    f16_probabilities = false;
    // Attention sinks (gpt-oss): one learned logit per query head, in the softmax's
    // denominator as if it were one more key with no value; null: none.
    const float * sinks = nullptr;
};

// out[t, h*head_dim ...] = softmax(q_t,h . K * kq_scale) V over the keys row t may see
// in its own sequence (its KV layer p.il), q and out [n_rows, q_dim]. Keys are reduced
// in KV blocks aligned to absolute positions, in order, with an online softmax: the
// result depends only on the row's position and the stored K/V.
void attention(const layer_pass & p, const float * q, float * out, const attention_params & a);

enum class ffn_activation { silu, gelu };

// out[t] = W_down (act(W_gate in[t]) * W_up in[t]) for every row. With lw.ffn_gate
// absent, lw.ffn_up holds the gate rows then the up rows (phi3's fused tensor).
// Uses ws.gate and ws.up; out must not be in, ws.gate or ws.up.
void ffn(const layer_pass & p, const layer_weights & lw, ffn_activation act, const float * in, float * out);

// The feed-forward network of a mixture-of-experts layer (docs/model.md, "Mixture of
// experts"): out[t] = sum over the row's k experts, in rank order (the highest weight
// first; equal ones by expert id), of w_j * expert_j(in[t]), plus the shared expert.
// The router gives each row its experts from that row alone, and each expert runs once
// over the rows routed to it (kernels::matmul_grouped: one pass over each selected
// expert's weights), so a row's experts, their outputs and the order they are summed in
// never depend on the other rows. `act` is the experts' gated activation over n values.
// Uses ws.moe_*, ws.gate and ws.up; out must not be in.
using expert_activation = void (*)(const float * gate, const float * up, float * out, int64_t n);
void moe_ffn(const layer_pass & p, const layer_weights & lw, expert_activation act, const float * in, float * out);

// The experts' keys under the architecture's prefix into hp.moe (expert_count,
// expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length,
// expert_weights_norm, expert_weights_scale), with the family's gating and default
// for expert_weights_norm. expert_used_count above expert_count is refused, naming both.
status read_moe_hparams(const metadata_reader & r, model_hparams & hp, expert_gating gating, bool norm_default);

// ffn_gate_inp (+ its bias when with_biases), the three expert tensors (+ their biases),
// and the shared expert when the file has ffn_up_shexp.
status bind_moe(const tensor_binder & b, const model_hparams & hp, layer_weights & lw, bool with_biases);

// hp.rope and hp.rope_swa rotate with `mode` (a family's read_hparams).
void set_rope_mode(model_hparams & hp, rope_mode mode);

// ---- binding the usual tensors of a layer ----

// attn_norm, attn_q, attn_k, attn_v, attn_output.
status bind_attention(const tensor_binder & b, const model_hparams & hp, layer_weights & lw);
// attn_q_norm, attn_k_norm ([head_dim] each).
status bind_qk_norms(const tensor_binder & b, const model_hparams & hp, layer_weights & lw);
// ffn_norm, ffn_gate, ffn_up, ffn_down.
status bind_ffn(const tensor_binder & b, const model_hparams & hp, layer_weights & lw);

// ---- steps of a layer over the rows of a pass (ws buffers as named) ----

// ws.cur[t] = rms_norm(x[t]) * w for every row.
void norm_rows(const layer_pass & p, const float * w);

// The projections of ws.cur: ws.q, ws.k, ws.v (or ws.qkv with a fused lw.wqkv).
void project_qkv(const layer_pass & p, const layer_weights & lw);

// Per row, in the reference's order: split a fused qkv row; add the q/k/v biases;
// per-head RMS norm of q and k (lw.q_norm, lw.k_norm); RoPE of q and k; q *= q_scale
// (when != 1); store k and v in the row's KV.
void prepare_qkv(const layer_pass & p, const layer_weights & lw, float q_scale);

// x[t] += y[t] for every row; then, with w, ws.cur[t] = rms_norm(x[t]) * w.
void residual(const layer_pass & p, const float * y, const float * w);

// The pre-norm layer of llama, qwen2, qwen3, phi3 and qwen3moe:
//   x += Wo attention(rope(norms(Wq,k,v rms_norm(x) * attn_norm)))
//   x += ffn(rms_norm(x) * ffn_norm)        (moe_ffn with SwiGLU experts when lw.moe has a router)
struct prenorm_options {
    float          q_scale = 1.0f;  // on q after RoPE (phi3: 1/sqrt(head_dim), with kq_scale 1)
    float          kq_scale = 1.0f;
    ffn_activation act = ffn_activation::silu;
    bool           f16_probabilities = false;  // attention_params::f16_probabilities
};
void prenorm_layer(const layer_pass & p, const layer_weights & lw, const prenorm_options & o);

// Sizes ws for a pass of n_rows rows of this model (buffers only grow).
void reserve_workspace(forward_workspace & ws, const model_hparams & hp, int64_t n_rows);

}  // namespace skippy::blocks
