// Weight block formats and the products the model needs.
//
// Every supported weight type has: dequantization, quantization (for make-model and
// tests), and a dot product between one weight row and one activation row that has
// been converted once to the type's activation format ("vec_dot type", as in ggml's
// CPU backend: F32 -> F32, F16 -> F16, BF16 -> BF16, Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4 -> Q8_0,
// Q5_1 -> Q8_1, Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS -> Q8_K).
//
// Batch invariance (DESIGN §4): matmul computes each output element y[t][r] with
// exactly the same operations whatever n_tokens, the position of t in the batch, the
// thread count or the code path (matrix-vector or matrix-matrix). Only the
// implementation choice (scalar vs AVX2, fixed per process) could change the bits, and
// today it does not: the AVX2 kernels reproduce the scalar reference exactly.
#pragma once

#include "base/status.h"
#include "base/tensor_type.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::kernels {

class thread_pool;

// A weight matrix in GGUF layout: n_rows rows of n_cols elements (ne[0] = n_cols).
struct matrix_view {
    tensor_type     type = tensor_type::f32;
    const uint8_t * data = nullptr;
    int64_t         n_cols = 0;
    int64_t         n_rows = 0;
};

// Weight types with dequantize, quantize and matmul support: F32, F16, BF16, Q8_0,
// Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool is_supported(tensor_type t);

// Decodes n values of a row in t's block layout (GGUF/ggml bytes, little-endian, no
// alignment needed). Bitwise what ggml's dequantize_row_* gives.
// REQUIRES: is_supported(t); n % block_elems(t) == 0.
void dequantize_row(tensor_type t, const void * src, float * dst, int64_t n);
// Encodes n values, deterministically. F16/BF16 round to nearest even; Q8_0, Q4_0,
// Q5_0, Q5_1 and MXFP4 are ggml's reference quantizers (byte-identical output); the
// K-quants, IQ4_NL and IQ4_XS use simpler non-iterative encoders than llama-quantize
// (valid blocks; 1.02x to 1.2x its RMS error on the shared synthetic models).
// REQUIRES: is_supported(t); n % block_elems(t) == 0; dst holds row_bytes(t, n).
void quantize_row(tensor_type t, const float * src, void * dst, int64_t n);

// y[t * n_rows + r] = dot(row r of w, x[t * n_cols ...]) for t < n_tokens, r < n_rows.
// x is token-major f32 ([n_cols, n_tokens]); y is token-major ([n_rows, n_tokens]).
// Each activation row is first converted to the weight type's activation format as
// llama.cpp does on CPU (F32 as is; F16/BF16 rounded; Q8_0, Q8_1 or Q8_K blocks for
// the quantized types, see above), then dotted with each weight row.
// REQUIRES: is_supported(w.type); n_cols % block_elems == 0; x and y do not overlap;
// w.data holds n_rows * row_bytes(w.type, n_cols) bytes.
// PROMISES: batch invariance as above. pool may be null (runs on the calling thread).
// Thread-safe: concurrent calls on different outputs may share a pool.
void matmul(const matrix_view & w, const float * x, int64_t n_tokens, float * y, thread_pool * pool);

// One product of matmul_many: y = w x, y token-major ([w.n_rows, n_tokens]).
struct matmul_output {
    matrix_view w;
    float *     y = nullptr;
};

// Several products of the same activations (e.g. Q, K and V of a layer), each output
// bitwise what matmul(o.w, x, n_tokens, o.y, pool) writes. Cheaper than separate calls:
// x is converted once per activation format and all rows share one parallel job.
// REQUIRES: 1 <= outputs.size() <= 8; every w as matmul requires, all with the same
// n_cols; the y buffers do not overlap each other or x.
void matmul_many(std::span<const matmul_output> outputs, const float * x, int64_t n_tokens, thread_pool * pool);

// One product of matmul_grouped, over activations of its own: y = w x with x
// [n_tokens, w.n_cols] and y [n_tokens, w.n_rows], both token-major.
struct matmul_job {
    matrix_view   w;
    const float * x = nullptr;
    int64_t       n_tokens = 0;
    float *       y = nullptr;
};

// Several products with their own inputs in one parallel job (the experts of a
// mixture-of-experts layer, each over the rows routed to it): each y bitwise what
// matmul(j.w, j.x, j.n_tokens, j.y, pool) writes. Jobs with the same x, n_tokens and
// activation format share one conversion; each weight row is read once per call.
// Jobs with n_tokens 0 are skipped.
// REQUIRES: every job as matmul requires; no y overlaps another y or any x.
void matmul_grouped(std::span<const matmul_job> jobs, thread_pool * pool);

// Dot products of rows of a plain type (F32 or F16, e.g. keys of the KV cache) with
// rows of the same type (e.g. queries converted once):
//   y[t * y_stride + r] = dot(rows + r * row_stride_bytes, x + t * x_stride_bytes)
// for r < n_rows, t < n_x, each over n elements. Each output is bitwise the type's
// vec_dot: eight partial sums (element i in lane i % 8; rounded multiply, then rounded
// add), combined as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). The same bits in
// every implementation, whatever n_rows and n_x.
// REQUIRES: t is F32 or F16; y does not overlap the inputs.
void dot_rows(tensor_type t, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, const uint8_t * x,
              size_t x_stride_bytes, int64_t n_x, int64_t n, float * y, int64_t y_stride);

