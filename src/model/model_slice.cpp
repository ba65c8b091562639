#include "model/blocks.h"
#include "model/family.h"

#include "base/log.h"

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

// Per-pair frequency factors of a rope variant: rope_freqs.weight (Llama 3.1+) when the
// file has it, else Phi-3's long or short factors by the per-sequence context. A file
// that has them always runs with them.
result<const float *> bind_rope_factors(const gguf::file & f, const model_hparams & hp, int32_t n_ctx_seq) {
    const int64_t n = hp.rope.n_rot / 2;
    const char * name = "rope_freqs.weight";
    if (!f.find_tensor(name)) {
        const bool has_long = f.find_tensor("rope_factors_long.weight") != nullptr;
        const bool has_short = f.find_tensor("rope_factors_short.weight") != nullptr;
        if (!has_long && !has_short) return static_cast<const float *>(nullptr);
        if (!has_long || !has_short) {
            return make_error(error_code::invalid_data, "model has only one of rope_factors_long.weight and rope_factors_short.weight");
        }
        name = n_ctx_seq > hp.rope.n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
    }
    SKIPPY_ASSIGN_OR_RETURN(const float * factors, bind_vector(f, name, n, true));
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(factors[i]) || !(factors[i] > 0)) return shape_error(name, "holds a factor that is not a positive finite float");
    }
    return factors;
}

// Tokens per pass of forward_batch (see there).
constexpr int64_t k_pass_tokens = 256;

}  // namespace

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

std::string tensor_binder::name(tensor_role role, std::string_view suffix) const {
    std::string n = "blk." + std::to_string(il_) + "." + std::string(k_tensor_names[static_cast<size_t>(role)]);
    if (!suffix.empty()) n += "." + std::string(suffix);
    return n;
}

result<kernels::matrix_view> tensor_binder::matrix(tensor_role role, int64_t n_cols, int64_t n_rows) const {
    return bind_matrix(file_, name(role), n_cols, n_rows);
}

result<const float *> tensor_binder::vector(tensor_role role, int64_t n, bool required, std::string_view suffix) const {
    return bind_vector(file_, name(role, suffix), n, required);
}

result<expert_matrices> tensor_binder::experts(tensor_role role, int64_t n_cols, int64_t n_rows, int64_t n_expert) const {
    const std::string n = name(role);
    const gguf::tensor_info * t = file_.find_tensor(n);
    if (!t) return make_error(error_code::invalid_data, "model lacks tensor '" + n + "'");
    if (t->dims.size() != 3 || t->dims[0] != n_cols || t->dims[1] != n_rows || t->dims[2] != n_expert) {
        return shape_error(n, "has shape " + dims_string(t->dims) + ", expected [" + std::to_string(n_cols) + ", " +
                                  std::to_string(n_rows) + ", " + std::to_string(n_expert) + "] (the expert metadata)");
    }
    if (!kernels::is_supported(t->type)) {
        return make_error(error_code::unsupported,
                          "tensor '" + n + "' has type " + std::string(tensor_type_name(t->type)) + ", which is not supported");
    }
    if (n_cols % get_tensor_type_traits(static_cast<uint32_t>(t->type))->block_elems != 0) {
        return shape_error(n, "has rows its type's blocks do not divide");
    }
    expert_matrices m;
    m.first = kernels::matrix_view{t->type, t->data, n_cols, n_rows};
    m.expert_bytes = row_bytes(t->type, n_cols) * static_cast<size_t>(n_rows);
    return m;
}

result<const float *> tensor_binder::array(tensor_role role, int64_t n_cols, int64_t n_rows, bool required,
                                           std::string_view suffix) const {
    const std::string n = name(role, suffix);
    const gguf::tensor_info * t = file_.find_tensor(n);
    if (!t) {
        if (!required) return static_cast<const float *>(nullptr);
        return make_error(error_code::invalid_data, "model lacks tensor '" + n + "'");
    }
    if (t->dims.size() != 2 || t->dims[0] != n_cols || t->dims[1] != n_rows) {
        return shape_error(n, "has shape " + dims_string(t->dims) + ", expected [" + std::to_string(n_cols) + ", " +
                                  std::to_string(n_rows) + "]");
    }
    if (t->type != tensor_type::f32) return shape_error(n, "must be F32");
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) return shape_error(n, "data is misaligned");
    return reinterpret_cast<const float *>(t->data);
}

model_slice::~model_slice() = default;

