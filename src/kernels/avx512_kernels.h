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

// F32 and F16 add_scaled, the F16 encoder and F16's mul_tile (avx512_float.cpp; F16's
// vec_dot and the products of F32 and BF16 stay on AVX2).
void from_float_f16(const float * src, uint8_t * dst, int64_t n);
void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);
void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);
void add_scaled_heads_f32(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows, size_t row_stride_bytes,
                          int64_t n_rows, float * y, int64_t y_stride, int64_t n);
void add_scaled_heads_f16(const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows, size_t row_stride_bytes,
                          int64_t n_rows, float * y, int64_t y_stride, int64_t n);
void mul_tile_f16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// exp_shifted, exp_shifted_rows and swiglu of kernels.h (avx512_math.cpp).
void exp_shifted(const float * x, float shift, float * y, int64_t n);
void exp_shifted_rows(const float * x, int64_t x_stride, const float * shifts, int32_t n_rows, float * y, int64_t y_stride,
                      int64_t n);
void swiglu(const float * gate, const float * up, float * out, int64_t n);

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

// Q5_0, IQ4_NL, MXFP4 x Q8_0 (avx512_q5_0.cpp, avx512_iq4_nl.cpp, avx512_mxfp4.cpp).
float vec_dot_q5_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q5_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_iq4_nl_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_mxfp4_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                         int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q5_1 x Q8_1, and the Q8_1 activation encoder (avx512_q5_1.cpp).
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q5_1_q8_1(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q2_K, Q3_K, Q5_K, IQ4_XS x Q8_K (avx512_q2_k.cpp, avx512_q3_k.cpp, avx512_q5_k.cpp,
// avx512_iq4_xs.cpp).
float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q2_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_q3_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q3_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_q5_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q5_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_iq4_xs_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_iq4_xs_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

}  // namespace skippy::kernels::avx512
