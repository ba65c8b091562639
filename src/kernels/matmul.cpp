// matmul: convert each activation row once, then dot it with every weight row.
//
// Batch invariance: y[t][r] is always vec_dot(row r, converted row t), a pure function
// of those two rows' bytes; the conversion of row t depends on row t alone. How rows
// are split across tasks, which thread runs a task, how many tokens share the call and
// which other products share it therefore cannot change any output bit.
#include "kernels/kernels.h"

#include "kernels/type_kernels.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <vector>

namespace skippy::kernels {
namespace {

// Products per matmul_many call (Q, K and V of a layer are three).
constexpr size_t k_max_outputs = 8;

// Rows are shared out in whole groups of this many, so the fast tiles (eight rows per
// vector in matrix-vector products) are rarely partial.
constexpr int64_t k_row_align = 16;

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

// Per-thread scratch for converted activations, one buffer per activation format of a
// call: grows to the largest batch seen and is reused, so steady-state decode and
// prefill do not allocate.
uint8_t * activation_scratch(size_t slot, size_t n_bytes) {
    thread_local std::array<std::vector<uint8_t>, k_max_outputs> buffers;
    std::vector<uint8_t> & buffer = buffers[slot];
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

// One product of the call, with its kernels and converted activations.
struct product {
    const type_kernels * wk = nullptr;
    const matmul_output * out = nullptr;
    size_t          w_row_bytes = 0;
    const uint8_t * xq = nullptr;
    size_t          xq_row_bytes = 0;
    int64_t         first_group = 0;  // index of its first row group in the call
};

}  // namespace

void matmul_many(std::span<const matmul_output> outputs, const float * x, int64_t n_tokens, thread_pool * pool) {
    if (n_tokens <= 0 || outputs.empty()) return;
    assert(outputs.size() <= k_max_outputs);
    const int64_t n = outputs[0].w.n_cols;
    const int64_t n_threads = pool != nullptr ? pool->n_threads() : 1;

    // Activation formats: each distinct vec_dot_type is converted once.
    struct format {
        tensor_type          type;
        const type_kernels * ak;
        size_t               row_bytes;
        uint8_t *            data;
    };
    std::array<format, k_max_outputs> formats{};
    size_t n_formats = 0;
    std::array<product, k_max_outputs> products{};
    int64_t n_groups = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
        const matrix_view & w = outputs[i].w;
        assert(w.n_cols == n && "matmul_many: products must share the input width");
        product & p = products[i];
        p.wk = active_kernels(w.type);
        assert(p.wk != nullptr && p.wk->vec_dot != nullptr && "matmul on an unsupported weight type");
        p.out = &outputs[i];
        p.w_row_bytes = row_bytes(w.type, n);
        p.xq_row_bytes = row_bytes(p.wk->vec_dot_type, n);
        p.first_group = n_groups;
        n_groups += (std::max<int64_t>(w.n_rows, 0) + k_row_align - 1) / k_row_align;
        if (p.wk->vec_dot_type == tensor_type::f32) {
            p.xq = reinterpret_cast<const uint8_t *>(x);  // F32 weights take activations as they are
            continue;
        }
        size_t f = 0;
        while (f < n_formats && formats[f].type != p.wk->vec_dot_type) ++f;
        if (f == n_formats) {
            const type_kernels * ak = active_kernels(p.wk->vec_dot_type);
            assert(ak != nullptr && ak->from_float_activation != nullptr);
            formats[f] = {p.wk->vec_dot_type, ak, p.xq_row_bytes,
                          activation_scratch(f, static_cast<size_t>(n_tokens) * p.xq_row_bytes)};
            ++n_formats;
        }
        p.xq = formats[f].data;
    }
    if (n_groups == 0) return;

    // Convert activations, a few tokens per task.
    if (n_formats > 0) {
        const int64_t n_chunks = std::min(n_tokens, 4 * n_threads);
        const int64_t tokens_per_chunk = (n_tokens + n_chunks - 1) / n_chunks;
        run(pool, n_chunks * static_cast<int64_t>(n_formats), [&](int64_t task) {
            const format & f = formats[static_cast<size_t>(task % static_cast<int64_t>(n_formats))];
            const int64_t chunk = task / static_cast<int64_t>(n_formats);
            const int64_t t1 = std::min(n_tokens, (chunk + 1) * tokens_per_chunk);
            for (int64_t t = chunk * tokens_per_chunk; t < t1; ++t) {
                f.ak->from_float_activation(x + t * n, f.data + t * f.row_bytes, n);
            }
        });
    }

    // Row groups of all products, numbered in order, shared out in contiguous ranges:
    // a few per thread so uneven threads still finish together. Every task covers all
    // tokens: each weight row is read from memory once per call and reused from cache
    // for every token (the tiles loop over tokens inside).
    const int64_t n_tasks = std::min<int64_t>(n_groups, n_threads == 1 ? 1 : 4 * n_threads);
    const int64_t groups_per_task = (n_groups + n_tasks - 1) / n_tasks;
    run(pool, n_tasks, [&](int64_t task) {
        const int64_t g0 = task * groups_per_task;
        const int64_t g1 = std::min(n_groups, g0 + groups_per_task);
        for (size_t i = 0; i < outputs.size(); ++i) {
            const product & p = products[i];
            const matrix_view & w = p.out->w;
            const int64_t r0 = std::max<int64_t>(0, (g0 - p.first_group) * k_row_align);
            const int64_t r1 = std::min(w.n_rows, (g1 - p.first_group) * k_row_align);
            if (r0 >= r1) continue;
            const uint8_t * w_rows = w.data + r0 * p.w_row_bytes;
            float * y = p.out->y + r0;
            if (p.wk->mul_tile != nullptr) {
                p.wk->mul_tile(w_rows, p.w_row_bytes, r1 - r0, p.xq, p.xq_row_bytes, n_tokens, n, y, w.n_rows);
            } else {
                loop_mul_tile(p.wk->vec_dot, w_rows, p.w_row_bytes, r1 - r0, p.xq, p.xq_row_bytes, n_tokens, n, y,
                              w.n_rows);
            }
        }
    });
}

void matmul(const matrix_view & w, const float * x, int64_t n_tokens, float * y, thread_pool * pool) {
    const matmul_output out{w, y};
    matmul_many(std::span<const matmul_output>(&out, 1), x, n_tokens, pool);
}

}  // namespace skippy::kernels
