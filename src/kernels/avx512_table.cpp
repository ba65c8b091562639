// The AVX-512 entries of the kernel table (see quants_avx512.h).
#include "kernels/avx512_kernels.h"
#include "kernels/quants_avx512.h"

namespace skippy::kernels::avx512 {
namespace {

type_kernels * find(type_kernels * entries, size_t n, tensor_type t) {
    for (size_t i = 0; i < n; ++i) {
        if (entries[i].type == t) return &entries[i];
    }
    return nullptr;
}

}  // namespace

// Weight products (vec_dot and mul_tile) of the quantized types, the activation
// encoders (and F16's weight encoder, a plain conversion), add_scaled of F32 and F16,
// and F16's mul_tile. F16's vec_dot and the products of F32 and BF16 stay on AVX2
// (see avx512_float.cpp), as do the conversions off the hot paths.
void install_kernels(type_kernels * entries, size_t n) {
    struct product {
        tensor_type type;
        vec_dot_fn  vec_dot;
        mul_tile_fn mul_tile;
    };
    const product products[] = {
        {tensor_type::q8_0, vec_dot_q8_0_q8_0, mul_tile_q8_0_q8_0},
        {tensor_type::q4_0, vec_dot_q4_0_q8_0, mul_tile_q4_0_q8_0},
        {tensor_type::q4_k, vec_dot_q4_k_q8_k, mul_tile_q4_k_q8_k},
        {tensor_type::q6_k, vec_dot_q6_k_q8_k, mul_tile_q6_k_q8_k},
        {tensor_type::q5_0, vec_dot_q5_0_q8_0, mul_tile_q5_0_q8_0},
        {tensor_type::q5_1, vec_dot_q5_1_q8_1, mul_tile_q5_1_q8_1},
        {tensor_type::iq4_nl, vec_dot_iq4_nl_q8_0, mul_tile_iq4_nl_q8_0},
        {tensor_type::mxfp4, vec_dot_mxfp4_q8_0, mul_tile_mxfp4_q8_0},
        {tensor_type::q2_k, vec_dot_q2_k_q8_k, mul_tile_q2_k_q8_k},
        {tensor_type::q3_k, vec_dot_q3_k_q8_k, mul_tile_q3_k_q8_k},
        {tensor_type::q5_k, vec_dot_q5_k_q8_k, mul_tile_q5_k_q8_k},
        {tensor_type::iq4_xs, vec_dot_iq4_xs_q8_k, mul_tile_iq4_xs_q8_k},
    };
    for (const product & p : products) {
        if (type_kernels * k = find(entries, n, p.type)) {
            k->vec_dot = p.vec_dot;
            k->mul_tile = p.mul_tile;
        }
    }
    struct encoder {
        tensor_type   type;
        from_float_fn from_float_activation;
    };
    const encoder encoders[] = {
        {tensor_type::q8_0, from_float_q8_0_activation},
        {tensor_type::q8_k, from_float_q8_k},
        {tensor_type::q8_1, from_float_q8_1},
    };
    for (const encoder & e : encoders) {
        if (type_kernels * k = find(entries, n, e.type)) k->from_float_activation = e.from_float_activation;
    }
    if (type_kernels * k = find(entries, n, tensor_type::f32)) {
        k->add_scaled = add_scaled_f32;
        k->add_scaled_heads = add_scaled_heads_f32;
    }
    if (type_kernels * k = find(entries, n, tensor_type::f16)) {
        k->add_scaled = add_scaled_f16;
        k->add_scaled_heads = add_scaled_heads_f16;
        k->mul_tile = mul_tile_f16;
        // Also quantize_row's: the KV cache stores keys and values through it, per token.
        k->from_float = from_float_f16;
        k->from_float_activation = from_float_f16;
    }
}

}  // namespace skippy::kernels::avx512
