// Weight block formats and the products the model needs.
//
// Every supported weight type has: dequantization, quantization (for make-model and
// tests), and a dot product between one weight row and one activation row that has
// been converted once to the type's activation format ("vec_dot type", as in ggml:
// F32 -> F32, F16 -> F16, BF16 -> BF16, Q8_0/Q4_0 -> Q8_0, Q4_K/Q6_K -> Q8_K).
//
// Batch invariance (DESIGN §4): matmul computes each output element y[t][r] with
// exactly the same operations whatever n_tokens, the position of t in the batch, the
// thread count or the code path (matrix-vector or matrix-matrix). Only the
// implementation choice (scalar vs AVX2, fixed per process) changes the bits.
#pragma once

#include "base/tensor_type.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

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
// Q4_0, Q4_K, Q6_K.
bool is_supported(tensor_type t);

// Decodes n values of a row in t's block layout (GGUF/ggml bytes, little-endian, no
// alignment needed). Bitwise what ggml's dequantize_row_* gives.
// REQUIRES: is_supported(t); n % block_elems(t) == 0.
void dequantize_row(tensor_type t, const void * src, float * dst, int64_t n);
// Encodes n values, deterministically. F16/BF16 round to nearest even; Q8_0 and Q4_0
// are ggml's reference quantizers (byte-identical output); Q4_K and Q6_K use simpler
// non-iterative encoders than llama-quantize (valid blocks; about 1.1x its RMS error
// on the shared synthetic models, never clipping a value).
// REQUIRES: is_supported(t); n % block_elems(t) == 0; dst holds row_bytes(t, n).
void quantize_row(tensor_type t, const float * src, void * dst, int64_t n);

// y[t * n_rows + r] = dot(row r of w, x[t * n_cols ...]) for t < n_tokens, r < n_rows.
// x is token-major f32 ([n_cols, n_tokens]); y is token-major ([n_rows, n_tokens]).
// Each activation row is first converted to the weight type's activation format as
// llama.cpp does on CPU (F32 as is; F16/BF16 rounded; Q8_0 blocks for Q8_0/Q4_0
// weights; Q8_K blocks for Q4_K/Q6_K), then dotted with each weight row.
// REQUIRES: is_supported(w.type); n_cols % block_elems == 0; x and y do not overlap;
// w.data holds n_rows * row_bytes(w.type, n_cols) bytes.
// PROMISES: batch invariance as above. pool may be null (runs on the calling thread).
// Thread-safe: concurrent calls on different outputs may share a pool.
void matmul(const matrix_view & w, const float * x, int64_t n_tokens, float * y, thread_pool * pool);

// Implementation in use: "avx2" or "scalar". Chosen once per process from CPUID;
// SKIPPY_KERNELS=scalar forces the reference path. (Only "scalar" exists so far.)
const char * active_implementation();

// A persistent pool of worker threads, created once and reused by every call.
// parallel_for runs fn(task) exactly once for every task in [0, n_tasks) across the
// calling thread and the workers, and returns when all are done (their writes are
// then visible to the caller). Which thread runs a task never changes a result:
// tasks own disjoint outputs.
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

}  // namespace skippy::kernels
