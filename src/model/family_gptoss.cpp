// gpt-oss (llama.cpp's `gpt-oss`, OpenAI's MoE): the pre-norm layer with q/k/v/o
// biases, NeoX RoPE (YaRN in the released files), attention sinks (a learned logit per
// query head in the softmax denominator), sliding-window attention on the even layers
// and full attention on the odd ones (attention.sliding_window positions), and a
// mixture of experts normed by post_attention_norm: router with a bias, the top k
// logits softmaxed over those k (no renormalisation), experts with biases and the
// clamped SwiGLU (alpha 1.702, limit 7). Attention probabilities are rounded to f16 as
// llama.cpp's non-flash path does.
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

// llama.cpp's constants for LLM_FFN_SWIGLU_OAI_MOE.
constexpr float k_swiglu_alpha = 1.702f;
constexpr float k_swiglu_limit = 7.0f;
constexpr int32_t k_swa_period = 2;  // layer il slides when il % 2 == 0

void clamped_swiglu(const float * gate, const float * up, float * out, int64_t n) {
    kernels::swiglu_clamped(gate, up, out, n, k_swiglu_alpha, k_swiglu_limit);
}

class gptoss_family final : public family_i {
public:
    status read_hparams(const metadata_reader & r, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        SKIPPY_TRY(r.count("attention.sliding_window", 0, INT32_MAX, hp.n_swa, false));
        if (hp.n_swa > 0) {
            for (int32_t il = 0; il < hp.n_layer; ++il) {
                hp.layer_kinds[static_cast<size_t>(il)] =
                    il % k_swa_period < k_swa_period - 1 ? layer_kind::sliding_attention : layer_kind::attention;
            }
        }
        return blocks::read_moe_hparams(r, hp, expert_gating::softmax_topk, false);
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_TRY(blocks::bind_attention(b, hp, lw));
        SKIPPY_ASSIGN_OR_RETURN(lw.bq, b.vector(tensor_role::attn_q, hp.q_dim(), true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.bk, b.vector(tensor_role::attn_k, hp.kv_dim(), true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.bv, b.vector(tensor_role::attn_v, hp.kv_dim(), true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.bo, b.vector(tensor_role::attn_output, hp.n_embd, true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(lw.sinks, b.vector(tensor_role::attn_sinks, hp.n_head, true));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, b.vector(tensor_role::attn_post_norm, hp.n_embd, true));
        return blocks::bind_moe(b, hp, lw, true);
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        forward_workspace & ws = p.ws;
        const int64_t n_embd = p.hp.n_embd;
        blocks::norm_rows(p, lw.attn_norm);
        blocks::project_qkv(p, lw);
        blocks::prepare_qkv(p, lw, 1.0f);
        blocks::attention_params a;
        a.kq_scale = 1.0f / std::sqrt(static_cast<float>(p.hp.head_dim));
        a.n_swa = lw.kind == layer_kind::sliding_attention ? p.hp.n_swa : 0;
        a.f16_probabilities = true;
        a.sinks = lw.sinks;
        blocks::attention(p, ws.q.data(), ws.attn.data(), a);
        kernels::matmul(lw.wo, ws.attn.data(), p.n_rows, ws.cur.data(), p.pool);
        blocks::for_rows(p.pool, p.n_rows, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) blocks::add(ws.cur.data() + t * n_embd, lw.bo, n_embd);
        });
        blocks::residual(p, ws.cur.data(), lw.ffn_norm);
        blocks::moe_ffn(p, lw, clamped_swiglu, ws.cur.data(), ws.attn.data());
        blocks::residual(p, ws.attn.data(), nullptr);
    }
};

}  // namespace

const family_i & family_gptoss() {
    static const gptoss_family f;
    return f;
}

}  // namespace skippy
