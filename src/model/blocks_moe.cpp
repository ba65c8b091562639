// The mixture-of-experts feed-forward network (blocks.h, moe_ffn) and its metadata and
// tensors.
#include "model/blocks.h"
#include "model/router_probe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace skippy::blocks {
namespace {

// Bounds well above any real model (Qwen3-235B: 128 experts, 8 used).
constexpr int64_t k_max_experts = 1 << 12;

// ggml clamps the sum of the weights to the smallest normal f16 before dividing by it.
constexpr float k_min_weight_sum = 6.103515625e-5f;

// The k largest of v[0, n) in order, ties to the lower index; a NaN is never larger than
// anything, so the choice stays deterministic whatever the values.
void top_k(const float * v, int32_t n, int32_t k, int32_t * out) {
    for (int32_t j = 0; j < k; ++j) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; ++e) {
            if (std::find(out, out + j, e) != out + j) continue;
            if (best < 0 || v[e] > v[best]) best = e;
        }
        out[j] = best;
    }
}

// v[i] = exp(v[i] - max) / sum over n values, the sum in double and the division as a
// multiplication by its float inverse (ggml's soft_max).
void softmax(float * v, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    kernels::exp_shifted(v, mx, v, n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

std::atomic<router_probe_i *> g_router_probe{nullptr};

// Row t's experts (ranks 0..k-1) and their weights from its router logits (the bias
// already added).
void route_row(const moe_params & m, float * logits, int32_t * experts, float * weights) {
    const int32_t n = m.n_expert, k = m.n_expert_used;
    if (m.gating == expert_gating::softmax) {
        softmax(logits, n);
        top_k(logits, n, k, experts);
        for (int32_t j = 0; j < k; ++j) weights[j] = logits[experts[j]];
    } else {
        top_k(logits, n, k, experts);
        for (int32_t j = 0; j < k; ++j) weights[j] = logits[experts[j]];
        softmax(weights, k);
    }
    if (m.norm_weights) {
        double sum = 0;
        for (int32_t j = 0; j < k; ++j) sum += static_cast<double>(weights[j]);
        const float s = std::max(static_cast<float>(sum), k_min_weight_sum);
        for (int32_t j = 0; j < k; ++j) weights[j] = weights[j] / s;
    }
    if (m.weights_scale != 0.0f && m.weights_scale != 1.0f) {
        for (int32_t j = 0; j < k; ++j) weights[j] *= m.weights_scale;
    }
}

template <typename T>
T * grow(std::vector<T> & v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

}  // namespace

void set_router_probe(router_probe_i * probe) { g_router_probe.store(probe, std::memory_order_release); }

void moe_ffn(const layer_pass & p, const layer_weights & lw, expert_activation act, const float * in, float * out) {
    const moe_params & m = p.hp.moe;
    const moe_weights & mw = lw.moe;
    forward_workspace & ws = p.ws;
    const int64_t n = p.n_rows, n_embd = p.hp.n_embd, n_ff = m.n_ff_exp;
    const int32_t n_expert = m.n_expert, k = m.n_expert_used;
    const size_t n_slots = static_cast<size_t>(n) * static_cast<size_t>(k);

    // Routing: each row's logits, experts and weights, from that row alone.
    float * logits = grow(ws.moe_logits, static_cast<size_t>(n * n_expert));
    int32_t * experts = grow(ws.moe_experts, n_slots);
    float * weights = grow(ws.moe_weights, n_slots);
    kernels::matmul(mw.router, in, n, logits, p.pool);
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
        router_probe_i * probe = g_router_probe.load(std::memory_order_acquire);
        for (int64_t t = t0; t < t1; ++t) {
            float * row_logits = logits + t * n_expert;
            if (mw.router_bias) {
                for (int32_t e = 0; e < n_expert; ++e) row_logits[e] += mw.router_bias[e];
            }
            if (probe) probe->on_route(p.il, t, row_logits, n_expert, k);
            route_row(m, row_logits, experts + t * k, weights + t * k);
        }
    });

    // Slots grouped by expert: expert e's rows are slots [first[e], first[e + 1]), in
    // row order; slot_of[t * k + j] is row t's rank-j slot.
    int32_t * first = grow(ws.moe_count, static_cast<size_t>(n_expert) + 1);
    int32_t * slot_of = grow(ws.moe_slot, n_slots);
    std::fill(first, first + n_expert + 1, 0);
    for (size_t s = 0; s < n_slots; ++s) ++first[experts[s] + 1];
    for (int32_t e = 0; e < n_expert; ++e) first[e + 1] += first[e];
    {
        thread_local std::vector<int32_t> fill;
        fill.assign(first, first + n_expert);
        for (size_t s = 0; s < n_slots; ++s) slot_of[s] = fill[static_cast<size_t>(experts[s])]++;
    }
    float * x_in = grow(ws.moe_in, n_slots * static_cast<size_t>(n_embd));
    float * gate = grow(ws.moe_gate, n_slots * static_cast<size_t>(n_ff));
    float * up = grow(ws.moe_up, n_slots * static_cast<size_t>(n_ff));
    float * down = grow(ws.moe_down, n_slots * static_cast<size_t>(n_embd));
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            for (int32_t j = 0; j < k; ++j) {
                std::memcpy(x_in + static_cast<int64_t>(slot_of[t * k + j]) * n_embd, in + t * n_embd, static_cast<size_t>(n_embd) * sizeof(float));
            }
        }
    });

    // Each selected expert once over its rows: gate and up of all of them in one job,
    // then down.
    thread_local std::vector<kernels::matmul_job> jobs;
    jobs.clear();
    for (int32_t e = 0; e < n_expert; ++e) {
        const int64_t s0 = first[e], count = first[e + 1] - first[e];
        if (count == 0) continue;
        jobs.push_back({mw.gate.of(e), x_in + s0 * n_embd, count, gate + s0 * n_ff});
        jobs.push_back({mw.up.of(e), x_in + s0 * n_embd, count, up + s0 * n_ff});
    }
    kernels::matmul_grouped(jobs, p.pool);
    // By row, so that decode's single row runs inline.
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
        for (int64_t rs = t0 * k; rs < t1 * k; ++rs) {
            const int64_t s = slot_of[rs];
            float * g = gate + s * n_ff;
            float * u = up + s * n_ff;
            if (mw.gate_bias) {
                const int64_t e = experts[rs];
                for (int64_t i = 0; i < n_ff; ++i) g[i] += mw.gate_bias[e * n_ff + i];
                for (int64_t i = 0; i < n_ff; ++i) u[i] += mw.up_bias[e * n_ff + i];
            }
            act(g, u, g, n_ff);
        }
    });
    jobs.clear();
    for (int32_t e = 0; e < n_expert; ++e) {
        const int64_t s0 = first[e], count = first[e + 1] - first[e];
        if (count == 0) continue;
        jobs.push_back({mw.down.of(e), gate + s0 * n_ff, count, down + s0 * n_embd});
    }
    kernels::matmul_grouped(jobs, p.pool);

    // out[t] = w_0 d_0 + w_1 d_1 + ... in rank order (each product rounded, then added).
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float * o = out + t * n_embd;
            for (int32_t j = 0; j < k; ++j) {
                const int64_t s = slot_of[t * k + j];
                const float * d = down + s * n_embd;
                const float * b = mw.down_bias ? mw.down_bias + static_cast<int64_t>(experts[t * k + j]) * n_embd : nullptr;
                const float w = weights[t * k + j];
                for (int64_t i = 0; i < n_embd; ++i) {
                    const float di = b ? d[i] + b[i] : d[i];
                    o[i] = j == 0 ? di * w : o[i] + di * w;
                }
            }
        }
    });

    if (!mw.shexp_up.data) return;
    // The shared expert on every row, times sigmoid(shexp_gate_inp . in) when present.
    const int64_t n_sh = mw.shexp_up.n_rows;
    float * sh_gate = grow(ws.gate, static_cast<size_t>(n * n_sh));
    float * sh_up = grow(ws.up, static_cast<size_t>(n * n_sh));
    const kernels::matmul_output gate_up[] = {{mw.shexp_gate, sh_gate}, {mw.shexp_up, sh_up}};
    kernels::matmul_many(gate_up, in, n, p.pool);
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) { kernels::swiglu(sh_gate + t0 * n_sh, sh_up + t0 * n_sh, sh_gate + t0 * n_sh, (t1 - t0) * n_sh); });
    float * sh_out = x_in;  // the experts' inputs are no longer needed
    kernels::matmul(mw.shexp_down, sh_gate, n, sh_out, p.pool);
    if (mw.shexp_gate_inp.data) kernels::matmul(mw.shexp_gate_inp, in, n, logits, p.pool);
    for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float g = 1.0f;
            if (mw.shexp_gate_inp.data) {
                const float neg = -logits[t];
                float e = 0;
                kernels::exp_shifted(&neg, 0.0f, &e, 1);
                g = 1.0f / (1.0f + e);
            }
            float * o = out + t * n_embd;
            const float * sh = sh_out + t * n_embd;
            for (int64_t i = 0; i < n_embd; ++i) o[i] = o[i] + (mw.shexp_gate_inp.data ? sh[i] * g : sh[i]);
        }
    });
}

