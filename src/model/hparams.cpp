#include "model/family.h"
#include "model/hparams_read.h"

#include <cmath>

namespace skippy {
namespace {

// Bounds well above any real model; they stop a hostile file from sizing buffers.
constexpr int64_t k_max_embd = 1 << 16;
constexpr int64_t k_max_ff = 1 << 20;
constexpr int64_t k_max_layers = 4096;
constexpr int64_t k_max_heads = 1 << 12;
constexpr int64_t k_max_ctx = 1 << 24;

// RoPE scaling (docs/model.md): none, linear (freq_scale = 1 / factor; older files say
// rope.scale_linear) and YaRN with llama.cpp's defaults and magnitude. Anything else is
// refused, naming the key.
status read_rope_scaling(const metadata_reader & r, model_hparams & hp) {
    rope_params & rope = hp.rope;
    float factor = 1.0f;
    SKIPPY_TRY(r.real("rope.scale_linear", factor));
    const std::string type_key = r.prefix() + "rope.scaling.type";
    const auto type = r.file().get_string(type_key);
    const bool yarn = type && *type == "yarn";
    if (type && (*type == "linear" || yarn)) {
        SKIPPY_TRY(r.real("rope.scaling.factor", factor));
    } else if (type && *type != "none") {
        return make_error(error_code::unsupported, "model metadata '" + type_key + "' is '" + *type +
                                                       "', which is not supported (none, linear, yarn are)");
    }
    if (!(factor > 0)) return make_error(error_code::invalid_data, "rope scaling factor must be positive");
    rope.freq_scale = 1.0f / factor;

    float attn_factor = 1.0f;  // rope.scaling.attn_factor multiplies whatever YaRN gives
    SKIPPY_TRY(r.real("rope.scaling.attn_factor", attn_factor));
    if (!(attn_factor > 0)) return make_error(error_code::invalid_data, "rope.scaling.attn_factor must be positive");
    rope.attn_factor = attn_factor;
    rope.n_ctx_orig = hp.n_ctx_train;
    SKIPPY_TRY(r.count("rope.scaling.original_context_length", 1, k_max_ctx, rope.n_ctx_orig, false));
    if (!yarn) return status::ok();

    float log_mul = 0.0f;
    SKIPPY_TRY(r.real("rope.scaling.yarn_log_multiplier", log_mul));
    if (log_mul != 0.0f) {
        return make_error(error_code::unsupported,
                          "model metadata '" + r.prefix() + "rope.scaling.yarn_log_multiplier' (DeepSeek's YaRN) is not supported");
    }
    SKIPPY_TRY(r.real("rope.scaling.yarn_beta_fast", rope.beta_fast));
    SKIPPY_TRY(r.real("rope.scaling.yarn_beta_slow", rope.beta_slow));
    if (!(rope.beta_fast > 0) || !(rope.beta_slow > 0)) {
        return make_error(error_code::invalid_data, "rope.scaling.yarn_beta_fast and _slow must be positive");
    }
    // llama.cpp: ext_factor 1; attn_factor = mscale(factor) / (1 + 0.1 ln factor), which
    // the rotation multiplies back by (1 + 0.1 ln factor) (so about 1 + 0.1 ln factor).
    rope.ext_factor = 1.0f;
    const float mscale = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
    rope.attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(factor))) * attn_factor;
    return status::ok();
}

}  // namespace

