#include "base/fp16.h"
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace skippy {
namespace {

status shape_error(const std::string & name, const std::string & why) {
    return make_error(error_code::invalid_data, "tensor '" + name + "' " + why);
}

std::string dims_string(const std::vector<int64_t> & dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// A 2-D weight [n_cols, n_rows] of a type the kernels support.
result<kernels::matrix_view> bind_matrix(const gguf::file & f, const std::string & name, int64_t n_cols, int64_t n_rows) {
    const gguf::tensor_info * t = f.find_tensor(name);
    if (!t) return make_error(error_code::invalid_data, "model lacks tensor '" + name + "'");
    if (t->dims.size() != 2 || t->dims[0] != n_cols || t->dims[1] != n_rows) {
        return shape_error(name, "has shape " + dims_string(t->dims) + ", expected [" + std::to_string(n_cols) + ", " +
                                     std::to_string(n_rows) + "]");
    }
    if (!kernels::is_supported(t->type)) {
        return make_error(error_code::unsupported,
                          "tensor '" + name + "' has type " + std::string(tensor_type_name(t->type)) + ", which is not supported");
    }
    kernels::matrix_view m;
    m.type = t->type;
    m.data = t->data;
    m.n_cols = n_cols;
    m.n_rows = n_rows;
    return m;
}

// A 1-D f32 vector of n elements (norm weights, biases).
result<const float *> bind_vector(const gguf::file & f, const std::string & name, int64_t n, bool required) {
    const gguf::tensor_info * t = f.find_tensor(name);
    if (!t) {
        if (!required) return static_cast<const float *>(nullptr);
        return make_error(error_code::invalid_data, "model lacks tensor '" + name + "'");
    }
    if (t->dims.size() != 1 || t->dims[0] != n) {
        return shape_error(name, "has shape " + dims_string(t->dims) + ", expected [" + std::to_string(n) + "]");
    }
    if (t->type != tensor_type::f32) return shape_error(name, "must be F32");
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) return shape_error(name, "data is misaligned");
    return reinterpret_cast<const float *>(t->data);
}

// y = x / rms(x) * w, with the mean of squares summed in double, as the reference does.
void rms_norm(const float * x, const float * w, int64_t n, float eps, float * y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

// cos/sin for each rotated pair at position pos, built the way ggml's rope cache is
// (theta multiplied pair by pair) so positions rotate identically to the reference.
void rope_table(const model_hparams & hp, int64_t pos, float * cos_out, float * sin_out) {
    const float theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.n_rot));
    float theta = static_cast<float>(pos);
    for (int32_t i = 0; i < hp.n_rot / 2; ++i) {
        const float t = hp.rope_freq_scale * theta;
        cos_out[i] = std::cos(t);
        sin_out[i] = std::sin(t);
        theta *= theta_scale;
    }
}

void apply_rope(const model_hparams & hp, float * head, const float * c, const float * s) {
    const int32_t half = hp.n_rot / 2;
    for (int32_t i = 0; i < half; ++i) {
        const int32_t a = hp.rope == rope_mode::normal ? 2 * i : i;
        const int32_t b = hp.rope == rope_mode::normal ? 2 * i + 1 : i + half;
        const float x0 = head[a];
        const float x1 = head[b];
        head[a] = x0 * c[i] - x1 * s[i];
        head[b] = x0 * s[i] + x1 * c[i];
    }
}

void store_kv(uint8_t * row, const float * src, int64_t n, kv_dtype dt) {
    if (dt == kv_dtype::f16) {
        for (int64_t i = 0; i < n; ++i) {
            const f16_bits h = f32_to_f16(src[i]);
            std::memcpy(row + 2 * i, &h, 2);
        }
    } else {
        std::memcpy(row, src, static_cast<size_t>(n) * 4);
    }
}

// Tokens per pass of forward_layers (see there).
constexpr int64_t k_pass_tokens = 256;

void run_tasks(kernels::thread_pool * pool, int64_t n, const std::function<void(int64_t)> & fn) {
    if (pool && n > 1) {
        pool->parallel_for(n, fn);
    } else {
        for (int64_t i = 0; i < n; ++i) fn(i);
    }
}

// fn(t0, t1) over [0, n_tokens) in a few contiguous chunks per thread, for per-token
// element-wise work (each token's result depends on that token alone, so the split
// cannot change a bit). One token runs inline: decode does not pay for a job.
void run_token_chunks(kernels::thread_pool * pool, int64_t n_tokens, const std::function<void(int64_t, int64_t)> & fn) {
    const int64_t n_threads = pool ? pool->n_threads() : 1;
    const int64_t n_chunks = std::min<int64_t>(n_tokens, n_threads == 1 ? 1 : 4 * n_threads);
    if (n_chunks <= 1) {
        fn(0, n_tokens);
        return;
    }
    const int64_t per_chunk = (n_tokens + n_chunks - 1) / n_chunks;
    pool->parallel_for(n_chunks, [&](int64_t c) {
        const int64_t t0 = c * per_chunk;
        const int64_t t1 = std::min(n_tokens, t0 + per_chunk);
        if (t0 < t1) fn(t0, t1);
    });
}

}  // namespace