status read_moe_hparams(const metadata_reader & r, model_hparams & hp, expert_gating gating, bool norm_default) {
    moe_params & m = hp.moe;
    SKIPPY_TRY(r.count("expert_count", 1, k_max_experts, m.n_expert, true));
    SKIPPY_TRY(r.count("expert_used_count", 1, k_max_experts, m.n_expert_used, true));
    if (m.n_expert_used > m.n_expert) {
        return make_error(error_code::invalid_data, "model metadata '" + r.prefix() + "expert_used_count' (" +
                                                        std::to_string(m.n_expert_used) + ") is larger than '" + r.prefix() +
                                                        "expert_count' (" + std::to_string(m.n_expert) + ")");
    }
    m.n_ff_exp = std::max(1, hp.n_ff / m.n_expert_used);  // llama.cpp's default without the key
    SKIPPY_TRY(r.count("expert_feed_forward_length", 1, 1 << 20, m.n_ff_exp, false));
    m.n_ff_shexp = m.n_ff_exp;
    SKIPPY_TRY(r.count("expert_shared_feed_forward_length", 1, 1 << 20, m.n_ff_shexp, false));
    m.gating = gating;
    m.norm_weights = norm_default;
    if (const gguf::value * v = r.file().find(r.prefix() + "expert_weights_norm")) {
        const auto b = v->as_bool();
        if (!b) return make_error(error_code::invalid_data, "model metadata '" + r.prefix() + "expert_weights_norm' must be a bool");
        m.norm_weights = *b;
    }
    SKIPPY_TRY(r.real("expert_weights_scale", m.weights_scale));
    return status::ok();
}