result<std::unique_ptr<model_slice>> model_slice::bind(std::shared_ptr<const gguf::file> file, layer_range range,
                                                       const slice_options & options) {
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

    auto layers = std::make_unique<bound_layers>();
    layers->family = &find_family(hp.arch_name)->family;  // from_gguf found it
    const int32_t n_ctx_seq = options.n_ctx_seq > 0 ? options.n_ctx_seq : std::min(hp.n_ctx_train, 4096);
    SKIPPY_ASSIGN_OR_RETURN(const float * factors, bind_rope_factors(f, hp, n_ctx_seq));
    if (factors && hp.rope_swa.n_rot != hp.rope.n_rot) {
        return make_error(error_code::unsupported, "RoPE factors with a different rotary width on sliding-window layers");
    }
    layers->ropes = {rope_variant{hp.rope, factors}, rope_variant{hp.rope_swa, factors}};
    for (auto & v : layers->ropes) blocks::prepare_rope(v);
    int32_t n_recurrent = 0, n_kv = 0;
    for (int32_t il = range.start; il < range.end; ++il) {
        layer_weights lw;
        lw.kind = hp.layer_kinds[static_cast<size_t>(il)];
        lw.rope_variant = lw.kind == layer_kind::sliding_attention ? 1 : 0;
        if (lw.kind == layer_kind::recurrent) {
            lw.recurrent_index = n_recurrent++;
        } else {
            lw.kv_index = n_kv++;
        }
        SKIPPY_TRY(layers->family->bind_layer(tensor_binder(f, il), hp, lw));
        layers->layers.push_back(lw);
    }
    slice->layers_ = std::move(layers);
    if (options.huge_pages) slice->move_weights_to_huge_pages(tied);
    return slice;
}

// The tensors decode streams every token: the slice's layers, and the head on the last
// stage (the embeddings only as a tied head: stage 0 reads one row per token of them).
// On failure the weights stay on the file mapping, which computes the same bits.
void model_slice::move_weights_to_huge_pages(bool tied) const {
    const gguf::file & f = *file_;
    const bool last = range_.end == hparams_.n_layer;
    std::vector<gguf::file::byte_range> ranges;
    for (const gguf::tensor_info & t : f.tensors()) {
        const int32_t il = gguf::block_index(t.name);
        const bool streamed = il >= 0 ? il >= range_.start && il < range_.end
                                      : last && t.name == (tied ? "token_embd.weight" : "output.weight");
        if (streamed) ranges.push_back({f.data_offset() + t.offset, t.n_bytes});
    }
    const auto moved = f.back_with_huge_pages(ranges);
    if (!moved.is_ok()) {
        SKIPPY_LOG_WARN("layers [%d, %d): weights stay on the file mapping: %s", range_.start, range_.end,
                        moved.error().to_string().c_str());
    } else if (*moved > 0) {
        SKIPPY_LOG_DEBUG("layers [%d, %d): %.1f MiB of weights on huge pages", range_.start, range_.end,
                         static_cast<double>(*moved) / (1 << 20));
    }
}

kv_geometry model_slice::kv_geometry_for(kv_dtype dtype, int32_t block_tokens) const {
    kv_geometry g;
    g.n_layers = n_kv_layers();
    g.kv_dim = hparams_.kv_dim();
    g.block_tokens = block_tokens;
    g.dtype = dtype;
    return g;
}

int32_t model_slice::n_kv_layers() const {
    int32_t n = 0;
    for (const layer_weights & lw : layers_->layers) n += lw.kind == layer_kind::recurrent ? 0 : 1;
    // A pool needs a layer; a slice of recurrent layers only keeps one, never written.
    return std::max(n, 1);
}

int32_t model_slice::n_recurrent_layers() const {
    int32_t n = 0;
    for (const layer_weights & lw : layers_->layers) n += lw.kind == layer_kind::recurrent ? 1 : 0;
    return n;
}

recurrent_state model_slice::make_recurrent_state() const {
    recurrent_state s;
    s.layers_ = n_recurrent_layers();
    if (s.layers_ == 0) return s;
    s.conv_floats_ = hparams_.ssm.conv_state_floats();
    s.per_layer_ = static_cast<size_t>(s.conv_floats_ + hparams_.ssm.matrix_state_floats());
    s.data_.assign(s.per_layer_ * static_cast<size_t>(s.layers_), 0.0f);
    return s;
}

recurrent_shape model_slice::recurrent_shape_of() const {
    recurrent_shape s;
    s.layer_start = range_.start;
    s.layer_end = range_.end;
    s.n_layers = n_recurrent_layers();
    if (s.n_layers == 0) return s;
    const ssm_params & ssm = hparams_.ssm;
    s.d_conv = ssm.d_conv;
    s.conv_channels = ssm.conv_channels();
    s.d_state = ssm.d_state;
    s.n_v_head = ssm.n_v_head;
    return s;
}

recurrent_state::recurrent_state(int32_t layers, int64_t conv_floats, int64_t matrix_floats)
    : layers_(layers), conv_floats_(conv_floats), per_layer_(static_cast<size_t>(conv_floats + matrix_floats)) {
    data_.assign(per_layer_ * static_cast<size_t>(layers_), 0.0f);
}

