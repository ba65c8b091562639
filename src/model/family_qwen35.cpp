// qwen35 (Qwen3.5): a hybrid of gated delta-net layers and gated full attention. Layer
// il is full attention when (il + 1) % full_attention_interval == 0, else recurrent.
// Both kinds are pre-norm (attn_norm), and both end in post_attention_norm (the norm
// before the feed-forward network, whatever the name says) and a SwiGLU FFN.
//
// Full attention: attn_q gives per head [query | output gate] (head_dim each); per-head
// RMS norms of q and k; NeoX-paired M-RoPE over rope.dimension_count dimensions, whose
// sections all carry the token position for text, so it rotates exactly as plain NeoX
// RoPE; softmax(q.k / sqrt(head_dim)) V; times sigmoid(gate); attn_output.
//
// Gated delta-net (docs/model.md, "Gated delta-net"), per token t of a sequence:
//   [q | k | v] = SiLU(causal_conv(attn_qkv x))     conv over the last d_conv inputs
//   q, k /= max(|q|, eps) per head (L2; eps = the RMS epsilon); v head h reads q/k head
//   h % n_group (the file orders the v heads so that the groups tile)
//   beta = sigmoid(ssm_beta x); g = ssm_a * softplus(ssm_alpha x + ssm_dt.bias)
//   per v head: S = exp(g) S; S += k (beta (v - S k))^T; o = S q / sqrt(d_state)
//   out = ssm_out (rms_norm(o per head) * ssm_norm * SiLU(attn_gate x))
// S is d_state x d_state per v head, kept per sequence with the conv inputs
// (recurrent_state). Our order of operations (the reference's fused chunked kernels
// use their own): every sequence runs its rows one token at a time, in position
// order, through the same code, so a prompt in one call, in chunks or token by token
// gives the same bits, and one sequence's rows never read another's state. A row
// marked for a capture (a cache checkpoint inside a chunk) has its sequence's state
// copied right after it is folded in, per channel and per head as the loops pass.
#include "model/blocks.h"

#include <cmath>
#include <cstring>

