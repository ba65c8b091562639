// phi3 (Phi-3, Phi-3.5, Phi-4-mini): the pre-norm layer with a fused QKV projection
// (attn_qkv: q rows, then k, then v; separate attn_q/k/v also accepted), a fused
// gate/up tensor (ffn_up: gate rows, then up rows) into SwiGLU, NeoX RoPE with the long
// or short per-pair factors when the file has them, and the query scaled by
// 1/sqrt(head_dim) after RoPE. The converter's attention.sliding_window (2047) is
// ignored, as llama.cpp ignores it for Phi-3.
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

class phi3_family final : public family_i {
public:
    status read_hparams(const metadata_reader &, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        return status::ok();
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_ASSIGN_OR_RETURN(lw.attn_norm, b.vector(tensor_role::attn_norm, hp.n_embd, true));
        if (b.has(tensor_role::attn_qkv) || !b.has(tensor_role::attn_q)) {
            SKIPPY_ASSIGN_OR_RETURN(lw.wqkv, b.matrix(tensor_role::attn_qkv, hp.n_embd, hp.q_dim() + 2 * hp.kv_dim()));
        } else {
            SKIPPY_ASSIGN_OR_RETURN(lw.wq, b.matrix(tensor_role::attn_q, hp.n_embd, hp.q_dim()));
            SKIPPY_ASSIGN_OR_RETURN(lw.wk, b.matrix(tensor_role::attn_k, hp.n_embd, hp.kv_dim()));
            SKIPPY_ASSIGN_OR_RETURN(lw.wv, b.matrix(tensor_role::attn_v, hp.n_embd, hp.kv_dim()));
        }
        SKIPPY_ASSIGN_OR_RETURN(lw.wo, b.matrix(tensor_role::attn_output, hp.q_dim(), hp.n_embd));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, b.vector(tensor_role::ffn_norm, hp.n_embd, true));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_up, b.matrix(tensor_role::ffn_up, hp.n_embd, 2 * static_cast<int64_t>(hp.n_ff)));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_down, b.matrix(tensor_role::ffn_down, hp.n_ff, hp.n_embd));
        return status::ok();
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        blocks::prenorm_layer(p, lw, {1.0f / std::sqrt(static_cast<float>(p.hp.head_dim)), 1.0f, blocks::ffn_activation::silu, true});
    }
};

}  // namespace

const family_i & family_phi3() {
    static const phi3_family f;
    return f;
}

}  // namespace skippy
