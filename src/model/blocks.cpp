#include "model/blocks.h"

#include "base/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace skippy::blocks {

void for_rows(kernels::thread_pool * pool, int64_t n_rows, const std::function<void(int64_t, int64_t)> & fn) {
    const int64_t n_threads = pool ? pool->n_threads() : 1;
    const int64_t n_chunks = std::min<int64_t>(n_rows, n_threads == 1 ? 1 : 4 * n_threads);
    if (n_chunks <= 1) {
        fn(0, n_rows);
        return;
    }
    const int64_t per_chunk = (n_rows + n_chunks - 1) / n_chunks;
    pool->parallel_for(n_chunks, [&](int64_t c) {
        const int64_t t0 = c * per_chunk;
        const int64_t t1 = std::min(n_rows, t0 + per_chunk);
        if (t0 < t1) fn(t0, t1);
    });
}

void rms_norm(const float * x, const float * w, int64_t n, float eps, float * y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void rms_norm_heads(float * row, const float * w, int32_t n_heads, int32_t head_dim, float eps) {
    for (int32_t h = 0; h < n_heads; ++h) rms_norm(row + h * head_dim, w, head_dim, eps, row + h * head_dim);
}

void add(float * x, const float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void prepare_rope(rope_variant & v) {
    const rope_params & r = v.params;
    v.mscale = r.attn_factor;
    if (r.ext_factor != 0.0f) {
        // The pair where the angle completes `beta` rotations over n_ctx_orig positions:
        // pairs below corr_low keep the extrapolated angle, above corr_high the
        // interpolated one (ggml's rope_yarn_corr_dims).
        const auto corr_dim = [&](float beta) {
            return static_cast<float>(r.n_rot) *
                   std::log(static_cast<float>(r.n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
                   (2.0f * std::log(r.freq_base));
        };
        v.corr_low = std::max(0.0f, std::floor(corr_dim(r.beta_fast)));
        v.corr_high = std::min(static_cast<float>(r.n_rot - 1), std::ceil(corr_dim(r.beta_slow)));
        v.mscale = r.attn_factor * (1.0f + 0.1f * std::log(1.0f / r.freq_scale));
    }
}

void rope_angles(const rope_variant & v, int64_t pos, float * cos_out, float * sin_out) {
    const rope_params & r = v.params;
    const float theta_scale = std::pow(r.freq_base, -2.0f / static_cast<float>(r.n_rot));
    float theta = static_cast<float>(pos);
    for (int32_t i = 0; i < r.n_rot / 2; ++i) {
        const float extrap = v.freq_factors ? theta / v.freq_factors[i] : theta;
        float t = r.freq_scale * extrap;
        if (r.ext_factor != 0.0f) {
            const float y = (static_cast<float>(i) - v.corr_low) / std::max(0.001f, v.corr_high - v.corr_low);
            const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * r.ext_factor;
            t = t * (1.0f - ramp) + extrap * ramp;
        }
        cos_out[i] = std::cos(t);
        sin_out[i] = std::sin(t);
        if (v.mscale != 1.0f) {
            cos_out[i] *= v.mscale;
            sin_out[i] *= v.mscale;
        }
        theta *= theta_scale;
    }
}

void rope_row(const layer_pass & p, int64_t t, float * row, int32_t n_heads) {
    const rope_params & r = *p.rope.params;
    const int32_t half = r.n_rot / 2;
    const float * c = p.rope.cos + t * p.rope.half;
    const float * s = p.rope.sin + t * p.rope.half;
    for (int32_t h = 0; h < n_heads; ++h) {
        float * head = row + static_cast<int64_t>(h) * p.hp.head_dim;
        for (int32_t i = 0; i < half; ++i) {
            const int32_t a = r.mode == rope_mode::normal ? 2 * i : i;
            const int32_t b = r.mode == rope_mode::normal ? 2 * i + 1 : i + half;
            const float x0 = head[a];
            const float x1 = head[b];
            head[a] = x0 * c[i] - x1 * s[i];
            head[b] = x0 * s[i] + x1 * c[i];
        }
    }
}

namespace {

void store_row(uint8_t * row, const float * src, int64_t n, kv_dtype dt) {
    if (dt == kv_dtype::f16) {
        for (int64_t i = 0; i < n; ++i) {
            const f16_bits h = f32_to_f16(src[i]);
            std::memcpy(row + 2 * i, &h, 2);
        }
    } else {
        std::memcpy(row, src, static_cast<size_t>(n) * 4);
    }
}

void run_tasks(kernels::thread_pool * pool, int64_t n, const std::function<void(int64_t)> & fn) {
    if (pool && n > 1) {
        pool->parallel_for(n, fn);
    } else {
        for (int64_t i = 0; i < n; ++i) fn(i);
    }
}

// The keys [first_key, pos] of one KV head and n_heads consecutive query heads (the
// queries already in the KV element type), writing out[g * hd ...] for each head g.
struct head_group {
    const kv_sequence & kv;
    int32_t             il, hk;
    int64_t             first_key, pos;
    int32_t             bt;
    tensor_type         kv_type;
    size_t              row_bytes_kv, q_row_bytes;
    const uint8_t *     q_rows;
    int32_t             n_heads, hd;
    float               kq_scale;
    const float *       sinks;  // per query head of the group, or null
    float *             out;

    // Keys [j0, j0 + n_keys) of KV block b are the group's.
    void keys_of_block(int64_t b, int32_t & j0, int32_t & n_keys) const {
        j0 = static_cast<int32_t>(std::max<int64_t>(0, first_key - b * bt));
        n_keys = static_cast<int32_t>(std::min<int64_t>(bt, pos + 1 - b * bt)) - j0;
    }
    const uint8_t * k_rows(int64_t b, int32_t j0) const {
        return kv.pool().k_rows(kv.blocks()[static_cast<size_t>(b)], il) + static_cast<size_t>(j0) * row_bytes_kv +
               static_cast<size_t>(hk) * q_row_bytes;
    }
    const uint8_t * v_rows(int64_t b, int32_t j0) const {
        return kv.pool().v_rows(kv.blocks()[static_cast<size_t>(b)], il) + static_cast<size_t>(j0) * row_bytes_kv +
               static_cast<size_t>(hk) * q_row_bytes;
    }
    // Asks for the group's K and/or V rows of block b (when it is one of the group's),
    // so that they arrive while the block before it is worked on: a block's rows are
    // short strided runs in a pool block far from the previous one, which the hardware
    // prefetchers do not follow. Into L2 (locality 2), not L1: a block's K and V rows are
    // up to 64 lines asked for at once, more than L1 has fill buffers, as with the
    // weights (kernels' prefetch_span). Always inlined: GCC took this function, whose
    // only effect is prefetches, for one without side effects and deleted the calls
    // (kernels' avx512_util.h says more), so the builds before 2026-12-07 fetched nothing.
    // Measured at a 4,096-token context (bench -t 2 --prompt-tokens 4096 --gen-tokens
    // 256, 3 interleaved runs), decode tok/s: none 64.3 / 57.6 / 67.0; into L1 79.9 /
    // 77.1 / 74.7; into L2 97.8 / 96.0 / 102.5 (prefill 309-333 -> 362-366 tok/s).
    [[gnu::always_inline]] void prefetch_block(int64_t b, bool keys, bool values) const {
        if (b > pos / bt) return;
        int32_t j0 = 0, n_keys = 0;
        keys_of_block(b, j0, n_keys);
        const uint8_t * k = keys ? k_rows(b, j0) : nullptr;
        const uint8_t * v = values ? v_rows(b, j0) : nullptr;
        for (int32_t j = 0; j < n_keys; ++j) {
            for (size_t off = 0; off < q_row_bytes; off += 64) {
                if (k) __builtin_prefetch(k + static_cast<size_t>(j) * row_bytes_kv + off, 0, 2);
                if (v) __builtin_prefetch(v + static_cast<size_t>(j) * row_bytes_kv + off, 0, 2);
            }
        }
    }
};

// sums[g] += w[g * stride + j] for j in [0, n_keys), one add at a time in key order (the
// reference's order) for each head g < n_heads. The heads' chains are independent, so
// four run side by side: one chain alone waits out each add's latency (it was 40% of
// the attention lambda's own time at a 3,000-token context).
void add_weights_in_key_order(const float * w, int64_t stride, int32_t n_heads, int32_t n_keys, float * sums) {
    for (int32_t g0 = 0; g0 < n_heads; g0 += 4) {
        const int32_t m = std::min(4, n_heads - g0);
        // Heads past n_heads repeat head g0 into a sum that is dropped.
        const float * r0 = w + static_cast<int64_t>(g0) * stride;
        const float * r1 = m > 1 ? r0 + stride : r0;
        const float * r2 = m > 2 ? r0 + 2 * stride : r0;
        const float * r3 = m > 3 ? r0 + 3 * stride : r0;
        float s0 = sums[g0], s1 = m > 1 ? sums[g0 + 1] : 0.0f, s2 = m > 2 ? sums[g0 + 2] : 0.0f, s3 = m > 3 ? sums[g0 + 3] : 0.0f;
        for (int32_t j = 0; j < n_keys; ++j) {
            s0 += r0[j];
            s1 += r1[j];
            s2 += r2[j];
            s3 += r3[j];
        }
        sums[g0] = s0;
        if (m > 1) sums[g0 + 1] = s1;
        if (m > 2) sums[g0 + 2] = s2;
        if (m > 3) sums[g0 + 3] = s3;
    }
}

// One pass with an online softmax: per block, running max and sum, acc rescaled.
void attend_online(const head_group & h) {
    const size_t g_hd = static_cast<size_t>(h.n_heads) * static_cast<size_t>(h.hd);
    thread_local std::vector<float> acc, scores, running_max, running_sum;  // grow once
    acc.assign(g_hd, 0.0f);
    scores.resize(static_cast<size_t>(h.n_heads) * static_cast<size_t>(h.bt));
    running_max.assign(static_cast<size_t>(h.n_heads), -INFINITY);
    running_sum.assign(static_cast<size_t>(h.n_heads), 0.0f);
    if (h.sinks) {  // the sink as a first key of weight exp(0) and no value
        for (int32_t g = 0; g < h.n_heads; ++g) {
            running_max[static_cast<size_t>(g)] = h.sinks[g];
            running_sum[static_cast<size_t>(g)] = 1.0f;
        }
    }
    for (int64_t b = h.first_key / h.bt; b <= h.pos / h.bt; ++b) {
        int32_t j0 = 0, n_keys = 0;
        h.keys_of_block(b, j0, n_keys);
        h.prefetch_block(b + 1, true, true);
        const uint8_t * vbase = h.v_rows(b, j0);
        // scores[g * bt + j] = q_g . k_j
        kernels::dot_rows(h.kv_type, h.k_rows(b, j0), h.row_bytes_kv, n_keys, h.q_rows, h.q_row_bytes, h.n_heads, h.hd, scores.data(), h.bt);
        for (int32_t g = 0; g < h.n_heads; ++g) {
            float * sg = scores.data() + static_cast<size_t>(g) * static_cast<size_t>(h.bt);
            float * ag = acc.data() + static_cast<size_t>(g) * static_cast<size_t>(h.hd);
            float block_max = -INFINITY;
            for (int32_t j = 0; j < n_keys; ++j) {
                sg[j] = sg[j] * h.kq_scale;
                block_max = std::max(block_max, sg[j]);
            }
            const float old_max = running_max[static_cast<size_t>(g)];
            const float new_max = std::max(old_max, block_max);
            // exp(old_max - new_max): exp(-inf) = 0 on the first block. Once the maximum
            // settles it is exp(+0), which is exactly 1 (kernels.h pins it), so the call
            // is skipped; and x * 1 == x, so is the rescale. In locals: through the
            // vectors, every step would wait on a store and a load.
            float c = 1.0f;
            if (!(old_max == new_max && std::isfinite(new_max))) kernels::exp_shifted(&old_max, new_max, &c, 1);
            running_sum[static_cast<size_t>(g)] *= c;
            if (c != 1.0f) {
                for (int32_t i = 0; i < h.hd; ++i) ag[i] *= c;
            }
            running_max[static_cast<size_t>(g)] = new_max;
        }
        // The keys' weights w_j, every head's at once (each head's alone is one short
        // dependent chain).
        kernels::exp_shifted_rows(scores.data(), h.bt, running_max.data(), h.n_heads, scores.data(), h.bt, n_keys);
        add_weights_in_key_order(scores.data(), h.bt, h.n_heads, n_keys, running_sum.data());
        // acc[i] = acc[i] + w_j * v_j[i] for j in order, each head; the values read once.
        kernels::add_scaled_rows_heads(h.kv_type, scores.data(), h.bt, h.n_heads, vbase, h.row_bytes_kv, n_keys, acc.data(), h.hd,
                                       h.hd);
    }
    for (int32_t g = 0; g < h.n_heads; ++g) {
        float * o = h.out + static_cast<int64_t>(g) * h.hd;
        const float * ag = acc.data() + static_cast<size_t>(g) * static_cast<size_t>(h.hd);
        const float inv = 1.0f / running_sum[static_cast<size_t>(g)];
        for (int32_t i = 0; i < h.hd; ++i) o[i] = ag[i] * inv;
    }
}

// Two passes, as llama.cpp's non-flash path: the scores of every key (kept), their
// maximum, sum = the sum of exp(s - max) in double, then acc[i] = acc[i] + p_j * v_j[i]
// key by key with p_j = exp(s_j - max) * (1 / sum), rounded to f16 with an f16 KV.
void attend_two_pass(const head_group & h) {
    const int64_t n_keys_total = h.pos + 1 - h.first_key;
    thread_local std::vector<float> scores, probs;  // grow once
    scores.resize(static_cast<size_t>(h.n_heads) * static_cast<size_t>(n_keys_total));
    probs.resize(static_cast<size_t>(n_keys_total));
    for (int64_t b = h.first_key / h.bt, k0 = 0; b <= h.pos / h.bt; ++b) {
        int32_t j0 = 0, n_keys = 0;
        h.keys_of_block(b, j0, n_keys);
        h.prefetch_block(b + 1, true, false);
        kernels::dot_rows(h.kv_type, h.k_rows(b, j0), h.row_bytes_kv, n_keys, h.q_rows, h.q_row_bytes, h.n_heads, h.hd,
                          scores.data() + k0, n_keys_total);
        k0 += n_keys;
    }
    for (int32_t g = 0; g < h.n_heads; ++g) {
        float * sg = scores.data() + static_cast<size_t>(g) * static_cast<size_t>(n_keys_total);
        float mx = -INFINITY;
        for (int64_t j = 0; j < n_keys_total; ++j) {
            sg[j] = sg[j] * h.kq_scale;
            mx = std::max(mx, sg[j]);
        }
        if (h.sinks) mx = std::max(mx, h.sinks[g]);
        kernels::exp_shifted(sg, mx, sg, n_keys_total);
        double sum = 0;
        for (int64_t j = 0; j < n_keys_total; ++j) sum += static_cast<double>(sg[j]);
        if (h.sinks) {  // ggml's soft_max with sinks: exp(sink - max) joins the sum only
            float e = 0;
            kernels::exp_shifted(&h.sinks[g], mx, &e, 1);
            sum += static_cast<double>(e);
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n_keys_total; ++j) {
            const float pj = sg[j] * inv;
            probs[static_cast<size_t>(j)] = h.kv_type == tensor_type::f16 ? f16_to_f32(f32_to_f16(pj)) : pj;
        }
        float * o = h.out + static_cast<int64_t>(g) * h.hd;
        std::fill(o, o + h.hd, 0.0f);
        for (int64_t b = h.first_key / h.bt, k0 = 0; b <= h.pos / h.bt; ++b) {
            int32_t j0 = 0, n_keys = 0;
            h.keys_of_block(b, j0, n_keys);
            h.prefetch_block(b + 1, false, true);
            kernels::add_scaled_rows(h.kv_type, probs.data() + k0, h.v_rows(b, j0), h.row_bytes_kv, n_keys, o, h.hd);
            k0 += n_keys;
        }
    }
}

}  // namespace

void store_kv(const layer_pass & p, int64_t t, const float * k, const float * v) {
    const forward_workspace::row_ref & r = p.rows[static_cast<size_t>(t)];
    const kv_dtype dt = r.kv->pool().geometry().dtype;
    store_row(r.kv->k_row(p.il, r.pos), k, p.hp.kv_dim(), dt);
    store_row(r.kv->v_row(p.il, r.pos), v, p.hp.kv_dim(), dt);
}

// One task per (row, KV head) serves the query heads that share the KV head
// (grouped-query attention), so each K block is read once for all of them; when that
// gives too few tasks for the threads (decode with few KV heads), the heads of a group
// are split over several tasks. Per head: the query is converted once to the KV element
// type (with an f16 KV it is rounded to f16, as the reference converts it to the K
// type); each score is the kernels' F16 / F32 dot product (kernels::dot_rows: eight
// partial sums, fixed combination); then, for each key in order, running_sum += w, and
// acc[i] = acc[i] + w * v[i] (rounded product, rounded sum;
// kernels::add_scaled_rows_heads, which reads the values once for the task's heads).
// Which heads share a task, and which other rows or sequences share the pass, change no
// operation. A sliding window only moves the first key: the blocks stay aligned to
// absolute positions, so a row's result depends on its position and the stored K/V
// alone (a restored prefix gives the bits of a cold run).
void attention(const layer_pass & p, const float * q, float * out, const attention_params & a) {
    const model_hparams & hp = p.hp;
    if (p.n_rows <= 0) return;
    const int32_t hd = hp.head_dim;
    const int32_t group = hp.n_head / hp.n_head_kv;
    const kv_geometry & geo = p.rows[0].kv->pool().geometry();  // the same for every row (forward_batch checks)
    const tensor_type kv_type = geo.dtype == kv_dtype::f16 ? tensor_type::f16 : tensor_type::f32;

    // Tasks per (row, KV head): 1, or more when the threads would otherwise idle.
    const int64_t n_threads = p.pool ? p.pool->n_threads() : 1;
    int32_t n_splits = 1;
    while (p.n_rows * hp.n_head_kv * n_splits < 2 * n_threads && group % (2 * n_splits) == 0) n_splits *= 2;
    const int32_t heads_per_task = group / n_splits;

    run_tasks(p.pool, p.n_rows * hp.n_head_kv * n_splits, [&](int64_t task) {
        const int64_t t = task / (hp.n_head_kv * n_splits);
        const int32_t hk = static_cast<int32_t>(task / n_splits % hp.n_head_kv);
        const int32_t h0 = hk * group + static_cast<int32_t>(task % n_splits) * heads_per_task;  // first query head
        const forward_workspace::row_ref & row = p.rows[static_cast<size_t>(t)];
        const size_t g_hd = static_cast<size_t>(heads_per_task) * static_cast<size_t>(hd);

        // The task's query heads are consecutive in q.
        const float * q_group = q + t * hp.q_dim() + static_cast<int64_t>(h0) * hd;
        const uint8_t * q_rows = reinterpret_cast<const uint8_t *>(q_group);
        thread_local std::vector<uint8_t> qx;  // grows once
        if (kv_type == tensor_type::f16) {
            qx.resize(g_hd * 2);
            kernels::quantize_row(tensor_type::f16, q_group, qx.data(), static_cast<int64_t>(g_hd));
            q_rows = qx.data();
        }
        const head_group h{*row.kv,
                           p.il,
                           hk,
                           a.n_swa > 0 ? std::max<int64_t>(0, row.pos - a.n_swa + 1) : 0,
                           row.pos,
                           geo.block_tokens,
                           kv_type,
                           geo.row_bytes(),
                           static_cast<size_t>(hd) * geo.elem_bytes(),
                           q_rows,
                           heads_per_task,
                           hd,
                           a.kq_scale,
                           a.sinks ? a.sinks + h0 : nullptr,
                           out + t * hp.q_dim() + static_cast<int64_t>(h0) * hd};
        if (a.f16_probabilities) {
            attend_two_pass(h);
        } else {
            attend_online(h);
        }
    });
}

void ffn(const layer_pass & p, const layer_weights & lw, ffn_activation act, const float * in, float * out) {
    const int64_t n_ff = p.hp.n_ff;
    const int64_t n = p.n_rows;
    forward_workspace & ws = p.ws;
    const auto activate = [act](const float * g, const float * u, float * o, int64_t count) {
        if (act == ffn_activation::silu) {
            kernels::swiglu(g, u, o, count);
        } else {
            kernels::gelu_gated(g, u, o, count);
        }
    };
    const float * hidden = nullptr;  // [n, n_ff] activations into ffn_down
    if (lw.ffn_gate.data) {
        const kernels::matmul_output gate_up[] = {{lw.ffn_gate, ws.gate.data()}, {lw.ffn_up, ws.up.data()}};
        kernels::matmul_many(gate_up, in, n, p.pool);
        for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            float * g = ws.gate.data() + t0 * n_ff;
            activate(g, ws.up.data() + t0 * n_ff, g, (t1 - t0) * n_ff);
        });
        hidden = ws.gate.data();
    } else {
        // One product of the fused tensor: row t holds gate[n_ff] then up[n_ff].
        ws.gate.resize(static_cast<size_t>(n * 2 * n_ff));
        kernels::matmul(lw.ffn_up, in, n, ws.gate.data(), p.pool);
        for_rows(p.pool, n, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                const float * g = ws.gate.data() + t * 2 * n_ff;
                activate(g, g + n_ff, ws.up.data() + t * n_ff, n_ff);
            }
        });
        hidden = ws.up.data();
    }
    kernels::matmul(lw.ffn_down, hidden, n, out, p.pool);
}