void recurrent_state::reset() {
    std::fill(data_.begin(), data_.end(), 0.0f);
    n_tokens_ = 0;
}

void recurrent_state::truncate(int64_t n) {
    if (n == n_tokens_) return;
    if (n == 0) {
        reset();
    } else {
        invalidate();
    }
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
        float * row = x + static_cast<int64_t>(i) * n_embd;
        kernels::dequantize_row(token_embd_.type, token_embd_.data + static_cast<size_t>(id) * stride, row, n_embd);
        if (hparams_.embd_scale != 1.0f) {
            for (int64_t j = 0; j < n_embd; ++j) row[j] *= hparams_.embd_scale;
        }
    }
    return status::ok();
}

status model_slice::forward_layers(float * x, int64_t n_tokens, int64_t pos_start, kv_sequence & kv,
                                   kernels::thread_pool * pool, forward_workspace & ws, recurrent_state * recurrent) const {
    const sequence_span span{&kv, pos_start, n_tokens, recurrent};
    return forward_batch(x, std::span<const sequence_span>(&span, 1), pool, ws);
}

status model_slice::forward_batch(float * x, std::span<const sequence_span> spans, kernels::thread_pool * pool,
                                  forward_workspace & ws) const {
    const model_hparams & hp = hparams_;
    int64_t n_rows = 0;
    std::vector<const kv_sequence *> seen;
    const kv_geometry * geometry = nullptr;
    for (const sequence_span & s : spans) {
        if (!s.kv || s.n_tokens < 0 || s.pos_start < 0) {
            return make_error(error_code::invalid_argument, "a sequence span needs a KV, a position >= 0 and a token count >= 0");
        }
        if (s.kv->n_tokens() < s.pos_start) {
            return make_error(error_code::invalid_argument, "KV holds " + std::to_string(s.kv->n_tokens()) +
                                                                " positions, cannot continue at " + std::to_string(s.pos_start));
        }
        const kv_geometry & g = s.kv->pool().geometry();
        if (g.n_layers != n_kv_layers() || g.kv_dim != hp.kv_dim() || (geometry && (g.block_tokens != geometry->block_tokens ||
                                                                                    g.dtype != geometry->dtype))) {
            return make_error(error_code::invalid_argument, "a sequence span's KV does not have this slice's geometry");
        }
        geometry = &g;
        seen.push_back(s.kv);
        n_rows += s.n_tokens;
        SKIPPY_TRY(check_recurrent(s));
    }
    const recurrent_shape shape = recurrent_shape_of();
    for (const sequence_span & s : spans) {
        for (const recurrent_capture & c : s.captures) {
            if (!c.into || !s.recurrent || c.into == s.recurrent || !c.into->has_shape(shape) || c.n_tokens <= s.pos_start ||
                c.n_tokens > s.pos_start + s.n_tokens) {
                return make_error(error_code::invalid_argument, "a recurrent capture must name a state of the slice's shape and a "
                                                                "position inside its span");
            }
        }
    }
    std::vector<const recurrent_state *> seen_states;
    for (const sequence_span & s : spans) {
        if (s.recurrent) seen_states.push_back(s.recurrent);
    }
    std::sort(seen_states.begin(), seen_states.end());
    if (std::adjacent_find(seen_states.begin(), seen_states.end()) != seen_states.end()) {
        return make_error(error_code::invalid_argument, "two sequence spans of one batch share a recurrent state");
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
        return make_error(error_code::invalid_argument, "two sequence spans of one batch share a KV");
    }
    if (n_rows == 0) return status::ok();

    for (size_t i = 0; i < spans.size(); ++i) {
        if (spans[i].n_tokens == 0) continue;
        status st = spans[i].kv->prepare_write(spans[i].pos_start, spans[i].n_tokens);
        if (!st.is_ok()) {
            for (size_t j = 0; j < i; ++j) spans[j].kv->truncate(spans[j].pos_start);
            return st;
        }
    }
    ws.rows.clear();
    const bool recurrent = has_recurrent_layers();
    for (const sequence_span & s : spans) {
        if (recurrent && s.n_tokens > 0 && s.pos_start == 0) s.recurrent->reset();
        const size_t first_row = ws.rows.size();
        for (int64_t t = 0; t < s.n_tokens; ++t) ws.rows.push_back({s.kv, s.pos_start + t, recurrent ? s.recurrent : nullptr});
        for (const recurrent_capture & c : s.captures) ws.rows[first_row + static_cast<size_t>(c.n_tokens - 1 - s.pos_start)].capture = c.into;
    }

    // Long batches run through all layers in passes of at most k_pass_tokens rows: the
    // same bits as one pass (a row's result never depends on its batch; a later pass
    // finds the K/V of every earlier row of its sequence, written in all layers by the
    // passes before), with scratch memory bounded by the pass instead of the batch
    // (9 MB less at 512 tokens on bench-200m, whose workspace is 36 KB per token). Each
    // pass still reuses every weight block across its rows; more passes only re-read
    // the weights (passes of 256 tokens cost about 3% of prefill speed on bench-200m,
    // passes of 128 about 9%).
    const std::span<const forward_workspace::row_ref> rows(ws.rows);  // forward_pass leaves ws.rows alone
    for (int64_t r0 = 0; r0 < n_rows; r0 += k_pass_tokens) {
        const int64_t n = std::min(k_pass_tokens, n_rows - r0);
        forward_pass(x + r0 * hp.n_embd, rows.subspan(static_cast<size_t>(r0), static_cast<size_t>(n)), pool, ws);
    }
    if (recurrent) {
        for (const sequence_span & s : spans) {
            if (s.n_tokens > 0) s.recurrent->set_n_tokens(s.pos_start + s.n_tokens);
            for (const recurrent_capture & c : s.captures) c.into->set_n_tokens(c.n_tokens);
        }
    }
    return status::ok();
}

