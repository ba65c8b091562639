// llama (TinyStories, Llama 2/3.x, Mistral-style files) and qwen2 (llama with QKV
// biases and NeoX RoPE): the pre-norm layer with SwiGLU. Llama 3.1+ RoPE factors
// (rope_freqs.weight) are bound for every family by model_slice.
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

class llama_family final : public family_i {
public:
    explicit llama_family(bool qwen2) : qwen2_(qwen2) {}

    status read_hparams(const metadata_reader &, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, qwen2_ ? rope_mode::neox : rope_mode::normal);
        hp.has_qkv_bias = qwen2_;
        return status::ok();
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_TRY(blocks::bind_attention(b, hp, lw));
        // qwen2 requires the biases; a llama file may carry all three (or none).
        const bool bias = hp.has_qkv_bias || b.has(tensor_role::attn_q, "bias");
        SKIPPY_ASSIGN_OR_RETURN(lw.bq, b.vector(tensor_role::attn_q, hp.q_dim(), bias, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.bk, b.vector(tensor_role::attn_k, hp.kv_dim(), bias, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.bv, b.vector(tensor_role::attn_v, hp.kv_dim(), bias, "bias"));
        return blocks::bind_ffn(b, hp, lw);
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        blocks::prenorm_layer(p, lw, {1.0f, 1.0f / std::sqrt(static_cast<float>(p.hp.head_dim)), blocks::ffn_activation::silu});
    }

private:
    bool qwen2_;
};

}  // namespace

const family_i & family_llama() {
    static const llama_family f(false);
    return f;
}

const family_i & family_qwen2() {
    static const llama_family f(true);
    return f;
}

}  // namespace skippy
