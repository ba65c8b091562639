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

constexpr std::array<mix_row, 8> k_mixes = {{
    {"F32", tensor_type::f32, 0, false},
    {"F16", tensor_type::f16, 1, false},
    {"BF16", tensor_type::bf16, 32, false},
    {"Q8_0", tensor_type::q8_0, 7, false},
    {"Q4_0", tensor_type::q4_0, 2, false},
    {"Q4_K", tensor_type::q4_k, 14, false},
    {"Q6_K", tensor_type::q6_k, 18, false},
    {"Q4_K_M", tensor_type::q4_k, 15, true},
}};

// llama.cpp's Q4_K_M gives attn_v and ffn_down more bits in the first and last eighth
// of the layers and in every third layer between.
bool use_more_bits(int32_t il, int32_t n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
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
    if (!mix.is_mix) return mix.base_type;
    // Q4_K_M
    if (slot.name == "output.weight") return tensor_type::q6_k;
    if (slot.il >= 0 && (ends_with(slot.name, ".attn_v.weight") || ends_with(slot.name, ".ffn_down.weight")) &&
        use_more_bits(slot.il, slot.n_layer)) {
        return tensor_type::q6_k;
    }
    return mix.base_type;
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