result<std::unique_ptr<model_slice>> model_slice::bind(std::shared_ptr<const gguf::file> file, layer_range range) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    if (range.start < 0 || range.end > hp.n_layer || range.start >= range.end) {
        return make_error(error_code::invalid_argument, "layer range [" + std::to_string(range.start) + ", " +
                                                            std::to_string(range.end) + ") is not inside [0, " +
                                                            std::to_string(hp.n_layer) + ")");
    }
    auto slice = std::unique_ptr<model_slice>(new model_slice());
    slice->file_ = file;
    slice->hparams_ = hp;
    slice->range_ = range;
    const gguf::file & f = *file;
    const bool first = range.start == 0;
    const bool last = range.end == hp.n_layer;
    const bool tied = f.find_tensor("output.weight") == nullptr;

    if (first || (last && tied)) {
        SKIPPY_ASSIGN_OR_RETURN(slice->token_embd_, bind_matrix(f, "token_embd.weight", hp.n_embd, hp.n_vocab));
    }
    if (last) {
        SKIPPY_ASSIGN_OR_RETURN(slice->output_norm_, bind_vector(f, "output_norm.weight", hp.n_embd, true));
        if (tied) {
            slice->output_ = slice->token_embd_;  // output head falls back to the embeddings
        } else {
            SKIPPY_ASSIGN_OR_RETURN(slice->output_, bind_matrix(f, "output.weight", hp.n_embd, hp.n_vocab));
        }
        if (!first) slice->token_embd_ = {};  // bound only to serve as the head
    }

    for (int32_t il = range.start; il < range.end; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        layer_weights lw;
        SKIPPY_ASSIGN_OR_RETURN(lw.attn_norm, bind_vector(f, b + "attn_norm.weight", hp.n_embd, true));
        SKIPPY_ASSIGN_OR_RETURN(lw.wq, bind_matrix(f, b + "attn_q.weight", hp.n_embd, hp.q_dim()));
        SKIPPY_ASSIGN_OR_RETURN(lw.wk, bind_matrix(f, b + "attn_k.weight", hp.n_embd, hp.kv_dim()));
        SKIPPY_ASSIGN_OR_RETURN(lw.wv, bind_matrix(f, b + "attn_v.weight", hp.n_embd, hp.kv_dim()));
        SKIPPY_ASSIGN_OR_RETURN(lw.wo, bind_matrix(f, b + "attn_output.weight", hp.q_dim(), hp.n_embd));
        SKIPPY_ASSIGN_OR_RETURN(lw.bq, bind_vector(f, b + "attn_q.bias", hp.q_dim(), hp.has_qkv_bias));
        SKIPPY_ASSIGN_OR_RETURN(lw.bk, bind_vector(f, b + "attn_k.bias", hp.kv_dim(), hp.has_qkv_bias));
        SKIPPY_ASSIGN_OR_RETURN(lw.bv, bind_vector(f, b + "attn_v.bias", hp.kv_dim(), hp.has_qkv_bias));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_norm, bind_vector(f, b + "ffn_norm.weight", hp.n_embd, true));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_gate, bind_matrix(f, b + "ffn_gate.weight", hp.n_embd, hp.n_ff));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_up, bind_matrix(f, b + "ffn_up.weight", hp.n_embd, hp.n_ff));
        SKIPPY_ASSIGN_OR_RETURN(lw.ffn_down, bind_matrix(f, b + "ffn_down.weight", hp.n_ff, hp.n_embd));
        slice->layers_.push_back(lw);
    }
    return slice;
}

kv_geometry model_slice::kv_geometry_for(kv_dtype dtype, int32_t block_tokens) const {
    kv_geometry g;
    g.n_layers = range_.size();
    g.kv_dim = hparams_.kv_dim();
    g.block_tokens = block_tokens;
    g.dtype = dtype;
    return g;
}

