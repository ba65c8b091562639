// AVX2 + FMA + F16C kernels, one group per type (internal to kernels).
//
// Call only when the CPU has AVX2, FMA and F16C (type_kernels.cpp checks CPUID).
// Every function here returns bitwise what its scalar counterpart in quants_scalar.h
// returns (see avx2_util.h for how), so the fast path changes speed, never results.
// Activation encoders write byte-identical output.
//
// Input requirements beyond the scalar ones: Q8_0 activation rows hold codes in
// [-127, 127] (the activation encoder never writes -128), because the products with
// Q8_0, Q5_0, IQ4_NL and MXFP4 weights multiply |w| by x with w's sign, and -(-128)
// does not fit in a byte.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skippy::kernels::avx2 {

// F32, F16, BF16 (avx2_float.cpp).
float vec_dot_f32(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_f32(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_f16(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_f16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                  int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
void from_float_f16(const float * src, uint8_t * dst, int64_t n);
float vec_dot_bf16(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_bf16(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                   int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
void from_float_bf16(const float * src, uint8_t * dst, int64_t n);
// For each row r in order: y[i] = y[i] + a[r] * row_r[i], product and sum each rounded.
void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);
void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);

// Element-wise (avx2_math.cpp), as vector_math.cpp's scalar versions.
void exp_shifted(const float * x, float shift, float * y, int64_t n);
void swiglu(const float * gate, const float * up, float * out, int64_t n);
int64_t argmax_first(const float * x, int64_t n);
bool all_finite(const float * x, int64_t n);

// Q8_0 (avx2_q8_0.cpp).
void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q8_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q4_0 (avx2_q4_0.cpp).
float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q4_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q8_K (avx2_q8_k.cpp).
void from_float_q8_k(const float * src, uint8_t * dst, int64_t n);

// Q4_K (avx2_q4_k.cpp).
float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q4_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q6_K (avx2_q6_k.cpp).
float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q6_k_q8_k(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q5_0, IQ4_NL, MXFP4 x Q8_0 (avx2_q5_0.cpp, avx2_iq4_nl.cpp, avx2_mxfp4.cpp).
float vec_dot_q5_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q5_0_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_iq4_nl_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                          int64_t n_tokens, int64_t n, float * y, int64_t y_stride);
float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_mxfp4_q8_0(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                         int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q5_1 x Q8_1, and the Q8_1 activation encoder (avx2_q5_1.cpp).
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n);
void mul_tile_q5_1_q8_1(const uint8_t * w, size_t w_row_bytes, int64_t n_rows, const uint8_t * xq, size_t xq_row_bytes,
                        int64_t n_tokens, int64_t n, float * y, int64_t y_stride);

// Q2_K, Q3_K, Q5_K, IQ4_XS x Q8_K (avx2_q2_k.cpp, avx2_q3_k.cpp, avx2_q5_k.cpp,
// avx2_iq4_xs.cpp). IQ4_XS multiplies |w| by x with w's sign, so its Q8_K codes must
// not be -128 (the Q8_K encoder maps the largest magnitude to -127, never beyond).
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

}  // namespace skippy::kernels::avx2
