// Per-type kernel table: how each weight type converts, quantizes and multiplies
// (internal to kernels; tests may use it).
//
// Every implementation (the scalar reference, and AVX2 + FMA + F16C) provides one
// table of type_kernels, indexed by tensor_type. matmul, dequantize_row and
// quantize_row look the functions up in the table of the active implementation,
// chosen once per process. A fast path plugs in by starting from the scalar table and
// replacing the entries it accelerates (see kernel_table()).
//
// Rows are raw bytes in the block layouts of blocks.h. An "activation row" is an f32
// row converted once, per token, into the weight type's vec_dot_type; every weight
// row is then dotted with it.
#pragma once

#include "base/tensor_type.h"

#include <cstddef>
#include <cstdint>

namespace skippy::kernels {

// Decodes n values. REQUIRES: n % block_elems == 0.
using to_float_fn = void (*)(const uint8_t * src, float * dst, int64_t n);

// Encodes n values into row_bytes(type, n) bytes. REQUIRES: n % block_elems == 0.
using from_float_fn = void (*)(const float * src, uint8_t * dst, int64_t n);

// Dot product of one weight row with one activation row (in the type's vec_dot_type),
// both of n values. Pure function of its inputs: the same bytes give the same bits.
using vec_dot_fn = float (*)(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// A tile of a matrix product, for rows r < n_rows and tokens t < n_tokens:
//   y[t * y_stride + r] = vec_dot(w + r * w_row_bytes, xq + t * xq_row_bytes, n)
// PROMISES: every output is bitwise equal to that vec_dot call (batch invariance), so
// a fast tile may reuse weight blocks across tokens but never change the arithmetic.
using mul_tile_fn = void (*)(const uint8_t * w, size_t w_row_bytes, int64_t n_rows,
                             const uint8_t * xq, size_t xq_row_bytes, int64_t n_tokens,
                             int64_t n, float * y, int64_t y_stride);

// For r = 0, 1, ..., n_rows - 1 in that order: y[i] = y[i] + a[r] * row_r[i], rows of n
// values at rows + r * row_stride_bytes; each product rounded, then each sum rounded
// (never fused), so every implementation gives the same bits.
using add_scaled_fn = void (*)(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows,
                               float * y, int64_t n);

// add_scaled for n_heads weight vectors (head g's at a + g * a_stride) against the same
// rows, into y + g * y_stride: each head's outputs get exactly add_scaled's operations.
using add_scaled_heads_fn = void (*)(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows,
                                     size_t row_stride_bytes, int64_t n_rows, float * y, int64_t y_stride, int64_t n);

struct type_kernels {
    tensor_type type = tensor_type::f32;
    // Format activations are converted to before vec_dot (F32, F16, BF16, Q8_0, Q8_1, Q8_K).
    tensor_type vec_dot_type = tensor_type::f32;
    // Dequantization.
    to_float_fn to_float = nullptr;
    // Weight encoding (quantize_row): deterministic, as make-model writes files.
    from_float_fn from_float = nullptr;
    // Activation encoding, set on the types that serve as a vec_dot_type. It may round
    // differently from from_float (Q8_0: ties to even with 127/amax, as llama.cpp's
    // x86 path does, vs ggml's reference weight quantizer).
    from_float_fn from_float_activation = nullptr;
    // Null for activation-only types (Q8_K, Q8_1).
    vec_dot_fn vec_dot = nullptr;
    // Optional; null means matmul loops over vec_dot.
    mul_tile_fn mul_tile = nullptr;
    // Set on F32 and F16 (the KV cache types, for attention).
    add_scaled_fn add_scaled = nullptr;
    // Optional (null: add_scaled once per head); reads the rows once for all the heads.
    add_scaled_heads_fn add_scaled_heads = nullptr;
};

// The kernel paths, slowest first. Every path gives bitwise the scalar reference's
// results; a faster path starts from the table of the one before it and replaces the
// entries it accelerates (avx512 from avx2, amx from avx512).
//   scalar  the reference, any CPU
//   avx2    AVX2 + FMA + F16C
//   avx512  AVX-512 F/BW/VL/DQ + VNNI (and everything avx2 needs)
//   amx     AMX-TILE + AMX-INT8, with the OS's permission for tile data (and avx512)
enum class implementation { scalar, avx2, avx512, amx };
inline constexpr implementation k_all_implementations[] = {implementation::scalar, implementation::avx2,
                                                           implementation::avx512, implementation::amx};

// "scalar", "avx2", "avx512", "amx".
const char * implementation_name(implementation impl);

// True when this CPU (and OS) can run the implementation (scalar: always).
bool cpu_supports(implementation impl);

// What this CPU lacks for impl ("AVX-512 VNNI", "AMX-INT8", "the kernel's permission
// for AMX tile data", ...), or "" when cpu_supports(impl).
const char * missing_cpu_features(implementation impl);

// Kernels of type t in the given implementation, or null when t has none there (or
// the CPU cannot run that implementation).
// The scalar table covers F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (weights) and Q8_K, Q8_1 (activations only); every
// other table holds the same types.
const type_kernels * kernel_table(implementation impl, tensor_type t);

// The implementation in use. Until select_implementation() is called it is chosen
// once, on first use: SKIPPY_KERNELS (scalar, avx2, avx512, amx or auto) when set and
// supported, else the fastest path this CPU supports.
implementation active_impl();

// Makes impl the implementation in use from now on (for every thread).
// REQUIRES: cpu_supports(impl); no kernel call in progress on any thread (results are
// the same bits either way, but a product must not switch tables midway).
void set_active_impl(implementation impl);

// kernel_table(active_impl(), t).
const type_kernels * active_kernels(tensor_type t);

}  // namespace skippy::kernels
