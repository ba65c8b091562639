// Transformer architectures and the forward pass of a layer range.
//
// The forward pass is split so that stages can run pieces of it in different
// processes:  embed(tokens) -> forward_batch([layer_start, layer_end)) -> head(rows).
// A model_slice binds only the tensors of its layer range (plus the embeddings when
// it owns layer 0 and the output norm/head when it owns the last layer).
//
// Each architecture family (llama/qwen2, qwen3, gemma3, phi3, qwen3moe, gpt-oss, qwen35) is one graph builder in
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

enum class model_arch { llama, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt_oss, qwen35 };
enum class rope_mode { normal, neox };  // pairs (2i, 2i+1) vs (i, i + n_rot/2)

// What a layer is.
enum class layer_kind : uint8_t {
    attention,          // causal attention over every earlier position
    sliding_attention,  // causal attention over the last n_swa positions (itself included)
    recurrent,          // gated delta-net (qwen35): a fixed-size state per sequence, no KV
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

// The gated delta-net of recurrent layers (qwen35; docs/model.md, "Gated delta-net").
// A token's input row is projected to conv_channels() values [q | k | v] (q and k:
// n_group heads of d_state, v: n_v_head heads of d_state), run through a causal
// convolution of d_conv taps per channel, and fed to a recurrence over one
// d_state x d_state matrix per v head.
struct ssm_params {
    int32_t d_conv = 0;    // ssm.conv_kernel: taps of the causal convolution (the state keeps d_conv - 1 inputs)
    int32_t d_state = 0;   // ssm.state_size: width of a q/k head (and of a v head)
    int32_t n_group = 0;   // ssm.group_count: q/k heads
    int32_t n_v_head = 0;  // ssm.time_step_rank: v heads (gate and beta per v head)
    int32_t d_inner = 0;   // ssm.inner_size: n_v_head * d_state
    int32_t conv_channels() const { return d_inner + 2 * n_group * d_state; }
    int64_t conv_state_floats() const { return static_cast<int64_t>(d_conv - 1) * conv_channels(); }
    int64_t matrix_state_floats() const { return static_cast<int64_t>(n_v_head) * d_state * d_state; }
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
    ssm_params  ssm;                      // used by layer_kind::recurrent layers

    int32_t q_dim() const { return n_head * head_dim; }
    int32_t kv_dim() const { return n_head_kv * head_dim; }
    bool is_recurrent(int32_t il) const { return layer_kinds[static_cast<size_t>(il)] == layer_kind::recurrent; }
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

// What a slice's recurrent state is made of (model_slice::recurrent_shape_of): its
// layer range, how many of those layers are recurrent and the delta-net sizes. Two
// states (or a state and a snapshot of one, recurrent_snapshot.h) fit each other
// exactly when their shapes are equal.
struct recurrent_shape {
    int32_t layer_start = 0;    // the slice's layer range [layer_start, layer_end)
    int32_t layer_end = 0;
    int32_t n_layers = 0;       // recurrent layers in the range
    int32_t d_conv = 0;         // convolution taps (the state keeps d_conv - 1 inputs per channel)
    int32_t conv_channels = 0;
    int32_t d_state = 0;
    int32_t n_v_head = 0;

    bool operator==(const recurrent_shape &) const = default;
    int64_t conv_floats() const { return static_cast<int64_t>(d_conv - 1) * conv_channels; }
    int64_t matrix_floats() const { return static_cast<int64_t>(n_v_head) * d_state * d_state; }
    int64_t floats() const { return static_cast<int64_t>(n_layers) * (conv_floats() + matrix_floats()); }
};

// One sequence's recurrent state in a slice (model_slice::make_recurrent_state): per
// recurrent layer of the slice, the last d_conv - 1 convolution inputs and the delta-net
// matrices, after the sequence's first n_tokens() positions. Unlike a KV it cannot be
// cut back: a state is either at the end of the sequence's positions, reset to none, or
// invalid (after a truncation to a length it does not hold) until reset. A copy taken
// at a token boundary (a checkpoint, recurrent_capture) restores the sequence to that
// boundary when copied back with KV of the same positions.
class recurrent_state {
public:
    recurrent_state() = default;
    // A zeroed state of `layers` recurrent layers, each conv_floats then matrix_floats.
    recurrent_state(int32_t layers, int64_t conv_floats, int64_t matrix_floats);
    // Positions folded into the state; -1: invalid (reset before use).
    int64_t n_tokens() const { return n_tokens_; }
    bool    empty() const { return layers_ == 0; }
    // Back to the state before position 0 (zeros).
    void reset();
    // The state no longer matches any prefix (a truncation it cannot follow).
    void invalidate() { n_tokens_ = -1; }
    // A truncation of the sequence to n positions: kept when it holds exactly n, reset
    // at 0, invalid otherwise.
    void truncate(int64_t n);
    // For the forward pass: the floats of recurrent layer r (0-based among the slice's
    // recurrent layers), [d_conv - 1][conv_channels] then [n_v_head][d_state][d_state].
    float * conv(int32_t r) { return data_.data() + static_cast<size_t>(r) * per_layer_; }
    float * matrix(int32_t r) { return conv(r) + conv_floats_; }
    void    set_n_tokens(int64_t n) { n_tokens_ = n; }
    bool    has_shape(int32_t layers, int64_t conv_floats, int64_t matrix_floats) const {
        return layers_ == layers && conv_floats_ == conv_floats && per_layer_ == static_cast<size_t>(conv_floats + matrix_floats);
    }
    bool    has_shape(const recurrent_shape & s) const { return has_shape(s.n_layers, s.conv_floats(), s.matrix_floats()); }
    size_t  bytes() const { return data_.size() * sizeof(float); }
    // Every float, layer by layer (conv then matrices): what a snapshot serializes.
    std::span<const float> floats() const { return data_; }
    std::span<float>       floats() { return data_; }

private:
    friend class model_slice;
    int32_t            layers_ = 0;
    int64_t            conv_floats_ = 0;
    size_t             per_layer_ = 0;
    int64_t            n_tokens_ = 0;
    std::vector<float> data_;
};

// A copy of a sequence's recurrent state taken during a forward, right after position
// n_tokens - 1 (a checkpoint inside a prompt chunk): `into` receives the state of
// every recurrent layer as it stood after that position, and n_tokens.
struct recurrent_capture {
    int64_t           n_tokens = 0;
    recurrent_state * into = nullptr;  // of make_recurrent_state()'s shape
};

// One sequence's share of a batch: its KV (positions [0, pos_start) valid) and n_tokens
// new tokens at positions [pos_start, pos_start + n_tokens), plus, on a slice with
// recurrent layers, its recurrent state (null elsewhere; a span written {&kv, pos, n}
// keeps compiling).
struct sequence_span {
    kv_sequence *     kv = nullptr;
    int64_t           pos_start = 0;
    int64_t           n_tokens = 0;
    recurrent_state * recurrent = nullptr;
    // Copies of the recurrent state to take inside the span (n_tokens in
    // (pos_start, pos_start + n_tokens]); none without recurrent layers.
    std::span<const recurrent_capture> captures = {};
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
    // Gated delta-net: per row the convolved [q | k | v], the output gate z, beta and
    // the decay g per v head, and the recurrence's output.
    std::vector<float> ssm_conv, ssm_z, ssm_beta, ssm_g, ssm_out;
    struct row_ref {
        kv_sequence *     kv;
        int64_t           pos;
        recurrent_state * recurrent = nullptr;
        recurrent_state * capture = nullptr;  // copy the state here once this row is folded in
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
    // Put the slice's layer weights and head on transparent huge pages
    // (gguf::file::back_with_huge_pages); false keeps them on the file mapping.
    bool huge_pages = true;
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

