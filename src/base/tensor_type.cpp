#include "base/tensor_type.h"

#include <array>
#include <cassert>
#include <cctype>

namespace skippy {
namespace {

struct type_row {
    tensor_type        type;
    tensor_type_traits traits;
};

// Block geometry from the GGUF specification (ggml block layouts).
constexpr std::array<type_row, 23> k_types = {{
    {tensor_type::f32,  {"F32", 1, 4}},
    {tensor_type::f16,  {"F16", 1, 2}},
    {tensor_type::q4_0, {"Q4_0", 32, 2 + 16}},
    {tensor_type::q4_1, {"Q4_1", 32, 2 + 2 + 16}},
    {tensor_type::q5_0, {"Q5_0", 32, 2 + 4 + 16}},
    {tensor_type::q5_1, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {tensor_type::q8_0, {"Q8_0", 32, 2 + 32}},
    {tensor_type::q8_1, {"Q8_1", 32, 4 + 32}},
    {tensor_type::q2_k, {"Q2_K", 256, 16 + 64 + 2 + 2}},
    {tensor_type::q3_k, {"Q3_K", 256, 32 + 64 + 12 + 2}},
    {tensor_type::q4_k, {"Q4_K", 256, 2 + 2 + 12 + 128}},
    {tensor_type::q5_k, {"Q5_K", 256, 2 + 2 + 12 + 32 + 128}},
    {tensor_type::q6_k, {"Q6_K", 256, 128 + 64 + 16 + 2}},
    {tensor_type::q8_k, {"Q8_K", 256, 4 + 256 + 32}},
    // IQ4_NL: f16 scale, 32 4-bit indices into a fixed non-linear table.
    {tensor_type::iq4_nl, {"IQ4_NL", 32, 2 + 16}},
    // IQ4_XS: f16 super-scale, 8 6-bit sub-scales (2 high bits in a u16, 4 low in 4
    // bytes), 256 4-bit indices into the IQ4_NL table.
    {tensor_type::iq4_xs, {"IQ4_XS", 256, 2 + 2 + 4 + 128}},
    {tensor_type::i8,   {"I8", 1, 1}},
    {tensor_type::i16,  {"I16", 1, 2}},
    {tensor_type::i32,  {"I32", 1, 4}},
    {tensor_type::i64,  {"I64", 1, 8}},
    {tensor_type::f64,  {"F64", 1, 8}},
    {tensor_type::bf16, {"BF16", 1, 2}},
    // MXFP4 (OCP microscaling): one E8M0 shared exponent, 32 E2M1 values as nibbles.
    {tensor_type::mxfp4, {"MXFP4", 32, 1 + 16}},
}};

}  // namespace

std::optional<tensor_type_traits> get_tensor_type_traits(uint32_t raw_type) {
    for (const auto & row : k_types) {
        if (static_cast<uint32_t>(row.type) == raw_type) return row.traits;
    }
    return std::nullopt;
}

size_t row_bytes(tensor_type t, int64_t n_elems) {
    auto traits = get_tensor_type_traits(static_cast<uint32_t>(t));
    assert(traits && n_elems % traits->block_elems == 0);
    return static_cast<size_t>(n_elems / traits->block_elems) * traits->block_bytes;
}

std::optional<tensor_type> parse_tensor_type(std::string_view name) {
    for (const auto & row : k_types) {
        if (row.traits.name.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < name.size() && same; ++i) {
            same = std::toupper(static_cast<unsigned char>(name[i])) == row.traits.name[i];
        }
        if (same) return row.type;
    }
    return std::nullopt;
}

std::string_view tensor_type_name(tensor_type t) {
    auto traits = get_tensor_type_traits(static_cast<uint32_t>(t));
    return traits ? traits->name : std::string_view("?");
}

}  // namespace skippy
