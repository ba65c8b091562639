// The AVX-512 kernels, one group per type (internal to kernels; declarations only, so
// avx512_table.cpp and the tests may include it).
//
// Call only when cpu_supports(implementation::avx512). Every function returns bitwise
// what its scalar counterpart in quants_scalar.h returns (see avx512_util.h for how);
// activation encoders write byte-identical output. Inputs as quants_avx2.h requires.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skippy::kernels::avx512 {

// Q8_0 (avx512_q8_0.cpp).
void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q8_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q4_0 (avx512_q4_0.cpp).
float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q4_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q8_K (avx512_q8_k.cpp).
void from_float_q8_k(const float * src, uint8_t * dst, int64_t n);

// Q4_K (avx512_q4_k.cpp).
float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q4_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q6_K (avx512_q6_k.cpp).
float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q6_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

}  // namespace skippy::kernels::avx512