namespace skippy {
namespace {

constexpr int64_t k_max_conv_kernel = 64;
constexpr int64_t k_max_state = 1024;
constexpr int64_t k_max_state_floats = int64_t{1} << 24;  // per layer and sequence (64 MB)

float q35_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float q35_silu(float x) { return x / (1.0f + std::exp(-x)); }
float q35_softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x /= max(|x|, eps), the sum of squares in double.
void l2_normalize(float * x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

float dot(const float * a, const float * b, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

status read_ssm(const metadata_reader & r, model_hparams & hp) {
    ssm_params & s = hp.ssm;
    SKIPPY_TRY(r.count("ssm.conv_kernel", 1, k_max_conv_kernel, s.d_conv, true));
    SKIPPY_TRY(r.count("ssm.state_size", 1, k_max_state, s.d_state, true));
    SKIPPY_TRY(r.count("ssm.group_count", 1, 1 << 12, s.n_group, true));
    SKIPPY_TRY(r.count("ssm.time_step_rank", 1, 1 << 12, s.n_v_head, true));
    SKIPPY_TRY(r.count("ssm.inner_size", 1, 1 << 20, s.d_inner, true));
    if (s.d_inner % s.n_v_head != 0 || s.d_inner / s.n_v_head != s.d_state) {
        return make_error(error_code::invalid_data, "ssm.inner_size (" + std::to_string(s.d_inner) + ") must be ssm.time_step_rank (" +
                                                        std::to_string(s.n_v_head) + ") x ssm.state_size (" +
                                                        std::to_string(s.d_state) + ")");
    }
    if (s.n_v_head % s.n_group != 0) {
        return make_error(error_code::invalid_data, "ssm.group_count (" + std::to_string(s.n_group) +
                                                        ") does not divide ssm.time_step_rank (" + std::to_string(s.n_v_head) + ")");
    }
    // A lane's state is allocated from these alone (before any tensor is read): keep it
    // bounded (real models hold well under a million floats per layer).
    if (static_cast<int64_t>(s.conv_channels()) > (1 << 20) || s.matrix_state_floats() > k_max_state_floats) {
        return make_error(error_code::invalid_data, "ssm sizes are too large (a delta-net state of " +
                                                        std::to_string(s.matrix_state_floats()) + " floats per layer)");
    }
    return status::ok();
}

// rope.dimension_sections: M-RoPE's pairs per position stream (time, height, width,
// extra). Text gives the first three streams the token position; the pairs of an extra
// stream would not rotate, which we do not implement.
status read_sections(const metadata_reader & r, const model_hparams & hp) {
    const std::string key = r.prefix() + "rope.dimension_sections";
    const gguf::value * v = r.file().find(key);
    if (!v) return status::ok();
    const auto * a = v->as_array();
    if (!a || a->empty() || a->size() > 4) return make_error(error_code::invalid_data, "model metadata '" + key + "' must hold up to 4 integers");
    int64_t sum = 0;
    for (size_t i = 0; i < a->size(); ++i) {
        auto n = (*a)[i].as_int(0, hp.rope.n_rot / 2);
        if (!n) return make_error(error_code::invalid_data, "model metadata '" + key + "' holds a section outside [0, n_rot / 2]");
        if (i == 3 && *n != 0) return make_error(error_code::unsupported, "model metadata '" + key + "' has a fourth section, which is not supported");
        sum += *n;
    }
    if (sum == 0) return make_error(error_code::invalid_data, "model metadata '" + key + "' holds no dimensions");
    return status::ok();
}

class qwen35_family final : public family_i {
public:
    status read_hparams(const metadata_reader & r, model_hparams & hp) const override {
        blocks::set_rope_mode(hp, rope_mode::neox);
        SKIPPY_TRY(read_sections(r, hp));
        SKIPPY_TRY(read_ssm(r, hp));
        int32_t interval = 4;  // llama.cpp's default
        SKIPPY_TRY(r.count("full_attention_interval", 1, hp.n_layer, interval, false));
        for (int32_t il = 0; il < hp.n_layer; ++il) {
            hp.layer_kinds[static_cast<size_t>(il)] = (il + 1) % interval == 0 ? layer_kind::attention : layer_kind::recurrent;
        }
        return status::ok();
    }

    status bind_layer(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) const override {
        SKIPPY_ASSIGN_OR_RETURN(lw.attn_norm, b.vector(tensor_role::attn_norm, hp.n_embd, true));
        if (lw.kind == layer_kind::recurrent) {
            const ssm_params & s = hp.ssm;
            SKIPPY_ASSIGN_OR_RETURN(lw.wqkv, b.matrix(tensor_role::attn_qkv, hp.n_embd, s.conv_channels()));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_z, b.matrix(tensor_role::attn_gate, hp.n_embd, s.d_inner));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_conv1d, b.array(tensor_role::ssm_conv1d, s.d_conv, s.conv_channels(), true, "weight"));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_dt, b.vector(tensor_role::ssm_dt, s.n_v_head, true, "bias"));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_a, b.vector(tensor_role::ssm_a, s.n_v_head, true, ""));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_beta, b.matrix(tensor_role::ssm_beta, hp.n_embd, s.n_v_head));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_alpha, b.matrix(tensor_role::ssm_alpha, hp.n_embd, s.n_v_head));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_norm, b.vector(tensor_role::ssm_norm, s.d_state, true));
            SKIPPY_ASSIGN_OR_RETURN(lw.ssm_out, b.matrix(tensor_role::ssm_out, s.d_inner, hp.n_embd));
        } else {
            SKIPPY_ASSIGN_OR_RETURN(lw.wq, b.matrix(tensor_role::attn_q, hp.n_embd, 2 * hp.q_dim()));
            SKIPPY_ASSIGN_OR_RETURN(lw.wk, b.matrix(tensor_role::attn_k, hp.n_embd, hp.kv_dim()));
            SKIPPY_ASSIGN_OR_RETURN(lw.wv, b.matrix(tensor_role::attn_v, hp.n_embd, hp.kv_dim()));
            SKIPPY_ASSIGN_OR_RETURN(lw.wo, b.matrix(tensor_role::attn_output, hp.q_dim(), hp.n_embd));
            SKIPPY_TRY(blocks::bind_qk_norms(b, hp, lw));
        }
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, b.vector(tensor_role::attn_post_norm, hp.n_embd, true));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_gate, b.matrix(tensor_role::ffn_gate, hp.n_embd, hp.n_ff));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_up, b.matrix(tensor_role::ffn_up, hp.n_embd, hp.n_ff));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_down, b.matrix(tensor_role::ffn_down, hp.n_ff, hp.n_embd));
        return status::ok();
    }

    void forward_layer(const layer_pass & p, const layer_weights & lw) const override {
        forward_workspace & ws = p.ws;
        blocks::norm_rows(p, lw.attn_norm);
        if (lw.kind == layer_kind::recurrent) {
            delta_net(p, lw);
        } else {
            gated_attention(p, lw);
        }
        // ws.cur holds the block's output rows [n, n_embd].
        blocks::residual(p, ws.cur.data(), lw.ffn_norm);
        blocks::ffn(p, lw, blocks::ffn_activation::silu, ws.cur.data(), ws.attn.data());
        blocks::residual(p, ws.attn.data(), nullptr);
    }

