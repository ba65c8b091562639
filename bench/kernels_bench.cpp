// Kernel throughput at the shapes of `make-model --preset bench-200m` (n_embd 1024,
// n_ff 2816, 16/4 heads of 64).
//
//   BM_matvec/<type>/<rows>x<cols>/threads:N   decode: one token, weights streamed from
//       memory (the bench cycles through copies of the matrix totalling >= 256 MiB, so
//       they do not sit in cache, as a whole model does not). Reports bytes/s of weights.
//   BM_matmul/<type>/<rows>x<cols>/tokens/threads:N   prefill: many tokens, each weight
//       block reused across them. Reports FLOP/s (2 per multiply-add) as items/s.
//       The weights cycle over copies as in BM_matvec, so tokens:1 and the few tokens
//       of a batched decode step include reading them from memory; BM_decode_tile
//       below is the compute ceiling.
//   BM_decode_tile/<type>/<path>/tokens:N   a decode tile alone: one kernel path's
//       mul_tile on 256 x 1024 weights that stay in L2 and N already-converted tokens,
//       bytes/s of weights: the kernel's compute ceiling for decode, without matmul's
//       activation conversion and thread pool. Ten repetitions: their median is the
//       steadier figure on a shared machine.
//   BM_activation/<type>   activation encoders, input bytes/s.
//   BM_dot_rows_f16, BM_add_scaled_f16   attention helpers (one KV block of 16 keys).
//   BM_parallel_for_overhead   cost of one tiny parallel_for on the pool.
//
// Run: build/bench/skippy_kernels_bench [--benchmark_filter=Q4_K] (SKIPPY_KERNELS=scalar
// measures the reference path).
#include "kernels/kernels.h"
#include "kernels/type_kernels.h"

#include "base/tensor_type.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace skippy;
using namespace skippy::kernels;

std::vector<float> random_floats(int64_t n, uint64_t seed, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (auto & x : v) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        const uint64_t r = s * 0x2545f4914f6cdd1dull;
        x = scale * (static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    return v;
}

// One weight matrix, quantized by the library's encoder.
std::vector<uint8_t> make_matrix(tensor_type t, int64_t n_rows, int64_t n_cols) {
    const size_t rb = row_bytes(t, n_cols);
    std::vector<uint8_t> m(rb * static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto row = random_floats(n_cols, static_cast<uint64_t>(r) + 1, 0.05f);
        quantize_row(t, row.data(), m.data() + rb * static_cast<size_t>(r), n_cols);
    }
    return m;
}

thread_pool * pool_of(int n_threads) {
    static std::unique_ptr<thread_pool> pools[9];
    if (!pools[n_threads]) pools[n_threads] = std::make_unique<thread_pool>(n_threads);
    return pools[n_threads].get();
}

const tensor_type k_types[] = {tensor_type::f32,  tensor_type::f16,    tensor_type::bf16,  tensor_type::q8_0,
                               tensor_type::q4_0, tensor_type::q5_0,   tensor_type::q5_1,  tensor_type::iq4_nl,
                               tensor_type::mxfp4, tensor_type::q2_k,  tensor_type::q3_k,  tensor_type::q4_k,
                               tensor_type::q5_k, tensor_type::q6_k,   tensor_type::iq4_xs};

struct shape {
    int64_t n_rows, n_cols;
};
const shape k_shapes[] = {{2816, 1024} /* ffn_up/gate */, {1024, 2816} /* ffn_down */, {1024, 1024} /* attn_q/o */};
// An 8B-class model's (Llama 3.1 8B: n_embd 4096, n_ff 14336): rows of 16 and 56
// super-blocks, where bench-200m's have 4 and 11.
const shape k_large_shapes[] = {{4096, 4096} /* attn_q/o */, {4096, 14336} /* ffn_down */};

// A model pass reads each matrix from memory, not from cache: the products cycle over
// copies of the matrix spanning 256 MiB.
struct matrix_copies {
    tensor_type          type;
    shape                dims;
    size_t               matrix_bytes;
    size_t               n_copies;
    std::vector<uint8_t> all;
    size_t               next = 0;

    matrix_copies(tensor_type t, shape s)
        : type(t), dims(s), matrix_bytes(row_bytes(t, s.n_cols) * static_cast<size_t>(s.n_rows)),
          n_copies(std::max<size_t>(1, (size_t(256) << 20) / matrix_bytes)), all(matrix_bytes * n_copies) {
        const std::vector<uint8_t> one = make_matrix(t, s.n_rows, s.n_cols);
        for (size_t c = 0; c < n_copies; ++c) std::copy(one.begin(), one.end(), all.begin() + static_cast<ptrdiff_t>(c * matrix_bytes));
    }
    // The next copy to multiply by.
    matrix_view view() {
        const matrix_view w{type, all.data() + next * matrix_bytes, dims.n_cols, dims.n_rows};
        next = (next + 1) % n_copies;
        return w;
    }
};

void matvec(benchmark::State & state, tensor_type t, shape s, int n_threads) {
    matrix_copies m(t, s);
    const auto x = random_floats(s.n_cols, 99, 1.0f);
    std::vector<float> y(static_cast<size_t>(s.n_rows));
    thread_pool * pool = pool_of(n_threads);
    for (auto _ : state) {
        matmul(m.view(), x.data(), 1, y.data(), pool);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * m.matrix_bytes));
}

