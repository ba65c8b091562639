// Scalar reference kernels, one group per type (internal to kernels).
//
// Arithmetic order is part of the contract: dequantization computes exactly what
// ggml's dequantize_row_* computes (same float operations, so the same bits), and the
// dot products reduce integers exactly per (sub-)block, then combine blocks in order
// with the float operations written in each function's comment.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skippy::kernels::scalar {

// F32, F16, BF16 (quants_float.cpp). The dot products keep 8 partial sums (value i
// goes to lane i % 8, each step a rounded multiply then a rounded add) and combine
// them as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
void to_float_f32(const uint8_t * src, float * dst, int64_t n);
void from_float_f32(const float * src, uint8_t * dst, int64_t n);
float vec_dot_f32(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

void to_float_f16(const uint8_t * src, float * dst, int64_t n);
void from_float_f16(const float * src, uint8_t * dst, int64_t n);
float vec_dot_f16(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

void to_float_bf16(const uint8_t * src, float * dst, int64_t n);
void from_float_bf16(const float * src, uint8_t * dst, int64_t n);
float vec_dot_bf16(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// For each row r in order: y[i] = y[i] + a[r] * row_r[i] (rounded product, rounded sum).
void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);
void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n);

// Element-wise kernels (vector_math.cpp): kernels.h's exp_shifted, swiglu, argmax_first
// and all_finite, and the exp approximation the first two share (exp_approx.h).
float exp_approx(float x);
void exp_shifted(const float * x, float shift, float * y, int64_t n);
void swiglu(const float * gate, const float * up, float * out, int64_t n);
int64_t argmax_first(const float * x, int64_t n);
bool all_finite(const float * x, int64_t n);

// Q8_0 (quants_q8_0.cpp).
void to_float_q8_0(const uint8_t * src, float * dst, int64_t n);
// ggml's reference: d = amax / 127, q = roundf(x * (1 / d)) (ties away from zero).
void from_float_q8_0(const float * src, uint8_t * dst, int64_t n);
// llama.cpp's x86 activation path: d = amax / 127, q = nearest-even(x * (127 / amax)).
void from_float_q8_0_activation(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q8_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q4_0 (quants_q4_0.cpp), weights dotted with Q8_0 activations.
void to_float_q4_0(const uint8_t * src, float * dst, int64_t n);
void from_float_q4_0(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q4_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q8_K (quants_q8_k.cpp), activations for the K-quants; quantized as ggml's
// quantize_row_q8_K_ref.
void to_float_q8_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q8_k(const float * src, uint8_t * dst, int64_t n);

// Q4_K (quants_q4_k.cpp), weights dotted with Q8_K activations.
void to_float_q4_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q4_k(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q4_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q6_K (quants_q6_k.cpp), weights dotted with Q8_K activations.
void to_float_q6_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q6_k(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q6_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q8_1 (quants_q8_1.cpp), activations for Q5_1: llama.cpp's x86 activation path,
// d = amax / 127, q = nearest-even(x * (127 / amax)), s = d * sum(q) (each stored as f16).
void to_float_q8_1(const uint8_t * src, float * dst, int64_t n);
void from_float_q8_1(const float * src, uint8_t * dst, int64_t n);

// Q5_0 (quants_q5_0.cpp), weights dotted with Q8_0 activations; quantized as ggml's
// quantize_row_q5_0_ref (byte-identical).
void to_float_q5_0(const uint8_t * src, float * dst, int64_t n);
void from_float_q5_0(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q5_0_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q5_1 (quants_q5_1.cpp), weights dotted with Q8_1 activations; quantized as ggml's
// quantize_row_q5_1_ref (byte-identical).
void to_float_q5_1(const uint8_t * src, float * dst, int64_t n);
void from_float_q5_1(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q5_1_q8_1(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// IQ4_NL (quants_iq4_nl.cpp), weights dotted with Q8_0 activations.
void to_float_iq4_nl(const uint8_t * src, float * dst, int64_t n);
void from_float_iq4_nl(const float * src, uint8_t * dst, int64_t n);
float vec_dot_iq4_nl_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// MXFP4 (quants_mxfp4.cpp), weights dotted with Q8_0 activations.
void to_float_mxfp4(const uint8_t * src, float * dst, int64_t n);
void from_float_mxfp4(const float * src, uint8_t * dst, int64_t n);
float vec_dot_mxfp4_q8_0(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

// Q2_K, Q3_K, Q5_K, IQ4_XS (quants_q2_k.cpp ...), weights dotted with Q8_K activations.
void to_float_q2_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q2_k(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q2_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

void to_float_q3_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q3_k(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q3_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

void to_float_q5_k(const uint8_t * src, float * dst, int64_t n);
void from_float_q5_k(const float * src, uint8_t * dst, int64_t n);
float vec_dot_q5_k_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

void to_float_iq4_xs(const uint8_t * src, float * dst, int64_t n);
void from_float_iq4_xs(const float * src, uint8_t * dst, int64_t n);
float vec_dot_iq4_xs_q8_k(const uint8_t * w_row, const uint8_t * x_row, int64_t n);

}  // namespace skippy::kernels::scalar
