// Tensor element types as GGUF numbers them (ggml_type), and their block geometry.
//
// A row of n elements of a block type occupies n / block_elems blocks of block_bytes
// each; n must be a multiple of block_elems. This is format knowledge shared by the
// GGUF reader (to validate sizes) and the kernels (to compute).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace skippy {

enum class tensor_type : uint32_t {
    f32  = 0,
    f16  = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq4_nl = 20,
    iq4_xs = 23,
    i8   = 24,
    i16  = 25,
    i32  = 26,
    i64  = 27,
    f64  = 28,
    bf16 = 30,
    mxfp4 = 39,
};

struct tensor_type_traits {
    std::string_view name;         // "Q4_K", as llama.cpp spells it
    int64_t          block_elems;  // elements per block (1 for plain types)
    size_t           block_bytes;  // bytes per block
};

// Traits of a known type, or nullopt for a number we do not know (a file may hold one;
// that must be a clean error, not a crash).
std::optional<tensor_type_traits> get_tensor_type_traits(uint32_t raw_type);

// REQUIRES: t is a known type. Bytes of one row of n_elems; n_elems % block_elems == 0.
size_t row_bytes(tensor_type t, int64_t n_elems);

// Parses a case-insensitive type name ("q4_k", "F16"); nullopt when unknown.
std::optional<tensor_type> parse_tensor_type(std::string_view name);

std::string_view tensor_type_name(tensor_type t);

}  // namespace skippy
