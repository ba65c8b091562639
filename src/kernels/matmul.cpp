// matmul: convert each activation row once, then dot it with every weight row.
//
// Batch invariance: y[t][r] is always vec_dot(row r, converted row t), a pure function
// of those two rows' bytes; the conversion of row t depends on row t alone. How rows
// are split across tasks, which thread runs a task and how many tokens share the call
// therefore cannot change any output bit.
#include "kernels/kernels.h"

#include "kernels/type_kernels.h"

#include <algorithm>
#include <cassert>
#include <vector>

namespace skippy::kernels {
namespace {

void loop_mul_tile(vec_dot_fn vec_dot, const uint8_t * w, size_t w_row_bytes, int64_t n_rows,
                   const uint8_t * xq, size_t xq_row_bytes, int64_t n_tokens, int64_t n,
                   float * y, int64_t y_stride) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * w_row = w + r * w_row_bytes;
        for (int64_t t = 0; t < n_tokens; ++t) {
            y[t * y_stride + r] = vec_dot(w_row, xq + t * xq_row_bytes, n);
        }
    }
}

// Per-thread scratch for converted activations: grows to the largest batch seen and
// is reused, so steady-state decode and prefill do not allocate.
uint8_t * activation_scratch(size_t n_bytes) {
    thread_local std::vector<uint8_t> buffer;
    if (buffer.size() < n_bytes) buffer.resize(n_bytes);
    return buffer.data();
}

void run(thread_pool * pool, int64_t n_tasks, const std::function<void(int64_t)> & fn) {
    if (pool != nullptr && n_tasks > 1) {
        pool->parallel_for(n_tasks, fn);
    } else {
        for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    }
}

}  // namespace

void matmul(const matrix_view & w, const float * x, int64_t n_tokens, float * y, thread_pool * pool) {
    if (n_tokens <= 0 || w.n_rows <= 0) return;
    const type_kernels * wk = active_kernels(w.type);
    assert(wk != nullptr && wk->vec_dot != nullptr && "matmul on an unsupported weight type");
    const type_kernels * ak = active_kernels(wk->vec_dot_type);
    assert(ak != nullptr && ak->from_float_activation != nullptr);

    const int64_t n = w.n_cols;
    const size_t w_row_bytes = row_bytes(w.type, n);
    const size_t xq_row_bytes = row_bytes(wk->vec_dot_type, n);

    // Convert activations (F32 weights take them as they are).
    const uint8_t * xq = reinterpret_cast<const uint8_t *>(x);
    if (wk->vec_dot_type != tensor_type::f32) {
        uint8_t * buffer = activation_scratch(static_cast<size_t>(n_tokens) * xq_row_bytes);
        run(pool, n_tokens, [&](int64_t t) {
            ak->from_float_activation(x + t * n, buffer + t * xq_row_bytes, n);
        });
        xq = buffer;
    }

    // Contiguous row ranges; a few per thread so uneven threads still finish together.
    const int64_t n_threads = pool != nullptr ? pool->n_threads() : 1;
    const int64_t n_tasks = std::min<int64_t>(w.n_rows, n_threads == 1 ? 1 : 4 * n_threads);
    const int64_t rows_per_task = (w.n_rows + n_tasks - 1) / n_tasks;
    run(pool, n_tasks, [&](int64_t task) {
        const int64_t r0 = task * rows_per_task;
        const int64_t r1 = std::min(w.n_rows, r0 + rows_per_task);
        if (r0 >= r1) return;
        const uint8_t * w_rows = w.data + r0 * w_row_bytes;
        if (wk->mul_tile != nullptr) {
            wk->mul_tile(w_rows, w_row_bytes, r1 - r0, xq, xq_row_bytes, n_tokens, n, y + r0, w.n_rows);
        } else {
            loop_mul_tile(wk->vec_dot, w_rows, w_row_bytes, r1 - r0, xq, xq_row_bytes, n_tokens, n, y + r0, w.n_rows);
        }
    });
}

}  // namespace skippy::kernels
