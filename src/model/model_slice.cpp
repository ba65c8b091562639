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

float load_kv(const uint8_t * row, int64_t i, kv_dtype dt) {
    if (dt == kv_dtype::f16) {
        f16_bits h;
        std::memcpy(&h, row + 2 * i, 2);
        return f16_to_f32(h);
    }
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
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

void run_tasks(kernels::thread_pool * pool, int64_t n, const std::function<void(int64_t)> & fn) {
    if (pool && n > 1) {
        pool->parallel_for(n, fn);
    } else {
        for (int64_t i = 0; i < n; ++i) fn(i);
    }
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
        for (int64_t t = 0; t < n_tokens; ++t) rms_norm(x + t * n_embd, lw.attn_norm, n_embd, hp.rms_eps, ws.cur.data() + t * n_embd);
        kernels::matmul(lw.wq, ws.cur.data(), n_tokens, ws.q.data(), pool);
        kernels::matmul(lw.wk, ws.cur.data(), n_tokens, ws.k.data(), pool);
        kernels::matmul(lw.wv, ws.cur.data(), n_tokens, ws.v.data(), pool);
        for (int64_t t = 0; t < n_tokens; ++t) {
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
        attention(il, ws.q.data(), n_tokens, pos_start, kv, ws.attn.data(), pool);
        kernels::matmul(lw.wo, ws.attn.data(), n_tokens, ws.cur.data(), pool);
        for (size_t i = 0; i < nt * static_cast<size_t>(n_embd); ++i) x[i] += ws.cur[i];

        // feed-forward block (SwiGLU)
        for (int64_t t = 0; t < n_tokens; ++t) rms_norm(x + t * n_embd, lw.ffn_norm, n_embd, hp.rms_eps, ws.cur.data() + t * n_embd);
        kernels::matmul(lw.ffn_gate, ws.cur.data(), n_tokens, ws.gate.data(), pool);
        kernels::matmul(lw.ffn_up, ws.cur.data(), n_tokens, ws.up.data(), pool);
        for (size_t i = 0; i < nt * static_cast<size_t>(n_ff); ++i) {
            const float g = ws.gate[i];
            ws.gate[i] = (g / (1.0f + std::exp(-g))) * ws.up[i];
        }
        kernels::matmul(lw.ffn_down, ws.gate.data(), n_tokens, ws.attn.data(), pool);
        for (size_t i = 0; i < nt * static_cast<size_t>(n_embd); ++i) x[i] += ws.attn[i];
    }
    return status::ok();
}

// out[t, h*head_dim ...] = softmax(q_t,h . K / sqrt(head_dim)) V over keys [0, pos_t].
// Keys are reduced in KV blocks, in order, with a running max and sum (online
// softmax): the result for a query depends only on its own position and the stored
// K/V, so chunking cannot change it. With f16 KV the query is rounded to f16 first,
// as the reference's f16 dot product does.
void model_slice::attention(int32_t il, const float * q, int64_t n_tokens, int64_t pos_start, const kv_sequence & kv,
                            float * out, kernels::thread_pool * pool) const {
    const model_hparams & hp = hparams_;
    const int32_t hd = hp.head_dim;
    const int32_t group = hp.n_head / hp.n_head_kv;
    const int32_t bt = kv.pool().geometry().block_tokens;
    const kv_dtype dt = kv.pool().geometry().dtype;
    const size_t row_bytes_kv = kv.pool().geometry().row_bytes();
    const size_t elem = kv.pool().geometry().elem_bytes();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    run_tasks(pool, n_tokens * hp.n_head, [&](int64_t task) {
        const int64_t t = task / hp.n_head;
        const int32_t h = static_cast<int32_t>(task % hp.n_head);
        const int32_t hk = h / group;
        const int64_t pos = pos_start + t;
        thread_local std::vector<float> qh, acc, scores;
        qh.resize(static_cast<size_t>(hd));
        acc.assign(static_cast<size_t>(hd), 0.0f);
        scores.resize(static_cast<size_t>(bt));
        const float * qsrc = q + t * hp.q_dim() + static_cast<int64_t>(h) * hd;
        for (int32_t i = 0; i < hd; ++i) qh[static_cast<size_t>(i)] = dt == kv_dtype::f16 ? round_to_f16(qsrc[i]) : qsrc[i];

        float running_max = -INFINITY;
        float running_sum = 0.0f;
        const int64_t n_blocks = pos / bt + 1;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const kv_block_id id = kv.blocks()[static_cast<size_t>(b)];
            const uint8_t * kbase = kv.pool().k_rows(id, il) + static_cast<size_t>(hk) * static_cast<size_t>(hd) * elem;
            const uint8_t * vbase = kv.pool().v_rows(id, il) + static_cast<size_t>(hk) * static_cast<size_t>(hd) * elem;
            const int32_t n_keys = static_cast<int32_t>(std::min<int64_t>(bt, pos + 1 - b * bt));
            float block_max = -INFINITY;
            for (int32_t j = 0; j < n_keys; ++j) {
                const uint8_t * krow = kbase + static_cast<size_t>(j) * row_bytes_kv;
                float dot = 0.0f;
                for (int32_t i = 0; i < hd; ++i) dot += qh[static_cast<size_t>(i)] * load_kv(krow, i, dt);
                const float s = dot * scale;
                scores[static_cast<size_t>(j)] = s;
                block_max = std::max(block_max, s);
            }
            const float new_max = std::max(running_max, block_max);
            const float correction = std::exp(running_max - new_max);  // exp(-inf) = 0 on the first block
            running_sum *= correction;
            for (int32_t i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] *= correction;
            for (int32_t j = 0; j < n_keys; ++j) {
                const float w = std::exp(scores[static_cast<size_t>(j)] - new_max);
                running_sum += w;
                const uint8_t * vrow = vbase + static_cast<size_t>(j) * row_bytes_kv;
                for (int32_t i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] += w * load_kv(vrow, i, dt);
            }
            running_max = new_max;
        }
        float * o = out + t * hp.q_dim() + static_cast<int64_t>(h) * hd;
        const float inv = 1.0f / running_sum;
        for (int32_t i = 0; i < hd; ++i) o[i] = acc[static_cast<size_t>(i)] * inv;
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