// Weighted sum of rows of type t (e.g. values of the KV cache) into y: for
// r = 0, 1, ..., n_rows - 1 in that order, y[i] = y[i] + a[r] * row_r[i] for i < n, row r
// at rows + r * row_stride_bytes. Each product rounded, then each sum rounded (never
// fused): the same bits in every implementation, as a loop over the rows would give.
// REQUIRES: t is F32 or F16; y does not overlap the rows or a.
void add_scaled_rows(tensor_type t, const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows,
                     float * y, int64_t n);

// add_scaled_rows for each head g < n_heads: weights a + g * a_stride, output y + g *
// y_stride, the same rows (attention's query heads that share a KV head). Every output
// gets exactly add_scaled_rows' operations (the same bits); the rows are read once.
// REQUIRES: t is F32 or F16; n_heads >= 0; y overlaps neither the rows, a, nor itself
// across heads.
void add_scaled_rows_heads(tensor_type t, const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows,
                           size_t row_stride_bytes, int64_t n_rows, float * y, int64_t y_stride, int64_t n);

// y[i] = exp(x[i] - shift) for i < n (x == y allowed): the difference rounded, then a
// fixed polynomial approximation of exp (relative error about 2e-7, exp(-inf) = 0;
// src/kernels/exp_approx.h), the same operations and bits in every implementation.
// PROMISES: exp_shifted of a finite x with shift x is exactly 1 (x - x is +0), which
// attention relies on to skip the call.
void exp_shifted(const float * x, float shift, float * y, int64_t n);

// exp_shifted of each row r < n_rows with its own shift: y[r * y_stride + i] =
// exp(x[r * x_stride + i] - shifts[r]) for i < n, the same bits as exp_shifted row by
// row. The rows' exponentials run side by side (each is a chain of dependent steps; a
// row of 16 values alone leaves the vector units waiting): attention's query heads.
// REQUIRES: n_rows >= 0; y is x (same strides) or overlaps neither x nor shifts.
void exp_shifted_rows(const float * x, int64_t x_stride, const float * shifts, int32_t n_rows, float * y, int64_t y_stride,
                      int64_t n);

// out[i] = (gate[i] / (1 + exp(-gate[i]))) * up[i] for i < n (SiLU-gated product; out may
// be gate or up), with exp_shifted's exp; the same bits in every implementation.
void swiglu(const float * gate, const float * up, float * out, int64_t n);

// The index the loop `best = 0; for i in [1, n): if (x[i] > x[best]) best = i` ends
// with: the first index of the largest value (-0 and +0 equal), NaNs never taken
// (and if x[0] is a NaN, 0). The same index in every implementation. Greedy sampling
// over a vocabulary's logits.
// REQUIRES: n >= 1.
int64_t argmax_first(const float * x, int64_t n);

// Whether no x[i] (i < n) is infinite or NaN.
bool all_finite(const float * x, int64_t n);

// The kernel path in use: "scalar", "avx2", "avx512" or "amx". Chosen on first use
// from CPUID (the fastest path the CPU supports; SKIPPY_KERNELS=<path> forces one), or
// by select_implementation. Every path gives bitwise the same results.
const char * active_implementation();

// Forces a kernel path by name ("scalar", "avx2", "avx512", "amx", or "auto" for the
// fastest this CPU supports), for the whole process; call it before computing.
// invalid_argument for an unknown name, unsupported (naming the missing CPU feature)
// when this CPU cannot run that path.
status select_implementation(std::string_view name);

// The paths this CPU supports, slowest first ("scalar" always first).
std::vector<std::string> supported_implementations();

// A persistent pool of worker threads, created once and reused by every call.
// parallel_for runs fn(task) exactly once for every task in [0, n_tasks) across the
// calling thread and the workers, and returns when all are done (their writes are
// then visible to the caller). Which thread runs a task never changes a result:
// tasks own disjoint outputs.
// Cost: a job is published and its tasks claimed with atomic operations (no lock,
// about a microsecond per job with spinning workers, as decode's ~100 jobs per token
// need); idle workers poll for about 0.3 ms, then sleep, and a job of n tasks wakes
// at most n - 1 sleeping workers.
class thread_pool {
public:
    // REQUIRES: n_threads >= 1, counting the caller (n_threads - 1 workers start).
    explicit thread_pool(int n_threads);
    ~thread_pool();  // REQUIRES: no parallel_for in progress.
    thread_pool(const thread_pool &) = delete;
    thread_pool & operator=(const thread_pool &) = delete;

    int n_threads() const { return n_threads_; }
    // REQUIRES: fn does not throw. Calls from several threads are serialized; a call
    // made from inside a task (of any pool) runs its tasks inline on that thread.
    void parallel_for(int64_t n_tasks, const std::function<void(int64_t task)> & fn);

private:
    struct impl;
    int                   n_threads_;
    std::unique_ptr<impl> impl_;
};

// ---- element-wise activations of the model families (src/kernels/activations.cpp) ----

// out[i] = gelu(gate[i]) * up[i] for i < n (GELU-gated product, gemma3's FFN; out may be
// gate or up), with GELU in its tanh form computed exactly rather than through an fp16
// table: gelu(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// with exp_shifted's exp. One implementation for every path (scalar and AVX2 builds run
// the same operations), so the bits never depend on the kernel path.
void gelu_gated(const float * gate, const float * up, float * out, int64_t n);

// out[i] = g * (u + 1) with g = x / (1 + exp(-alpha x)), x = min(gate[i], limit) and
// u = clamp(up[i], -limit, limit): gpt-oss's clamped SwiGLU (alpha 1.702, limit 7 in
// llama.cpp), with exp_shifted's exp; one implementation for every path. out may be
// gate or up.
void swiglu_clamped(const float * gate, const float * up, float * out, int64_t n, float alpha, float limit);

}  // namespace skippy::kernels