private:
    static void gated_attention(const layer_pass & p, const layer_weights & lw) {
        const model_hparams & hp = p.hp;
        forward_workspace & ws = p.ws;
        const int64_t n = p.n_rows, q_dim = hp.q_dim(), hd = hp.head_dim;
        ws.qkv.resize(static_cast<size_t>(n * 2 * q_dim));
        ws.ssm_z.resize(static_cast<size_t>(n * q_dim));
        const kernels::matmul_output proj[] = {{lw.wq, ws.qkv.data()}, {lw.wk, ws.k.data()}, {lw.wv, ws.v.data()}};
        kernels::matmul_many(proj, ws.cur.data(), n, p.pool);
        // Per head: [query | gate] -> ws.q and ws.ssm_z.
        blocks::for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                const float * row = ws.qkv.data() + t * 2 * q_dim;
                for (int32_t h = 0; h < hp.n_head; ++h) {
                    std::memcpy(ws.q.data() + t * q_dim + h * hd, row + 2 * h * hd, static_cast<size_t>(hd) * sizeof(float));
                    std::memcpy(ws.ssm_z.data() + t * q_dim + h * hd, row + (2 * h + 1) * hd, static_cast<size_t>(hd) * sizeof(float));
                }
            }
        });
        blocks::prepare_qkv(p, lw, 1.0f);
        blocks::attention(p, ws.q.data(), ws.attn.data(), {1.0f / std::sqrt(static_cast<float>(hd)), 0, true});
        blocks::for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            for (int64_t i = t0 * q_dim; i < t1 * q_dim; ++i) ws.attn[static_cast<size_t>(i)] *= q35_sigmoid(ws.ssm_z[static_cast<size_t>(i)]);
        });
        kernels::matmul(lw.wo, ws.attn.data(), n, ws.cur.data(), p.pool);
    }

    static void delta_net(const layer_pass & p, const layer_weights & lw) {
        const model_hparams & hp = p.hp;
        const ssm_params & s = hp.ssm;
        forward_workspace & ws = p.ws;
        const int64_t n = p.n_rows;
        const int64_t n_ch = s.conv_channels(), k_dim = static_cast<int64_t>(s.n_group) * s.d_state, ds = s.d_state;
        const int64_t n_vh = s.n_v_head, taps = s.d_conv;
        ws.qkv.resize(static_cast<size_t>(n * n_ch));
        ws.ssm_conv.resize(static_cast<size_t>(n * n_ch));
        ws.ssm_z.resize(static_cast<size_t>(n * s.d_inner));
        ws.ssm_beta.resize(static_cast<size_t>(n * n_vh));
        ws.ssm_g.resize(static_cast<size_t>(n * n_vh));
        ws.ssm_out.resize(static_cast<size_t>(n * s.d_inner));
        const kernels::matmul_output proj[] = {{lw.wqkv, ws.qkv.data()},
                                               {lw.ssm_z, ws.ssm_z.data()},
                                               {lw.ssm_beta, ws.ssm_beta.data()},
                                               {lw.ssm_alpha, ws.ssm_g.data()}};
        kernels::matmul_many(proj, ws.cur.data(), n, p.pool);

        // The pass's rows in runs of one sequence each (forward_batch lays a span's rows
        // out consecutively, in position order).
        std::vector<int64_t> run_start;  // n_runs + 1 entries
        for (int64_t t = 0; t < n; ++t) {
            if (t == 0 || p.rows[static_cast<size_t>(t)].recurrent != p.rows[static_cast<size_t>(t - 1)].recurrent) run_start.push_back(t);
        }
        run_start.push_back(n);
        const int64_t n_runs = static_cast<int64_t>(run_start.size()) - 1;
        const int32_t ri = lw.recurrent_index;

        // Causal convolution, per (run, channel), token by token: the window is the
        // d_conv - 1 stored inputs (oldest first) and the token's own; then SiLU.
        blocks::for_rows(p.pool, n_runs * n_ch, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) {
                const int64_t run = j / n_ch, c = j % n_ch;
                recurrent_state & st = *p.rows[static_cast<size_t>(run_start[static_cast<size_t>(run)])].recurrent;
                float * hist = st.conv(ri);  // [d_conv - 1][n_ch]
                const float * w = lw.ssm_conv1d + c * taps;
                for (int64_t t = run_start[static_cast<size_t>(run)]; t < run_start[static_cast<size_t>(run) + 1]; ++t) {
                    const float xin = ws.qkv[static_cast<size_t>(t * n_ch + c)];
                    float sum = 0.0f;
                    for (int64_t k = 0; k < taps - 1; ++k) sum += hist[k * n_ch + c] * w[k];
                    sum += xin * w[taps - 1];
                    for (int64_t k = 0; k + 1 < taps - 1; ++k) hist[k * n_ch + c] = hist[(k + 1) * n_ch + c];
                    if (taps > 1) hist[(taps - 2) * n_ch + c] = xin;
                    ws.ssm_conv[static_cast<size_t>(t * n_ch + c)] = q35_silu(sum);
                    // A checkpoint after this row: its channel's window as it stands now.
                    if (recurrent_state * cap = p.rows[static_cast<size_t>(t)].capture) {
                        float * dst = cap->conv(ri);
                        for (int64_t k = 0; k < taps - 1; ++k) dst[k * n_ch + c] = hist[k * n_ch + c];
                    }
                }
            }
        });

        // Per row: L2 norms of the q and k heads, beta and the decay g per v head.
        blocks::for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float * row = ws.ssm_conv.data() + t * n_ch;
                for (int32_t h = 0; h < 2 * s.n_group; ++h) l2_normalize(row + h * ds, ds, hp.rms_eps);
                for (int64_t h = 0; h < n_vh; ++h) {
                    float & beta = ws.ssm_beta[static_cast<size_t>(t * n_vh + h)];
                    beta = q35_sigmoid(beta);
                    float & g = ws.ssm_g[static_cast<size_t>(t * n_vh + h)];
                    g = q35_softplus(g + lw.ssm_dt[h]) * lw.ssm_a[h];
                }
            }
        });

        // The recurrence, per (run, v head), token by token. Row j of the head's matrix
        // M holds S[.][j] over the k dimension: M[j] . k is (S k)[j].
        const float scale = 1.0f / std::sqrt(static_cast<float>(ds));
        blocks::for_rows(p.pool, n_runs * n_vh, [&](int64_t j0, int64_t j1) {
            std::vector<float> delta(static_cast<size_t>(ds));
            for (int64_t j = j0; j < j1; ++j) {
                const int64_t run = j / n_vh, h = j % n_vh, hk = h % s.n_group;
                recurrent_state & st = *p.rows[static_cast<size_t>(run_start[static_cast<size_t>(run)])].recurrent;
                float * m = st.matrix(ri) + h * ds * ds;
                for (int64_t t = run_start[static_cast<size_t>(run)]; t < run_start[static_cast<size_t>(run) + 1]; ++t) {
                    const float * row = ws.ssm_conv.data() + t * n_ch;
                    const float * q = row + hk * ds;
                    const float * k = row + k_dim + hk * ds;
                    const float * v = row + 2 * k_dim + h * ds;
                    const float beta = ws.ssm_beta[static_cast<size_t>(t * n_vh + h)];
                    const float decay = std::exp(ws.ssm_g[static_cast<size_t>(t * n_vh + h)]);
                    for (int64_t i = 0; i < ds * ds; ++i) m[i] *= decay;
                    for (int64_t r = 0; r < ds; ++r) delta[static_cast<size_t>(r)] = (v[r] - dot(m + r * ds, k, ds)) * beta;
                    for (int64_t r = 0; r < ds; ++r) {
                        float * mr = m + r * ds;
                        const float d = delta[static_cast<size_t>(r)];
                        for (int64_t i = 0; i < ds; ++i) mr[i] += k[i] * d;
                    }
                    float * o = ws.ssm_out.data() + t * s.d_inner + h * ds;
                    for (int64_t r = 0; r < ds; ++r) o[r] = dot(m + r * ds, q, ds) * scale;
                    if (recurrent_state * cap = p.rows[static_cast<size_t>(t)].capture) {
                        std::memcpy(cap->matrix(ri) + h * ds * ds, m, static_cast<size_t>(ds * ds) * sizeof(float));
                    }
                }
            }
        });

        // Gated RMS norm per v head, then the output projection into ws.cur.
        blocks::for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float * o = ws.ssm_out.data() + t * s.d_inner;
                const float * z = ws.ssm_z.data() + t * s.d_inner;
                for (int64_t h = 0; h < n_vh; ++h) blocks::rms_norm(o + h * ds, lw.ssm_norm, ds, hp.rms_eps, o + h * ds);
                for (int64_t i = 0; i < s.d_inner; ++i) o[i] *= q35_silu(z[i]);
            }
        });
        kernels::matmul(lw.ssm_out, ws.ssm_out.data(), n, ws.cur.data(), p.pool);
    }
};

}  // namespace

const family_i & family_qwen35() {
    static const qwen35_family f;
    return f;
}

}  // namespace skippy