void set_rope_mode(model_hparams & hp, rope_mode mode) {
    hp.rope.mode = mode;
    hp.rope_swa.mode = mode;
}

status bind_attention(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) {
    SKIPPY_ASSIGN_OR_RETURN(lw.attn_norm, b.vector(tensor_role::attn_norm, hp.n_embd, true));
    SKIPPY_ASSIGN_OR_RETURN(lw.wq, b.matrix(tensor_role::attn_q, hp.n_embd, hp.q_dim()));
    SKIPPY_ASSIGN_OR_RETURN(lw.wk, b.matrix(tensor_role::attn_k, hp.n_embd, hp.kv_dim()));
    SKIPPY_ASSIGN_OR_RETURN(lw.wv, b.matrix(tensor_role::attn_v, hp.n_embd, hp.kv_dim()));
    SKIPPY_ASSIGN_OR_RETURN(lw.wo, b.matrix(tensor_role::attn_output, hp.q_dim(), hp.n_embd));
    return status::ok();
}

status bind_qk_norms(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) {
    SKIPPY_ASSIGN_OR_RETURN(lw.q_norm, b.vector(tensor_role::attn_q_norm, hp.head_dim, true));
    SKIPPY_ASSIGN_OR_RETURN(lw.k_norm, b.vector(tensor_role::attn_k_norm, hp.head_dim, true));
    return status::ok();
}

