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
#include <cstdint>
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
    const matmul_job *   job = nullptr;
    size_t          w_row_bytes = 0;
    size_t          conversion = SIZE_MAX;  // index into the call's conversions; SIZE_MAX: F32 as is
    size_t          xq_row_bytes = 0;
    int64_t         first_group = 0;  // index of its first row group in the call
};

// One activation matrix converted to one vec_dot_type: rows [first_row, first_row +
// n_tokens) of the call's flat list of converted rows.
struct conversion {
    const float *        x = nullptr;
    int64_t              n_tokens = 0;
    int64_t              n = 0;
    tensor_type          type = tensor_type::f32;
    const type_kernels * ak = nullptr;
    size_t               row_bytes = 0;
    size_t               offset = 0;     // into the scratch buffer
    int64_t              first_row = 0;
};

// Per calling thread: grows to the largest call seen and is reused, so steady-state
// decode and prefill do not allocate. (Workers reach the caller's through references.)
struct call_scratch {
    std::vector<product>    products;
    std::vector<conversion> conversions;
    std::vector<uint8_t>    activations;
};

}  // namespace

void matmul_grouped(std::span<const matmul_job> jobs, thread_pool * pool) {
    if (jobs.empty()) return;
    thread_local call_scratch tls;
    call_scratch & s = tls;  // the lambdas below run on workers: they must see this thread's
    const int64_t n_threads = pool != nullptr ? pool->n_threads() : 1;

    // Activation formats: each distinct (input, vec_dot_type) is converted once.
    s.products.assign(jobs.size(), product{});
    s.conversions.clear();
    size_t n_bytes = 0;
    int64_t n_conv_rows = 0;
    int64_t n_groups = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const matmul_job & j = jobs[i];
        product & p = s.products[i];
        p.job = &j;
        if (j.n_tokens <= 0 || j.w.n_rows <= 0) continue;
        p.wk = active_kernels(j.w.type);
        assert(p.wk != nullptr && p.wk->vec_dot != nullptr && "matmul on an unsupported weight type");
        const int64_t n = j.w.n_cols;
        p.w_row_bytes = row_bytes(j.w.type, n);
        p.xq_row_bytes = row_bytes(p.wk->vec_dot_type, n);
        p.first_group = n_groups;
        n_groups += (j.w.n_rows + k_row_align - 1) / k_row_align;
        if (p.wk->vec_dot_type == tensor_type::f32) continue;  // F32 weights take activations as they are
        size_t c = 0;
        while (c < s.conversions.size() && !(s.conversions[c].x == j.x && s.conversions[c].type == p.wk->vec_dot_type &&
                                             s.conversions[c].n == n && s.conversions[c].n_tokens == j.n_tokens)) {
            ++c;
        }
        if (c == s.conversions.size()) {
            const type_kernels * ak = active_kernels(p.wk->vec_dot_type);
            assert(ak != nullptr && ak->from_float_activation != nullptr);
            s.conversions.push_back({j.x, j.n_tokens, n, p.wk->vec_dot_type, ak, p.xq_row_bytes, n_bytes, n_conv_rows});
            n_bytes += static_cast<size_t>(j.n_tokens) * p.xq_row_bytes;
            n_conv_rows += j.n_tokens;
        }
        p.conversion = c;
    }
    if (n_groups == 0) return;
    if (s.activations.size() < n_bytes) s.activations.resize(n_bytes);

    // Convert activations: the rows of every conversion, numbered in order, a few
    // contiguous ranges per thread.
    if (n_conv_rows > 0) {
        const int64_t n_chunks = std::min(n_conv_rows, 4 * n_threads);
        const int64_t rows_per_chunk = (n_conv_rows + n_chunks - 1) / n_chunks;
        run(pool, n_chunks, [&](int64_t chunk) {
            const int64_t r0 = chunk * rows_per_chunk;
            const int64_t r1 = std::min(n_conv_rows, r0 + rows_per_chunk);
            for (const conversion & c : s.conversions) {
                const int64_t t0 = std::max<int64_t>(0, r0 - c.first_row);
                const int64_t t1 = std::min(c.n_tokens, r1 - c.first_row);
                for (int64_t t = t0; t < t1; ++t) {
                    c.ak->from_float_activation(c.x + t * c.n, s.activations.data() + c.offset + static_cast<size_t>(t) * c.row_bytes, c.n);
                }
            }
        });
    }

    // Row groups of all products, numbered in order, shared out in contiguous ranges:
    // a few per thread so uneven threads still finish together. Every task covers all
    // of a product's tokens: each weight row is read from memory once per call and
    // reused from cache for every token (the tiles loop over tokens inside).
    const int64_t n_tasks = std::min<int64_t>(n_groups, n_threads == 1 ? 1 : 4 * n_threads);
    const int64_t groups_per_task = (n_groups + n_tasks - 1) / n_tasks;
    run(pool, n_tasks, [&](int64_t task) {
        const int64_t g0 = task * groups_per_task;
        const int64_t g1 = std::min(n_groups, g0 + groups_per_task);
        for (const product & p : s.products) {
            if (p.wk == nullptr) continue;
            const matmul_job & j = *p.job;
            const int64_t r0 = std::max<int64_t>(0, (g0 - p.first_group) * k_row_align);
            const int64_t r1 = std::min(j.w.n_rows, (g1 - p.first_group) * k_row_align);
            if (r0 >= r1) continue;
            const uint8_t * xq = p.conversion == SIZE_MAX ? reinterpret_cast<const uint8_t *>(j.x)
                                                          : s.activations.data() + s.conversions[p.conversion].offset;
            const uint8_t * w_rows = j.w.data + r0 * p.w_row_bytes;
            float * y = j.y + r0;
            if (p.wk->mul_tile != nullptr) {
                p.wk->mul_tile(w_rows, p.w_row_bytes, r1 - r0, xq, p.xq_row_bytes, j.n_tokens, j.w.n_cols, y, j.w.n_rows);
            } else {
                loop_mul_tile(p.wk->vec_dot, w_rows, p.w_row_bytes, r1 - r0, xq, p.xq_row_bytes, j.n_tokens, j.w.n_cols, y,
                              j.w.n_rows);
            }
        }
    });
}

void matmul_many(std::span<const matmul_output> outputs, const float * x, int64_t n_tokens, thread_pool * pool) {
    assert(outputs.size() <= k_max_outputs);
    std::array<matmul_job, k_max_outputs> jobs{};
    const size_t n = std::min(outputs.size(), k_max_outputs);
    for (size_t i = 0; i < n; ++i) {
        assert(outputs[i].w.n_cols == outputs[0].w.n_cols && "matmul_many: products must share the input width");
        jobs[i] = {outputs[i].w, x, n_tokens, outputs[i].y};
    }
    matmul_grouped(std::span<const matmul_job>(jobs.data(), n), pool);
}

void matmul(const matrix_view & w, const float * x, int64_t n_tokens, float * y, thread_pool * pool) {
    const matmul_job job{w, x, n_tokens, y};
    matmul_grouped(std::span<const matmul_job>(&job, 1), pool);
}

}  // namespace skippy::kernels
