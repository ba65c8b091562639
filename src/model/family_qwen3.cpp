// qwen3: the pre-norm layer of llama with an RMS norm of each query and key head before
// RoPE (attn_q_norm, attn_k_norm), NeoX RoPE, no biases, and a head size of its own
// (attention.key_length, often not n_embd / n_head).
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

class qwen3_family final : public family_i {
public:
    status read_hparams(const metadata_reader &, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        return status::ok();
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_TRY(blocks::bind_attention(b, hp, lw));
        SKIPPY_TRY(blocks::bind_qk_norms(b, hp, lw));
        return blocks::bind_ffn(b, hp, lw);
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        blocks::prenorm_layer(p, lw, {1.0f, 1.0f / std::sqrt(static_cast<float>(p.hp.head_dim)), blocks::ffn_activation::silu, true});
    }
};

}  // namespace

const family_i & family_qwen3() {
    static const qwen3_family f;
    return f;
}

}  // namespace skippy
