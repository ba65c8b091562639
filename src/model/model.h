// Transformer architectures and the forward pass of a layer range.
//
// The forward pass is split so that stages can run pieces of it in different
// processes:  embed(tokens) -> forward_layers([layer_start, layer_end)) -> head(rows).
// A model_slice binds only the tensors of its layer range (plus the embeddings when
// it owns layer 0 and the output norm/head when it owns the last layer).
//
// Batch invariance (DESIGN §4): the hidden state of a token after any layer depends
// only on the token, its position and the KV of earlier positions, never on which
// other tokens share its batch, the chunking, or the thread count. Attention reduces
// over keys in blocks aligned to absolute positions (the KV block size), in order,
// with an online softmax.
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

enum class model_arch { llama, qwen2 };
enum class rope_mode { normal, neox };  // pairs (2i, 2i+1) vs (i, i + n_rot/2)

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
    int32_t     head_dim = 0;      // per attention head (K, Q and V)
    int32_t     n_rot = 0;         // rotated dimensions per head
    float       rope_freq_base = 10000.0f;
    float       rope_freq_scale = 1.0f;  // 1 / linear scaling factor
    float       rms_eps = 1e-5f;
    rope_mode   rope = rope_mode::normal;
    bool        has_qkv_bias = false;

    int32_t q_dim() const { return n_head * head_dim; }
    int32_t kv_dim() const { return n_head_kv * head_dim; }

    // Reads and validates the hyper-parameters a GGUF file declares.
    static result<model_hparams> from_gguf(const gguf::file & file);
};

// [start, end): half-open layer range.
struct layer_range {
    int32_t start = 0;
    int32_t end = 0;
    int32_t size() const { return end - start; }
};

// Scratch buffers reused across forward calls (one per concurrent caller).
struct forward_workspace {
    std::vector<float> cur, q, k, v, attn, gate, up;
};

class model_slice {
public:
    // Binds the tensors of `range`; embeddings when range.start == 0, output norm and
    // head when range.end == n_layer. Shapes and types are validated here.
    static result<std::unique_ptr<model_slice>> bind(std::shared_ptr<const gguf::file> file, layer_range range);

    const model_hparams & hparams() const { return hparams_; }
    layer_range range() const { return range_; }
    bool has_embeddings() const { return token_embd_.data != nullptr; }
    bool has_head() const { return output_.data != nullptr; }

    // KV geometry this slice needs (its layers, kv_dim) for a given dtype.
    kv_geometry kv_geometry_for(kv_dtype dtype, int32_t block_tokens = 16) const;

    // x[n_tokens, n_embd] = embedding rows. Ids outside [0, n_vocab) are an error.
    // REQUIRES: has_embeddings(); x holds tokens.size() * n_embd floats.
    status embed(std::span<const token_id> tokens, float * x) const;

    // Runs this slice's layers in place on x[n_tokens, n_embd] for the tokens at
    // positions [pos_start, pos_start + n_tokens), writing their K/V into kv (which
    // must already hold positions [0, pos_start)). Fails without computing when the
    // pool has no room.
    status forward_layers(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                          kernels::thread_pool * pool, forward_workspace & ws) const;

    // logits[n_rows, n_vocab] from final hidden rows x[n_rows, n_embd] (not modified).
    // REQUIRES: has_head().
    void head(const float * x, int64_t n_rows, float * logits, kernels::thread_pool * pool,
              forward_workspace & ws) const;

private:
    struct layer_weights {
        const float *       attn_norm = nullptr;
        kernels::matrix_view wq, wk, wv, wo;
        const float *       bq = nullptr;
        const float *       bk = nullptr;
        const float *       bv = nullptr;
        const float *       ffn_norm = nullptr;
        kernels::matrix_view ffn_gate, ffn_up, ffn_down;
    };

    model_slice() = default;
    // forward_layers for at most k_pass_tokens tokens whose KV rows are prepared.
    void forward_pass(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv, kernels::thread_pool * pool,
                      forward_workspace & ws) const;
    void attention(int32_t il_local, const float * q, int64_t n_tokens, int64_t pos_start, const kv_sequence & kv,
                   float * out, kernels::thread_pool * pool) const;

    std::shared_ptr<const gguf::file> file_;
    model_hparams                     hparams_;
    layer_range                       range_;
    kernels::matrix_view              token_embd_;
    const float *                     output_norm_ = nullptr;
    kernels::matrix_view              output_;
    std::vector<layer_weights>        layers_;
};

}  // namespace skippy