    // KV geometry this slice needs (its layers with KV, kv_dim) for a given dtype.
    kv_geometry kv_geometry_for(kv_dtype dtype, int32_t block_tokens = 16) const;
    // Layers of the slice that keep KV: every layer but the recurrent ones (at least one:
    // a slice of recurrent layers only keeps a pool layer it never writes). The KV pool
    // holds these layers only, in order.
    int32_t n_kv_layers() const;

    // Recurrent layers in this slice's range (qwen35's delta-net layers). A slice with
    // any needs a recurrent_state per sequence in every span of forward_batch.
    int32_t n_recurrent_layers() const;
    bool has_recurrent_layers() const { return n_recurrent_layers() > 0; }
    // A zeroed state sized for this slice's recurrent layers (empty when it has none).
    recurrent_state make_recurrent_state() const;
    // The shape of that state (n_layers 0 without recurrent layers).
    recurrent_shape recurrent_shape_of() const;

    // x[n_tokens, n_embd] = embedding rows (times hparams().embd_scale). Ids outside
    // [0, n_vocab) are an error.
    // REQUIRES: has_embeddings(); x holds tokens.size() * n_embd floats.
    status embed(std::span<const token_id> tokens, float * x) const;

    // Runs this slice's layers in place on x, which holds the rows of every span in span
    // order ([sum of n_tokens, n_embd]), writing each span's K/V into its own kv.
    // Matrix products run once over all rows; each row attends over its own sequence.
    // Recurrent layers run each sequence's rows through its state in position order: a
    // prompt in one call and the same prompt token by token give the same bits. A span
    // at pos_start 0 resets its state; any other needs a state holding exactly
    // pos_start positions (a state cannot be rebuilt from KV), else it is an error.
    // REQUIRES: every span's kv was made from a pool of kv_geometry_for(...)'s layers and
    // width; no two spans share a kv; with recurrent layers, every span has a state of
    // make_recurrent_state()'s shape, none shared.
    // A span's captures each receive a copy of its state right after their position
    // (their n_tokens set); the copies change no bit of the forward. A capture outside
    // the span, of another shape, or naming the span's own state is invalid_argument.
    // PROMISES: every row is bitwise equal to running its sequence alone, whatever the
    // mix of spans, their order and the thread count. Errors (a span past its KV's end,
    // a pool without room for every span, bad spans) compute nothing and leave each
    // kv's positions [0, pos_start) as they were.
    status forward_batch(float * x, std::span<const sequence_span> spans, kernels::thread_pool * pool,
                         forward_workspace & ws) const;

    // The one-span case of forward_batch: tokens at [pos_start, pos_start + n_tokens).
    status forward_layers(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                          kernels::thread_pool * pool, forward_workspace & ws,
                          recurrent_state * recurrent = nullptr) const;

    // logits[n_rows, n_vocab] from final hidden rows x[n_rows, n_embd] (not modified).
    // REQUIRES: has_head().
    void head(const float * x, int64_t n_rows, float * logits, kernels::thread_pool * pool,
              forward_workspace & ws) const;

    struct bound_layers;  // the family and the layer weights (model/family.h)

private:
    void move_weights_to_huge_pages(bool tied) const;
    model_slice() = default;
    status check_recurrent(const sequence_span & s) const;
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
