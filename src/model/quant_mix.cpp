#include "model/quant_mix.h"

#include "kernels/kernels.h"

#include <array>
#include <cctype>

namespace skippy {
namespace {

struct mix_row {
    std::string_view name;
    tensor_type      base;
    uint32_t         file_type;  // llama_ftype
    bool             is_mix;
};

constexpr std::array<mix_row, 16> k_mixes = {{
    {"F32", tensor_type::f32, 0, false},
    {"F16", tensor_type::f16, 1, false},
    {"BF16", tensor_type::bf16, 32, false},
    {"Q8_0", tensor_type::q8_0, 7, true},
    {"Q4_0", tensor_type::q4_0, 2, true},
    {"Q5_0", tensor_type::q5_0, 8, true},
    {"Q5_1", tensor_type::q5_1, 9, true},
    {"IQ4_NL", tensor_type::iq4_nl, 25, true},
    {"IQ4_XS", tensor_type::iq4_xs, 30, true},
    {"Q2_K", tensor_type::q2_k, 10, true},
    {"Q3_K_M", tensor_type::q3_k, 12, true},
    {"Q4_K", tensor_type::q4_k, 14, false},  // every matrix Q4_K (llama-quantize --pure)
    {"Q4_K_M", tensor_type::q4_k, 15, true},
    {"Q5_K_M", tensor_type::q5_k, 17, true},
    {"Q6_K", tensor_type::q6_k, 18, true},
    {"MXFP4_MOE", tensor_type::q8_0, 38, true},  // experts MXFP4, every other matrix Q8_0
}};

// llama_ftype numbers of the mixes whose rules differ.
constexpr uint32_t ftype_q2_k = 10, ftype_q3_k_m = 12, ftype_q4_k_m = 15, ftype_q5_k_m = 17, ftype_iq4_nl = 25,
                   ftype_iq4_xs = 30, ftype_mxfp4_moe = 38;

enum class category { token_embd, output, attn_v, attn_k, attn_output, ffn_down, other };

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// As llama-quant.cpp sorts tensors: attn_qkv and attn_kv_b count as attn_v.
category category_of(std::string_view name) {
    if (name == "output.weight") return category::output;
    if (name == "token_embd.weight") return category::token_embd;
    if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight")) {
        return category::attn_v;
    }
    if (contains(name, "attn_k.weight")) return category::attn_k;
    if (contains(name, "attn_output.weight")) return category::attn_output;
    if (contains(name, "ffn_down")) return category::ffn_down;
    return category::other;
}

// The first and last eighth of the layers and every third layer between.
bool use_more_bits(int32_t il, int32_t n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

int64_t block_elems(tensor_type t) { return get_tensor_type_traits(static_cast<uint32_t>(t))->block_elems; }

// llama-quantize's choice for one tensor of a mix, before the shape fallback.
tensor_type llama_rule(const quant_mix & mix, const weight_slot & s) {
    const tensor_type base = mix.base_type;
    const uint32_t ft = mix.file_type;
    const category c = category_of(s.name);
    if (ft == ftype_mxfp4_moe) return contains(s.name, "_exps.") ? tensor_type::mxfp4 : base;
    if (c == category::output || (c == category::token_embd && s.tied_output)) {
        if (s.n_cols % block_elems(base) != 0) return tensor_type::q8_0;
        return base == tensor_type::q8_0 ? base : tensor_type::q6_k;
    }
    const int32_t il = s.il, n = s.n_layer;
    // llama-quantize gives the attention of 8-expert models (Mixtral's shape, and
    // Qwen3-MoE's or gpt-oss's synthetic ones) more bits: it is small beside the experts.
    const bool eight_experts = s.n_expert == 8;
    switch (c) {
        case category::attn_k:
            return eight_experts ? tensor_type::q8_0 : base;
        case category::attn_v:
            if (eight_experts) return tensor_type::q8_0;
            if (ft == ftype_q2_k) return s.n_gqa >= 4 ? tensor_type::q4_k : tensor_type::q3_k;
            if (ft == ftype_q3_k_m) return il < 2 ? tensor_type::q5_k : tensor_type::q4_k;
            if ((ft == ftype_iq4_nl || ft == ftype_iq4_xs) && s.n_gqa >= 4) return tensor_type::q5_k;
            if ((ft == ftype_q4_k_m || ft == ftype_q5_k_m) && use_more_bits(il, n)) return tensor_type::q6_k;
            return base;
        case category::ffn_down:
            if (ft == ftype_q2_k) return tensor_type::q3_k;
            if (ft == ftype_q3_k_m) return il < n / 16 ? tensor_type::q5_k : tensor_type::q4_k;
            if ((ft == ftype_q4_k_m || ft == ftype_q5_k_m) && use_more_bits(il, n)) return tensor_type::q6_k;
            if ((ft == ftype_iq4_nl || ft == ftype_iq4_xs) && il < n / 8) return tensor_type::q5_k;
            return base;
        case category::attn_output:
            if (eight_experts) {
                const bool more = ft == ftype_q2_k || ft == ftype_q3_k_m || ft == ftype_iq4_nl || ft == ftype_q4_k_m ||
                                  ft == ftype_iq4_xs;
                return more ? tensor_type::q5_k : base;
            }
            if (ft == ftype_q2_k) return tensor_type::q3_k;
            if (ft == ftype_q3_k_m) return tensor_type::q4_k;
            return base;
        default:
            return base;
    }
}

// llama-quantize's fallback for rows the type's blocks do not divide.
tensor_type fit_row(tensor_type t, int64_t n_cols) {
    if (n_cols % block_elems(t) == 0) return t;
    tensor_type fallback = tensor_type::f16;
    switch (t) {
        case tensor_type::iq4_xs: fallback = tensor_type::iq4_nl; break;
        case tensor_type::q2_k:
        case tensor_type::q3_k: fallback = tensor_type::q4_0; break;
        case tensor_type::q4_k: fallback = tensor_type::q5_0; break;
        case tensor_type::q5_k: fallback = tensor_type::q5_1; break;
        case tensor_type::q6_k: fallback = tensor_type::q8_0; break;
        default: break;
    }
    return n_cols % block_elems(fallback) == 0 ? fallback : tensor_type::f16;
}

}  // namespace

result<quant_mix> parse_quant_mix(std::string_view name) {
    std::string upper(name);
    for (auto & c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const auto & row : k_mixes) {
        if (row.name != upper) continue;
        if (!kernels::is_supported(row.base)) break;
        return quant_mix{upper, row.base, row.file_type, row.is_mix};
    }
    return make_error(error_code::invalid_argument, "--type '" + std::string(name) + "' is not one of " + quant_mix_names());
}

tensor_type type_for_weight(const quant_mix & mix, const weight_slot & slot) {
    if (block_elems(mix.base_type) == 1) return mix.base_type;  // F32, F16, BF16: any row
    return fit_row(mix.is_mix ? llama_rule(mix, slot) : mix.base_type, slot.n_cols);
}

std::string quant_mix_names() {
    std::string s;
    for (const auto & row : k_mixes) {
        if (!kernels::is_supported(row.base)) continue;
        if (!s.empty()) s += ", ";
        s += row.name;
    }
    return s;
}

}  // namespace skippy