status model_slice::check_recurrent(const sequence_span & s) const {
    const int32_t n_layers = n_recurrent_layers();
    if (n_layers == 0) return status::ok();
    const ssm_params & ssm = hparams_.ssm;
    if (!s.recurrent || !s.recurrent->has_shape(n_layers, ssm.conv_state_floats(), ssm.matrix_state_floats())) {
        return make_error(error_code::invalid_argument,
                          "a sequence span on a slice with recurrent layers needs a recurrent state of the slice's shape");
    }
    if (s.n_tokens > 0 && s.pos_start != 0 && s.recurrent->n_tokens() != s.pos_start) {
        return make_error(error_code::invalid_argument,
                          "recurrent state holds " + std::to_string(s.recurrent->n_tokens()) + " positions, cannot continue at " +
                              std::to_string(s.pos_start) + " (recurrent layers cannot be restored from KV)");
    }
    return status::ok();
}

void model_slice::forward_pass(float * x, std::span<const forward_workspace::row_ref> rows, kernels::thread_pool * pool,
                               forward_workspace & ws) const {
    const model_hparams & hp = hparams_;
    const bound_layers & bl = *layers_;
    const int64_t n = static_cast<int64_t>(rows.size());
    blocks::reserve_workspace(ws, hp, n);

    // cos/sin of every row for each rope variant the slice's layers use.
    int32_t half = 0;
    for (const auto & v : bl.ropes) half = std::max(half, v.params.n_rot / 2);
    const size_t per_variant = static_cast<size_t>(n) * static_cast<size_t>(half);
    ws.rope_cos.resize(bl.ropes.size() * per_variant);
    ws.rope_sin.resize(ws.rope_cos.size());
    std::vector<rope_table> tables(bl.ropes.size());
    for (size_t vi = 0; vi < bl.ropes.size(); ++vi) {
        const bool used = std::any_of(bl.layers.begin(), bl.layers.end(),
                                      [&](const layer_weights & lw) { return lw.rope_variant == static_cast<int32_t>(vi); });
        if (!used) continue;
        float * c = ws.rope_cos.data() + vi * per_variant;
        float * s = ws.rope_sin.data() + vi * per_variant;
        for (int64_t t = 0; t < n; ++t) blocks::rope_angles(bl.ropes[vi], rows[static_cast<size_t>(t)].pos, c + t * half, s + t * half);
        tables[vi] = rope_table{&bl.ropes[vi].params, c, s, half};
    }

    for (int32_t il = 0; il < range_.size(); ++il) {
        const layer_weights & lw = bl.layers[static_cast<size_t>(il)];
        const layer_pass p{hp, std::max(lw.kv_index, 0), x, n, rows, tables[static_cast<size_t>(lw.rope_variant)], ws, pool};
        bl.family->forward_layer(p, lw);
    }
}

void model_slice::head(const float * x, int64_t n_rows, float * logits, kernels::thread_pool * pool,
                       forward_workspace & ws) const {
    const int64_t n_embd = hparams_.n_embd;
    ws.cur.resize(static_cast<size_t>(n_rows * n_embd));
    for (int64_t r = 0; r < n_rows; ++r) {
        blocks::rms_norm(x + r * n_embd, output_norm_, n_embd, hparams_.rms_eps, ws.cur.data() + r * n_embd);
    }
    kernels::matmul(output_, ws.cur.data(), n_rows, logits, pool);
    if (hparams_.final_logit_softcap > 0) {
        const float cap = hparams_.final_logit_softcap;
        for (int64_t i = 0; i < n_rows * hparams_.n_vocab; ++i) logits[i] = std::tanh(logits[i] / cap) * cap;
    }
}

}  // namespace skippy
