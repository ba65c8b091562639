#include "model/model.h"

#include <cmath>

namespace skippy {
namespace {

// Bounds well above any real model; they stop a hostile file from sizing buffers.
constexpr int64_t k_max_embd = 1 << 16;
constexpr int64_t k_max_ff = 1 << 20;
constexpr int64_t k_max_layers = 4096;
constexpr int64_t k_max_heads = 1 << 12;
constexpr int64_t k_max_ctx = 1 << 24;

status missing(const std::string & key) {
    return make_error(error_code::invalid_data, "model metadata lacks '" + key + "'");
}

}  // namespace

result<model_hparams> model_hparams::from_gguf(const gguf::file & file) {
    model_hparams hp;
    auto arch = file.get_string("general.architecture");
    if (!arch) return missing("general.architecture");
    hp.arch_name = *arch;
    if (*arch == "llama") {
        hp.arch = model_arch::llama;
        hp.rope = rope_mode::normal;
    } else if (*arch == "qwen2") {
        hp.arch = model_arch::qwen2;
        hp.rope = rope_mode::neox;
        hp.has_qkv_bias = true;
    } else {
        return make_error(error_code::unsupported, "architecture '" + *arch + "' is not supported (llama, qwen2 are)");
    }
    const std::string p = *arch + ".";

    auto get_count = [&](const std::string & key, int64_t lo, int64_t hi, int32_t & out, bool required) -> status {
        const gguf::value * v = file.find(key);
        if (!v) return required ? missing(key) : status::ok();
        auto i = v->as_int(lo, hi);
        if (!i) {
            return make_error(error_code::invalid_data, "model metadata '" + key + "' must be an integer in [" +
                                                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
        out = static_cast<int32_t>(*i);
        return status::ok();
    };
    auto get_real = [&](const std::string & key, float & out) -> status {
        const gguf::value * v = file.find(key);
        if (!v) return status::ok();
        auto f = v->as_float();
        if (!f || !std::isfinite(*f)) return make_error(error_code::invalid_data, "model metadata '" + key + "' must be a finite float");
        out = static_cast<float>(*f);
        return status::ok();
    };

    SKIPPY_TRY(get_count(p + "embedding_length", 1, k_max_embd, hp.n_embd, true));
    SKIPPY_TRY(get_count(p + "block_count", 1, k_max_layers, hp.n_layer, true));
    SKIPPY_TRY(get_count(p + "feed_forward_length", 1, k_max_ff, hp.n_ff, true));
    SKIPPY_TRY(get_count(p + "attention.head_count", 1, k_max_heads, hp.n_head, true));
    hp.n_head_kv = hp.n_head;
    SKIPPY_TRY(get_count(p + "attention.head_count_kv", 1, k_max_heads, hp.n_head_kv, false));
    hp.n_ctx_train = 4096;
    SKIPPY_TRY(get_count(p + "context_length", 1, k_max_ctx, hp.n_ctx_train, false));

    if (hp.n_embd % hp.n_head != 0) {
        return make_error(error_code::invalid_data, "embedding_length is not a multiple of head_count");
    }
    hp.head_dim = hp.n_embd / hp.n_head;
    SKIPPY_TRY(get_count(p + "attention.key_length", 1, k_max_embd, hp.head_dim, false));
    int32_t value_length = hp.head_dim;
    SKIPPY_TRY(get_count(p + "attention.value_length", 1, k_max_embd, value_length, false));
    if (value_length != hp.head_dim) return make_error(error_code::unsupported, "key_length != value_length is not supported");
    if (hp.n_head % hp.n_head_kv != 0) {
        return make_error(error_code::invalid_data, "head_count is not a multiple of head_count_kv");
    }
    hp.n_rot = hp.head_dim;
    SKIPPY_TRY(get_count(p + "rope.dimension_count", 2, hp.head_dim, hp.n_rot, false));
    if (hp.n_rot % 2 != 0) return make_error(error_code::invalid_data, "rope.dimension_count must be even");

    SKIPPY_TRY(get_real(p + "attention.layer_norm_rms_epsilon", hp.rms_eps));
    SKIPPY_TRY(get_real(p + "rope.freq_base", hp.rope_freq_base));
    if (hp.rms_eps <= 0 || hp.rope_freq_base <= 0) return make_error(error_code::invalid_data, "rms epsilon and rope base must be positive");

    // RoPE scaling: linear only (freq_scale = 1 / factor); older files say scale_linear.
    float factor = 1.0f;
    SKIPPY_TRY(get_real(p + "rope.scale_linear", factor));
    if (auto type = file.get_string(p + "rope.scaling.type")) {
        if (*type == "linear") {
            SKIPPY_TRY(get_real(p + "rope.scaling.factor", factor));
        } else if (*type != "none") {
            return make_error(error_code::unsupported, "rope scaling '" + *type + "' is not supported (linear is)");
        }
    }
    if (!(factor > 0)) return make_error(error_code::invalid_data, "rope scaling factor must be positive");
    hp.rope_freq_scale = 1.0f / factor;

    // Vocabulary size: the embedding matrix is the truth.
    const gguf::tensor_info * embd = file.find_tensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2) return make_error(error_code::invalid_data, "model has no 2-D token_embd.weight");
    if (embd->dims[0] != hp.n_embd) return make_error(error_code::invalid_data, "token_embd.weight width differs from embedding_length");
    if (embd->dims[1] > INT32_MAX) return make_error(error_code::invalid_data, "vocabulary too large");
    hp.n_vocab = static_cast<int32_t>(embd->dims[1]);
    return hp;
}

}  // namespace skippy