void matmul_tokens(benchmark::State & state, tensor_type t, shape s, int64_t n_tokens, int n_threads) {
    matrix_copies m(t, s);
    const auto x = random_floats(s.n_cols * n_tokens, 7, 1.0f);
    std::vector<float> y(static_cast<size_t>(s.n_rows * n_tokens));
    thread_pool * pool = pool_of(n_threads);
    for (auto _ : state) {
        matmul(m.view(), x.data(), n_tokens, y.data(), pool);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetItemsProcessed(state.iterations() * 2 * s.n_rows * s.n_cols * n_tokens);
    state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * s.n_rows * s.n_cols * n_tokens) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void decode_tile(benchmark::State & state, tensor_type t, implementation impl, int64_t n_tokens) {
    const type_kernels * k = kernel_table(impl, t);
    const type_kernels * ak = kernel_table(impl, k->vec_dot_type);
    const int64_t n_rows = 256, n = 1024;
    const std::vector<uint8_t> w = make_matrix(t, n_rows, n);
    const size_t w_row = row_bytes(t, n), x_row = row_bytes(k->vec_dot_type, n);
    std::vector<uint8_t> xq(x_row * static_cast<size_t>(n_tokens));
    for (int64_t i = 0; i < n_tokens; ++i) {
        ak->from_float_activation(random_floats(n, 11 + static_cast<uint64_t>(i), 1.0f).data(), xq.data() + x_row * static_cast<size_t>(i), n);
    }
    std::vector<float> y(static_cast<size_t>(n_rows * n_tokens));
    for (auto _ : state) {
        k->mul_tile(w.data(), w_row, n_rows, xq.data(), x_row, n_tokens, n, y.data(), n_rows);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
}

void activation(benchmark::State & state, tensor_type weight_type) {
    const type_kernels * wk = active_kernels(weight_type);
    const type_kernels * ak = active_kernels(wk->vec_dot_type);
    const int64_t n = 2816;
    const auto x = random_floats(n, 3, 1.0f);
    std::vector<uint8_t> out(row_bytes(wk->vec_dot_type, n));
    for (auto _ : state) {
        ak->from_float_activation(x.data(), out.data(), n);
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(state.iterations() * n * 4);
}

// 16 keys of one KV head (row stride n_head_kv * head_dim) against the 4 query heads
// that share it, as attention does per KV block.
void BM_dot_rows_f16(benchmark::State & state) {
    const int64_t head_dim = 64, kv_dim = 256, n_keys = 16, group = 4;
    std::vector<uint8_t> k(static_cast<size_t>(n_keys * kv_dim * 2));
    quantize_row(tensor_type::f16, random_floats(n_keys * kv_dim, 1, 1.0f).data(), k.data(), n_keys * kv_dim);
    std::vector<uint8_t> q(static_cast<size_t>(group * head_dim * 2));
    quantize_row(tensor_type::f16, random_floats(group * head_dim, 2, 1.0f).data(), q.data(), group * head_dim);
    std::vector<float> scores(static_cast<size_t>(group * n_keys));
    for (auto _ : state) {
        dot_rows(tensor_type::f16, k.data(), kv_dim * 2, n_keys, q.data(), head_dim * 2, group, head_dim, scores.data(), n_keys);
        benchmark::DoNotOptimize(scores.data());
    }
    state.SetItemsProcessed(state.iterations() * 2 * n_keys * group * head_dim);
}
BENCHMARK(BM_dot_rows_f16);

void BM_add_scaled_f16(benchmark::State & state) {
    const int64_t head_dim = 64, kv_dim = 256, n_keys = 16;
    std::vector<uint8_t> v(static_cast<size_t>(n_keys * kv_dim * 2));
    quantize_row(tensor_type::f16, random_floats(n_keys * kv_dim, 1, 1.0f).data(), v.data(), n_keys * kv_dim);
    const auto weights = random_floats(n_keys, 2, 1e-3f);
    std::vector<float> acc(static_cast<size_t>(head_dim), 0.0f);
    for (auto _ : state) {
        add_scaled_rows(tensor_type::f16, weights.data(), v.data(), kv_dim * 2, n_keys, acc.data(), head_dim);
        benchmark::DoNotOptimize(acc.data());
    }
    state.SetItemsProcessed(state.iterations() * 2 * n_keys * head_dim);
}
BENCHMARK(BM_add_scaled_f16);

void BM_parallel_for_overhead(benchmark::State & state) {
    thread_pool * pool = pool_of(static_cast<int>(state.range(0)));
    std::vector<int64_t> out(64);
    for (auto _ : state) {
        pool->parallel_for(static_cast<int64_t>(state.range(0)), [&](int64_t i) { out[static_cast<size_t>(i)] += i; });
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(BM_parallel_for_overhead)->Arg(2)->Arg(4)->UseRealTime();

[[maybe_unused]] const bool k_registered = [] {
    for (tensor_type t : k_types) {
        const std::string type_name(tensor_type_name(t));
        for (const shape & s : k_shapes) {
            const std::string dims = std::to_string(s.n_rows) + "x" + std::to_string(s.n_cols);
            for (int n_threads : {1, 2}) {
                benchmark::RegisterBenchmark(("BM_matvec/" + type_name + "/" + dims + "/threads:" + std::to_string(n_threads)).c_str(),
                                             [=](benchmark::State & st) { matvec(st, t, s, n_threads); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMicrosecond);
            }
            for (int64_t n_tokens : {1, 4, 6, 7, 8, 12, 16, 64, 512}) {
                for (int n_threads : {1, 2}) {
                    benchmark::RegisterBenchmark(("BM_matmul/" + type_name + "/" + dims + "/tokens:" + std::to_string(n_tokens) +
                                                  "/threads:" + std::to_string(n_threads))
                                                     .c_str(),
                                                 [=](benchmark::State & st) { matmul_tokens(st, t, s, n_tokens, n_threads); })
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
            }
        }
    }
    for (tensor_type t : k_types) {
        for (const shape & s : k_large_shapes) {
            const std::string dims = std::to_string(s.n_rows) + "x" + std::to_string(s.n_cols);
            for (int64_t n_tokens : {1, 4, 7, 8, 12, 16}) {
                benchmark::RegisterBenchmark(("BM_matmul/" + std::string(tensor_type_name(t)) + "/" + dims + "/tokens:" +
                                              std::to_string(n_tokens) + "/threads:1")
                                                 .c_str(),
                                             [=](benchmark::State & st) { matmul_tokens(st, t, s, n_tokens, 1); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
        }
    }
    for (tensor_type t : k_types) {
        if (get_tensor_type_traits(static_cast<uint32_t>(t))->block_elems == 1) continue;  // F32, F16, BF16
        for (implementation impl : {implementation::avx2, implementation::avx512}) {
            if (!cpu_supports(impl)) continue;
            for (int64_t n_tokens : {1, 3}) {
                benchmark::RegisterBenchmark(("BM_decode_tile/" + std::string(tensor_type_name(t)) + "/" + implementation_name(impl) +
                                              "/tokens:" + std::to_string(n_tokens))
                                                 .c_str(),
                                             [=](benchmark::State & st) { decode_tile(st, t, impl, n_tokens); })
                    ->Repetitions(10)
                    ->Unit(benchmark::kMicrosecond);
            }
        }
    }
    for (tensor_type t : {tensor_type::f16, tensor_type::bf16, tensor_type::q8_0, tensor_type::q5_1, tensor_type::q4_k}) {
        benchmark::RegisterBenchmark(("BM_activation/" + std::string(tensor_type_name(active_kernels(t)->vec_dot_type))).c_str(),
                                     [=](benchmark::State & st) { activation(st, t); });
    }
    return true;
}();

}  // namespace
