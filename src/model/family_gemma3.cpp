// gemma3: interleaved sliding-window and global attention layers, each with its own
// RoPE base (rope.freq_base_swa on sliding layers, default 10000, never scaled), RMS
// norms around both the attention and the feed-forward block (pre and post), per-head
// q/k norms before RoPE, the query scaled by 1/sqrt(key_length) after RoPE (Gemma 3
// 27B: 1/sqrt(n_embd / n_head)), a GELU-gated FFN, and embeddings scaled by
// sqrt(n_embd). GGUF norm weights already hold Gemma's (1 + w): the converter adds the
// 1, so they are used as they are, like every other family's.
//
// Window: attention.sliding_window positions, the current one included (a key at p0
// is masked for a query at p1 when p1 - p0 >= window). Pattern: the file's
// attention.sliding_window_pattern (a period n: layer il slides when il % n < n - 1; or
// one bool per layer), else 5 sliding layers then 1 global. Without a window every
// layer is global. Every position's K/V stays in the pool; the mask is applied per
// absolute position, so a restored prefix gives exactly a cold run's results.
#include "model/blocks.h"

#include <cmath>

namespace skippy {
namespace {

constexpr int32_t k_default_pattern = 6;  // llama.cpp's family default

status read_pattern(const metadata_reader & r, model_hparams & hp) {
    const std::string key = r.prefix() + "attention.sliding_window_pattern";
    const gguf::value * v = r.file().find(key);
    if (v && v->as_array()) {
        const auto & a = *v->as_array();
        if (a.size() != static_cast<size_t>(hp.n_layer)) {
            return make_error(error_code::invalid_data, "model metadata '" + key + "' must hold one bool per layer");
        }
        for (size_t il = 0; il < a.size(); ++il) {
            auto b = a[il].as_bool();
            if (!b) return make_error(error_code::invalid_data, "model metadata '" + key + "' must hold bools");
            hp.layer_kinds[il] = *b ? layer_kind::sliding_attention : layer_kind::attention;
        }
        return status::ok();
    }
    int32_t period = k_default_pattern;
    SKIPPY_TRY(r.count("attention.sliding_window_pattern", 0, hp.n_layer, period, false));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const bool sliding = period == 0 || il % period < period - 1;
        hp.layer_kinds[static_cast<size_t>(il)] = sliding ? layer_kind::sliding_attention : layer_kind::attention;
    }
    return status::ok();
}

class gemma3_family final : public family_i {
public:
    status read_hparams(const metadata_reader & r, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        hp.rope_swa.freq_base = 10000.0f;
        hp.rope_swa.freq_scale = 1.0f;
        SKIPPY_TRY(r.real("rope.freq_base_swa", hp.rope_swa.freq_base));
        if (!(hp.rope_swa.freq_base > 0)) return make_error(error_code::invalid_data, "rope.freq_base_swa must be positive");
        SKIPPY_TRY(r.count("attention.sliding_window", 0, INT32_MAX, hp.n_swa, false));
        if (hp.n_swa > 0) SKIPPY_TRY(read_pattern(r, hp));
        SKIPPY_TRY(r.real("final_logit_softcapping", hp.final_logit_softcap));
        if (hp.final_logit_softcap < 0) return make_error(error_code::invalid_data, "final_logit_softcapping must not be negative");
        hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
        return status::ok();
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_TRY(blocks::bind_attention(b, hp, lw));
        SKIPPY_TRY(blocks::bind_qk_norms(b, hp, lw));
        SKIPPY_ASSIGN_OR_RETURN(lw.attn_post_norm, b.vector(tensor_role::attn_post_norm, hp.n_embd, true));
        SKIPPY_TRY(blocks::bind_ffn(b, hp, lw));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_post_norm, b.vector(tensor_role::ffn_post_norm, hp.n_embd, true));
        return status::ok();
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        const model_hparams & hp = p.hp;
        forward_workspace & ws = p.ws;
        const int64_t n_embd = hp.n_embd;
        const float q_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim));
        const int32_t n_swa = lw.kind == layer_kind::sliding_attention ? hp.n_swa : 0;
        // y[t] = rms_norm(y[t]) * w, then x[t] += y[t]; then, with next_norm, ws.cur[t] = rms_norm(x[t]) * next_norm.
        const auto post_norm_residual = [&](float * y, const float * w, const float * next_norm) {
            blocks::for_rows(p.pool, p.n_rows, [&](int64_t t0, int64_t t1) {
                for (int64_t t = t0; t < t1; ++t) {
                    float * yt = y + t * n_embd;
                    float * xt = p.x + t * n_embd;
                    blocks::rms_norm(yt, w, n_embd, hp.rms_eps, yt);
                    blocks::add(xt, yt, n_embd);
                    if (next_norm) blocks::rms_norm(xt, next_norm, n_embd, hp.rms_eps, ws.cur.data() + t * n_embd);
                }
            });
        };

        blocks::norm_rows(p, lw.attn_norm);
        blocks::project_qkv(p, lw);
        blocks::prepare_qkv(p, lw, q_scale);
        blocks::attention(p, ws.q.data(), ws.attn.data(), {1.0f, n_swa, true});
        kernels::matmul(lw.wo, ws.attn.data(), p.n_rows, ws.cur.data(), p.pool);
        post_norm_residual(ws.cur.data(), lw.attn_post_norm, lw.ffn_norm);
        blocks::ffn(p, lw, blocks::ffn_activation::gelu, ws.cur.data(), ws.attn.data());
        post_norm_residual(ws.attn.data(), lw.ffn_post_norm, nullptr);
    }
};

}  // namespace

const family_i & family_gemma3() {
    static const gemma3_family f;
    return f;
}

}  // namespace skippy