status model_slice::embed(std::span<const token_id> tokens, float * x) const {
    const int64_t n_embd = hparams_.n_embd;
    const size_t stride = row_bytes(token_embd_.type, n_embd);
    for (size_t i = 0; i < tokens.size(); ++i) {
        const token_id id = tokens[i];
        if (id < 0 || id >= hparams_.n_vocab) {
            return make_error(error_code::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                                std::to_string(hparams_.n_vocab));
        }
        kernels::dequantize_row(token_embd_.type, token_embd_.data + static_cast<size_t>(id) * stride,
                                x + static_cast<int64_t>(i) * n_embd, n_embd);
    }
    return status::ok();
}

status model_slice::forward_layers(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                                   kernels::thread_pool * pool, forward_workspace & ws) const {
    const model_hparams & hp = hparams_;
    if (n_tokens <= 0) return status::ok();
    if (kv.n_tokens() < pos_start) {
        return make_error(error_code::invalid_argument, "KV holds " + std::to_string(kv.n_tokens()) +
                                                            " positions, cannot continue at " + std::to_string(pos_start));
    }
    SKIPPY_TRY(kv.prepare_write(pos_start, n_tokens));

    // Long batches run through all layers in passes of at most k_pass_tokens tokens:
    // the same bits as one pass (a token's result never depends on its batch), with
    // scratch memory bounded by the pass instead of the batch (9 MB less at 512 tokens
    // on bench-200m, whose workspace is 36 KB per token). Each pass still reuses every
    // weight block across its tokens; more passes only re-read the weights (passes of
    // 256 tokens cost about 3% of prefill speed on bench-200m, passes of 128 about 9%).
    for (int64_t p0 = 0; p0 < n_tokens; p0 += k_pass_tokens) {
        forward_pass(x + p0 * hp.n_embd, std::min(k_pass_tokens, n_tokens - p0), pos_start + p0, kv, pool, ws);
    }
    return status::ok();
}

void model_slice::forward_pass(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                               kernels::thread_pool * pool, forward_workspace & ws) const {
    const model_hparams & hp = hparams_;
    const int64_t n_embd = hp.n_embd, q_dim = hp.q_dim(), kv_dim = hp.kv_dim(), n_ff = hp.n_ff;
    const size_t nt = static_cast<size_t>(n_tokens);
    ws.cur.resize(nt * static_cast<size_t>(std::max(n_embd, q_dim)));
    ws.q.resize(nt * static_cast<size_t>(q_dim));
    ws.k.resize(nt * static_cast<size_t>(kv_dim));
    ws.v.resize(nt * static_cast<size_t>(kv_dim));
    ws.attn.resize(nt * static_cast<size_t>(std::max(q_dim, n_embd)));
    ws.gate.resize(nt * static_cast<size_t>(n_ff));
    ws.up.resize(nt * static_cast<size_t>(n_ff));

    const int32_t half_rot = hp.n_rot / 2;
    std::vector<float> rope_cos(nt * static_cast<size_t>(half_rot)), rope_sin(rope_cos.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
        rope_table(hp, pos_start + t, &rope_cos[static_cast<size_t>(t * half_rot)], &rope_sin[static_cast<size_t>(t * half_rot)]);
    }
    const kv_dtype dt = kv.pool().geometry().dtype;

    for (int32_t il = 0; il < range_.size(); ++il) {
        const layer_weights & lw = layers_[static_cast<size_t>(il)];

        // attention block
        run_token_chunks(pool, n_tokens, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) rms_norm(x + t * n_embd, lw.attn_norm, n_embd, hp.rms_eps, ws.cur.data() + t * n_embd);
        });
        const kernels::matmul_output qkv[] = {{lw.wq, ws.q.data()}, {lw.wk, ws.k.data()}, {lw.wv, ws.v.data()}};
        kernels::matmul_many(qkv, ws.cur.data(), n_tokens, pool);
        run_token_chunks(pool, n_tokens, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float * qt = ws.q.data() + t * q_dim;
                float * kt = ws.k.data() + t * kv_dim;
                float * vt = ws.v.data() + t * kv_dim;
                if (lw.bq) {
                    for (int64_t i = 0; i < q_dim; ++i) qt[i] += lw.bq[i];
                    for (int64_t i = 0; i < kv_dim; ++i) kt[i] += lw.bk[i];
                    for (int64_t i = 0; i < kv_dim; ++i) vt[i] += lw.bv[i];
                }
                const float * c = &rope_cos[static_cast<size_t>(t * half_rot)];
                const float * s = &rope_sin[static_cast<size_t>(t * half_rot)];
                for (int32_t h = 0; h < hp.n_head; ++h) apply_rope(hp, qt + h * hp.head_dim, c, s);
                for (int32_t h = 0; h < hp.n_head_kv; ++h) apply_rope(hp, kt + h * hp.head_dim, c, s);
                store_kv(kv.k_row(il, pos_start + t), kt, kv_dim, dt);
                store_kv(kv.v_row(il, pos_start + t), vt, kv_dim, dt);
            }
        });
        attention(il, ws.q.data(), n_tokens, pos_start, kv, ws.attn.data(), pool);
        kernels::matmul(lw.wo, ws.attn.data(), n_tokens, ws.cur.data(), pool);

        // feed-forward block (SwiGLU), after the attention residual
        run_token_chunks(pool, n_tokens, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                float * xt = x + t * n_embd;
                const float * a = ws.cur.data() + t * n_embd;
                for (int64_t i = 0; i < n_embd; ++i) xt[i] += a[i];
            }
            // Reads x rows [t0, t1) only, and writes cur rows [t0, t1) after reading them.
            for (int64_t t = t0; t < t1; ++t) rms_norm(x + t * n_embd, lw.ffn_norm, n_embd, hp.rms_eps, ws.cur.data() + t * n_embd);
        });
        const kernels::matmul_output gate_up[] = {{lw.ffn_gate, ws.gate.data()}, {lw.ffn_up, ws.up.data()}};
        kernels::matmul_many(gate_up, ws.cur.data(), n_tokens, pool);
        run_token_chunks(pool, n_tokens, [&](int64_t t0, int64_t t1) {
            float * g = ws.gate.data() + t0 * n_ff;
            kernels::swiglu(g, ws.up.data() + t0 * n_ff, g, (t1 - t0) * n_ff);
        });
        kernels::matmul(lw.ffn_down, ws.gate.data(), n_tokens, ws.attn.data(), pool);
        run_token_chunks(pool, n_tokens, [&](int64_t t0, int64_t t1) {
            for (size_t i = static_cast<size_t>(t0 * n_embd); i < static_cast<size_t>(t1 * n_embd); ++i) x[i] += ws.attn[i];
        });
    }
}