status bind_ffn(const tensor_binder & b, const model_hparams & hp, layer_weights & lw) {
    SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, b.vector(tensor_role::ffn_norm, hp.n_embd, true));
    SKIPPY_ASSIGN_OR_RETURN(lw.ffn_gate, b.matrix(tensor_role::ffn_gate, hp.n_embd, hp.n_ff));
    SKIPPY_ASSIGN_OR_RETURN(lw.ffn_up, b.matrix(tensor_role::ffn_up, hp.n_embd, hp.n_ff));
    SKIPPY_ASSIGN_OR_RETURN(lw.ffn_down, b.matrix(tensor_role::ffn_down, hp.n_ff, hp.n_embd));
    return status::ok();
}

void norm_rows(const layer_pass & p, const float * w) {
    const int64_t n_embd = p.hp.n_embd;
    for_rows(p.pool, p.n_rows, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) rms_norm(p.x + t * n_embd, w, n_embd, p.hp.rms_eps, p.ws.cur.data() + t * n_embd);
    });
}

void project_qkv(const layer_pass & p, const layer_weights & lw) {
    forward_workspace & ws = p.ws;
    if (lw.wqkv.data) {
        ws.qkv.resize(static_cast<size_t>(p.n_rows * lw.wqkv.n_rows));
        kernels::matmul(lw.wqkv, ws.cur.data(), p.n_rows, ws.qkv.data(), p.pool);
        return;
    }
    const kernels::matmul_output qkv[] = {{lw.wq, ws.q.data()}, {lw.wk, ws.k.data()}, {lw.wv, ws.v.data()}};
    kernels::matmul_many(qkv, ws.cur.data(), p.n_rows, p.pool);
}