status metadata_reader::count(const std::string & key, int64_t lo, int64_t hi, int32_t & out, bool required) const {
    const gguf::value * v = file_.find(prefix_ + key);
    if (!v) return required ? missing(key) : status::ok();
    auto i = v->as_int(lo, hi);
    if (!i) {
        return make_error(error_code::invalid_data, "model metadata '" + prefix_ + key + "' must be an integer in [" +
                                                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out = static_cast<int32_t>(*i);
    return status::ok();
}

status metadata_reader::real(const std::string & key, float & out) const {
    const gguf::value * v = file_.find(prefix_ + key);
    if (!v) return status::ok();
    auto f = v->as_float();
    if (!f || !std::isfinite(*f)) return make_error(error_code::invalid_data, "model metadata '" + prefix_ + key + "' must be a finite float");
    out = static_cast<float>(*f);
    return status::ok();
}

status metadata_reader::missing(const std::string & key) const {
    return make_error(error_code::invalid_data, "model metadata lacks '" + prefix_ + key + "'");
}

result<model_hparams> model_hparams::from_gguf(const gguf::file & file) {
    model_hparams hp;
    auto arch = file.get_string("general.architecture");
    if (!arch) return make_error(error_code::invalid_data, "model metadata lacks 'general.architecture'");
    const family_entry * fam = find_family(*arch);
    if (!fam) {
        return make_error(error_code::unsupported, "architecture '" + *arch + "' (general.architecture) is not supported (" +
                                                       family_names() + " are)");
    }
    hp.arch = fam->arch;
    hp.arch_name = *arch;
    const metadata_reader r(file, *arch + ".");

    SKIPPY_TRY(r.count("embedding_length", 1, k_max_embd, hp.n_embd, true));
    SKIPPY_TRY(r.count("block_count", 1, k_max_layers, hp.n_layer, true));
    SKIPPY_TRY(r.count("feed_forward_length", 1, k_max_ff, hp.n_ff, true));
    SKIPPY_TRY(r.count("attention.head_count", 1, k_max_heads, hp.n_head, true));
    hp.n_head_kv = hp.n_head;
    SKIPPY_TRY(r.count("attention.head_count_kv", 1, k_max_heads, hp.n_head_kv, false));
    hp.n_ctx_train = 4096;
    SKIPPY_TRY(r.count("context_length", 1, k_max_ctx, hp.n_ctx_train, false));

    if (!file.find(r.prefix() + "attention.key_length")) {
        if (hp.n_embd % hp.n_head != 0) return make_error(error_code::invalid_data, "embedding_length is not a multiple of head_count");
        hp.head_dim = hp.n_embd / hp.n_head;
    }
    SKIPPY_TRY(r.count("attention.key_length", 1, k_max_embd, hp.head_dim, false));
    int32_t value_length = hp.head_dim;
    SKIPPY_TRY(r.count("attention.value_length", 1, k_max_embd, value_length, false));
    if (value_length != hp.head_dim) return make_error(error_code::unsupported, "key_length != value_length is not supported");
    if (static_cast<int64_t>(hp.n_head) * hp.head_dim > k_max_embd) {
        return make_error(error_code::invalid_data, "head_count x key_length is too large");
    }
    if (hp.n_head % hp.n_head_kv != 0) {
        return make_error(error_code::invalid_data, "head_count is not a multiple of head_count_kv");
    }
    hp.rope.n_rot = hp.head_dim;
    SKIPPY_TRY(r.count("rope.dimension_count", 2, hp.head_dim, hp.rope.n_rot, false));
    if (hp.rope.n_rot % 2 != 0) return make_error(error_code::invalid_data, "rope.dimension_count must be even");

    SKIPPY_TRY(r.real("attention.layer_norm_rms_epsilon", hp.rms_eps));
    SKIPPY_TRY(r.real("rope.freq_base", hp.rope.freq_base));
    if (hp.rms_eps <= 0 || hp.rope.freq_base <= 0) return make_error(error_code::invalid_data, "rms epsilon and rope base must be positive");
    SKIPPY_TRY(read_rope_scaling(r, hp));
    hp.layer_kinds.assign(static_cast<size_t>(hp.n_layer), layer_kind::attention);
    hp.rope_swa = hp.rope;  // sliding-window layers rotate as the others unless the family says otherwise

    SKIPPY_TRY(fam->family.read_hparams(r, hp));

    // Vocabulary size: the embedding matrix is the truth.
    const gguf::tensor_info * embd = file.find_tensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2) return make_error(error_code::invalid_data, "model has no 2-D token_embd.weight");
    if (embd->dims[0] != hp.n_embd) return make_error(error_code::invalid_data, "token_embd.weight width differs from embedding_length");
    if (embd->dims[1] > INT32_MAX) return make_error(error_code::invalid_data, "vocabulary too large");
    hp.n_vocab = static_cast<int32_t>(embd->dims[1]);
    return hp;
}

}  // namespace skippy
