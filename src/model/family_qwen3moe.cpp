// qwen3moe: qwen3's attention (per-head q/k RMS norms, NeoX RoPE, its own head size)
// with a mixture of SwiGLU experts as the feed-forward network: a softmax over the
// router's logits, the top expert_used_count experts, their weights renormalised to sum
// to 1 (llama.cpp always renormalises for this family; expert_weights_norm may say
// otherwise), and an optional shared expert.
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

class qwen3moe_family final : public family_i {
public:
    status read_hparams(const metadata_reader & r, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        return blocks::read_moe_hparams(r, hp, expert_gating::softmax, true);
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_TRY(blocks::bind_attention(b, hp, lw));
        SKIPPY_TRY(blocks::bind_qk_norms(b, hp, lw));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, b.vector(tensor_role::ffn_norm, hp.n_embd, true));
        return blocks::bind_moe(b, hp, lw, false);
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        blocks::prenorm_layer(p, lw, {1.0f, 1.0f / std::sqrt(static_cast<float>(p.hp.head_dim)), blocks::ffn_activation::silu, true});
    }
};

}  // namespace

const family_i & family_qwen3moe() {
    static const qwen3moe_family f;
    return f;
}

}  // namespace skippy