// out[t, h*head_dim ...] = softmax(q_t,h . K / sqrt(head_dim)) V over keys [0, pos_t].
// Keys are reduced in KV blocks, in order, with a running max and sum (online
// softmax): the result for a query depends only on its own position and the stored
// K/V, so chunking cannot change it. Memory is linear in the sequence: one block of
// scores per head at a time.
//
// One task per (token, KV head) serves the query heads that share the KV head
// (grouped-query attention), so each K block is read once for all of them; when that
// gives too few tasks for the threads (decode with few KV heads), the heads of a group
// are split over several tasks. Per head:
// the query is converted once to the KV element type (with an f16 KV it is rounded to
// f16, as the reference converts it to the K type); each score is the kernels' F16 /
// F32 dot product (kernels::dot_rows: eight partial sums, fixed combination); then,
// for each key in order, running_sum += w, and acc[i] = acc[i] + w * v[i] (rounded
// product, rounded sum; kernels::add_scaled_rows). Which heads share a task does not
// change any operation.
void model_slice::attention(int32_t il, const float * q, int64_t n_tokens, int64_t pos_start, const kv_sequence & kv,
                            float * out, kernels::thread_pool * pool) const {
    const model_hparams & hp = hparams_;
    const int32_t hd = hp.head_dim;
    const int32_t group = hp.n_head / hp.n_head_kv;
    const int32_t bt = kv.pool().geometry().block_tokens;
    const kv_dtype dt = kv.pool().geometry().dtype;
    const tensor_type kv_type = dt == kv_dtype::f16 ? tensor_type::f16 : tensor_type::f32;
    const size_t row_bytes_kv = kv.pool().geometry().row_bytes();
    const size_t elem = kv.pool().geometry().elem_bytes();
    const size_t q_row_bytes = static_cast<size_t>(hd) * elem;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    // Tasks per (token, KV head): 1, or more when the threads would otherwise idle.
    const int64_t n_threads = pool ? pool->n_threads() : 1;
    int32_t n_splits = 1;
    while (n_tokens * hp.n_head_kv * n_splits < 2 * n_threads && group % (2 * n_splits) == 0) n_splits *= 2;
    const int32_t heads_per_task = group / n_splits;

    run_tasks(pool, n_tokens * hp.n_head_kv * n_splits, [&](int64_t task) {
        const int64_t t = task / (hp.n_head_kv * n_splits);
        const int32_t hk = static_cast<int32_t>(task / n_splits % hp.n_head_kv);
        const int32_t h0 = hk * group + static_cast<int32_t>(task % n_splits) * heads_per_task;  // first query head
        const int64_t pos = pos_start + t;
        const size_t g_hd = static_cast<size_t>(heads_per_task) * static_cast<size_t>(hd);
        // Scratch reused across tasks and calls (grows once).
        thread_local std::vector<uint8_t> qx;
        thread_local std::vector<float> acc, scores, running_max, running_sum;
        acc.assign(g_hd, 0.0f);
        scores.resize(static_cast<size_t>(heads_per_task) * static_cast<size_t>(bt));
        running_max.assign(static_cast<size_t>(heads_per_task), -INFINITY);
        running_sum.assign(static_cast<size_t>(heads_per_task), 0.0f);

        // The task's query heads are consecutive in q.
        const float * q_group = q + t * hp.q_dim() + static_cast<int64_t>(h0) * hd;
        const uint8_t * q_rows = reinterpret_cast<const uint8_t *>(q_group);
        if (kv_type == tensor_type::f16) {
            qx.resize(g_hd * 2);
            kernels::quantize_row(tensor_type::f16, q_group, qx.data(), static_cast<int64_t>(g_hd));
            q_rows = qx.data();
        }

        const int64_t n_blocks = pos / bt + 1;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const kv_block_id id = kv.blocks()[static_cast<size_t>(b)];
            const uint8_t * kbase = kv.pool().k_rows(id, il) + static_cast<size_t>(hk) * q_row_bytes;
            const uint8_t * vbase = kv.pool().v_rows(id, il) + static_cast<size_t>(hk) * q_row_bytes;
            const int32_t n_keys = static_cast<int32_t>(std::min<int64_t>(bt, pos + 1 - b * bt));
            // scores[g * bt + j] = q_g . k_j
            kernels::dot_rows(kv_type, kbase, row_bytes_kv, n_keys, q_rows, q_row_bytes, heads_per_task, hd, scores.data(), bt);
            for (int32_t g = 0; g < heads_per_task; ++g) {
                float * sg = scores.data() + static_cast<size_t>(g) * static_cast<size_t>(bt);
                float * ag = acc.data() + static_cast<size_t>(g) * static_cast<size_t>(hd);
                float block_max = -INFINITY;
                for (int32_t j = 0; j < n_keys; ++j) {
                    sg[j] = sg[j] * scale;
                    block_max = std::max(block_max, sg[j]);
                }
                const float new_max = std::max(running_max[static_cast<size_t>(g)], block_max);
                float correction = 0.0f;  // exp(-inf) = 0 on the first block
                kernels::exp_shifted(&running_max[static_cast<size_t>(g)], new_max, &correction, 1);
                running_sum[static_cast<size_t>(g)] *= correction;
                for (int32_t i = 0; i < hd; ++i) ag[i] *= correction;
                kernels::exp_shifted(sg, new_max, sg, n_keys);  // the keys' weights w_j
                for (int32_t j = 0; j < n_keys; ++j) running_sum[static_cast<size_t>(g)] += sg[j];
                // acc[i] = acc[i] + w_j * v_j[i] for j in order
                kernels::add_scaled_rows(kv_type, sg, vbase, row_bytes_kv, n_keys, ag, hd);
                running_max[static_cast<size_t>(g)] = new_max;
            }
        }
        for (int32_t g = 0; g < heads_per_task; ++g) {
            float * o = out + t * hp.q_dim() + static_cast<int64_t>(h0 + g) * hd;
            const float * ag = acc.data() + static_cast<size_t>(g) * static_cast<size_t>(hd);
            const float inv = 1.0f / running_sum[static_cast<size_t>(g)];
            for (int32_t i = 0; i < hd; ++i) o[i] = ag[i] * inv;
        }
    });
}

void model_slice::head(const float * x, int64_t n_rows, float * logits, kernels::thread_pool * pool,
                       forward_workspace & ws) const {
    const int64_t n_embd = hparams_.n_embd;
    ws.cur.resize(static_cast<size_t>(n_rows * n_embd));
    for (int64_t r = 0; r < n_rows; ++r) rms_norm(x + r * n_embd, output_norm_, n_embd, hparams_.rms_eps, ws.cur.data() + r * n_embd);
    kernels::matmul(output_, ws.cur.data(), n_rows, logits, pool);
}

}  // namespace skippy