status bind_moe(const tensor_binder & b, const model_hparams & hp, layer_weights & lw, bool with_biases) {
    const moe_params & m = hp.moe;
    moe_weights & mw = lw.moe;
    SKIPPY_ASSIGN_OR_RETURN(mw.router, b.matrix(tensor_role::ffn_gate_inp, hp.n_embd, m.n_expert));
    SKIPPY_ASSIGN_OR_RETURN(mw.gate, b.experts(tensor_role::ffn_gate_exps, hp.n_embd, m.n_ff_exp, m.n_expert));
    SKIPPY_ASSIGN_OR_RETURN(mw.up, b.experts(tensor_role::ffn_up_exps, hp.n_embd, m.n_ff_exp, m.n_expert));
    SKIPPY_ASSIGN_OR_RETURN(mw.down, b.experts(tensor_role::ffn_down_exps, m.n_ff_exp, hp.n_embd, m.n_expert));
    if (with_biases) {
        SKIPPY_ASSIGN_OR_RETURN(mw.router_bias, b.vector(tensor_role::ffn_gate_inp, m.n_expert, true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(mw.gate_bias, b.array(tensor_role::ffn_gate_exps, m.n_ff_exp, m.n_expert, true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(mw.up_bias, b.array(tensor_role::ffn_up_exps, m.n_ff_exp, m.n_expert, true, "bias"));
        SKIPPY_ASSIGN_OR_RETURN(mw.down_bias, b.array(tensor_role::ffn_down_exps, hp.n_embd, m.n_expert, true, "bias"));
    }
    if (!b.has(tensor_role::ffn_up_shexp)) return status::ok();
    SKIPPY_ASSIGN_OR_RETURN(mw.shexp_gate, b.matrix(tensor_role::ffn_gate_shexp, hp.n_embd, m.n_ff_shexp));
    SKIPPY_ASSIGN_OR_RETURN(mw.shexp_up, b.matrix(tensor_role::ffn_up_shexp, hp.n_embd, m.n_ff_shexp));
    SKIPPY_ASSIGN_OR_RETURN(mw.shexp_down, b.matrix(tensor_role::ffn_down_shexp, m.n_ff_shexp, hp.n_embd));
    if (b.has(tensor_role::ffn_gate_inp_shexp)) {
        SKIPPY_ASSIGN_OR_RETURN(const float * g, b.vector(tensor_role::ffn_gate_inp_shexp, hp.n_embd, true));
        mw.shexp_gate_inp = kernels::matrix_view{tensor_type::f32, reinterpret_cast<const uint8_t *>(g), hp.n_embd, 1};
    }
    return status::ok();
}

}  // namespace skippy::blocks