void prepare_qkv(const layer_pass & p, const layer_weights & lw, float q_scale) {
    const model_hparams & hp = p.hp;
    forward_workspace & ws = p.ws;
    const int64_t q_dim = hp.q_dim(), kv_dim = hp.kv_dim();
    for_rows(p.pool, p.n_rows, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float * qt = ws.q.data() + t * q_dim;
            float * kt = ws.k.data() + t * kv_dim;
            float * vt = ws.v.data() + t * kv_dim;
            if (lw.wqkv.data) {
                const float * row = ws.qkv.data() + t * (q_dim + 2 * kv_dim);
                std::memcpy(qt, row, static_cast<size_t>(q_dim) * sizeof(float));
                std::memcpy(kt, row + q_dim, static_cast<size_t>(kv_dim) * sizeof(float));
                std::memcpy(vt, row + q_dim + kv_dim, static_cast<size_t>(kv_dim) * sizeof(float));
            }
            if (lw.bq) {
                for (int64_t i = 0; i < q_dim; ++i) qt[i] += lw.bq[i];
                for (int64_t i = 0; i < kv_dim; ++i) kt[i] += lw.bk[i];
                for (int64_t i = 0; i < kv_dim; ++i) vt[i] += lw.bv[i];
            }
            if (lw.q_norm) {
                rms_norm_heads(qt, lw.q_norm, hp.n_head, hp.head_dim, hp.rms_eps);
                rms_norm_heads(kt, lw.k_norm, hp.n_head_kv, hp.head_dim, hp.rms_eps);
            }
            rope_row(p, t, qt, hp.n_head);
            rope_row(p, t, kt, hp.n_head_kv);
            if (q_scale != 1.0f) {
                for (int64_t i = 0; i < q_dim; ++i) qt[i] *= q_scale;
            }
            store_kv(p, t, kt, vt);
        }
    });
}

void residual(const layer_pass & p, const float * y, const float * w) {
    const int64_t n_embd = p.hp.n_embd;
    for_rows(p.pool, p.n_rows, [&](int64_t t0, int64_t t1) {
        add(p.x + t0 * n_embd, y + t0 * n_embd, (t1 - t0) * n_embd);
        // Reads x rows [t0, t1) only, and writes cur rows [t0, t1) (y may be cur: read above).
        if (w) {
            for (int64_t t = t0; t < t1; ++t) rms_norm(p.x + t * n_embd, w, n_embd, p.hp.rms_eps, p.ws.cur.data() + t * n_embd);
        }
    });
}

void prenorm_layer(const layer_pass & p, const layer_weights & lw, const prenorm_options & o) {
    forward_workspace & ws = p.ws;
    norm_rows(p, lw.attn_norm);
    project_qkv(p, lw);
    prepare_qkv(p, lw, o.q_scale);
    attention(p, ws.q.data(), ws.attn.data(), {o.kq_scale, lw.kind == layer_kind::sliding_attention ? p.hp.n_swa : 0, o.f16_probabilities});
    kernels::matmul(lw.wo, ws.attn.data(), p.n_rows, ws.cur.data(), p.pool);
    residual(p, ws.cur.data(), lw.ffn_norm);
    if (lw.moe.router.data) {
        moe_ffn(p, lw, kernels::swiglu, ws.cur.data(), ws.attn.data());
    } else {
        ffn(p, lw, o.act, ws.cur.data(), ws.attn.data());
    }
    residual(p, ws.attn.data(), nullptr);
}

void reserve_workspace(forward_workspace & ws, const model_hparams & hp, int64_t n_rows) {
    const size_t nt = static_cast<size_t>(n_rows);
    const size_t wide = static_cast<size_t>(std::max(hp.n_embd, hp.q_dim()));
    ws.cur.resize(nt * wide);
    ws.q.resize(nt * static_cast<size_t>(hp.q_dim()));
    ws.k.resize(nt * static_cast<size_t>(hp.kv_dim()));
    ws.v.resize(nt * static_cast<size_t>(hp.kv_dim()));
    ws.attn.resize(nt * wide);
    ws.gate.resize(std::max(ws.gate.size(), nt * static_cast<size_t>(hp.n_ff)));
    ws.up.resize(nt * static_cast<size_t>(hp.n_ff));
}

}  // namespace skippy::blocks
