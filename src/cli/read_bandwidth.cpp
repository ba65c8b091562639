#include "cli/read_bandwidth.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace skippy::cli {
namespace {

// Reads [p, p + n) with wide loads; the xor keeps the loads alive. The two readers are
// measurements of the hardware: not instrumented by ASan (they read only the buffer
// mapped below), and the file is at -O1 in sanitizer trees (src/cli/CMakeLists.txt).
__attribute__((target("avx2"), no_sanitize("address"))) uint64_t read_avx2(const uint8_t * p, size_t n) {
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    __m256i acc2 = _mm256_setzero_si256(), acc3 = _mm256_setzero_si256();
    for (size_t i = 0; i + 128 <= n; i += 128) {
        acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        acc2 = _mm256_xor_si256(acc2, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        acc3 = _mm256_xor_si256(acc3, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    acc0 = _mm256_xor_si256(_mm256_xor_si256(acc0, acc1), _mm256_xor_si256(acc2, acc3));
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), acc0);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}

__attribute__((no_sanitize("address"))) uint64_t read_plain(const uint8_t * p, size_t n) {
    uint64_t acc = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        std::memcpy(&v, p + i, 8);
        acc ^= v;
    }
    return acc;
}

}  // namespace

double measure_read_bandwidth(int32_t n_threads, int64_t buffer_bytes, int passes) {
    n_threads = std::max(1, n_threads);
    const size_t bytes = static_cast<size_t>(buffer_bytes) / 4096 * 4096;
    void * mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 0.0;
    auto * buf = static_cast<uint8_t *>(mem);
    std::memset(buf, 1, bytes);  // commit every page before timing
    const bool avx2 = __builtin_cpu_supports("avx2");
    const size_t part = bytes / static_cast<size_t>(n_threads) / 128 * 128;
    std::atomic<uint64_t> sink{0};
    double best = 0.0;
    for (int pass = 0; pass < passes; ++pass) {
        std::vector<std::thread> threads;
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        for (int32_t t = 0; t < n_threads; ++t) {
            threads.emplace_back([&, t] {
                ready.fetch_add(1);
                while (!go.load(std::memory_order_acquire)) {}
                const uint8_t * p = buf + static_cast<size_t>(t) * part;
                sink.fetch_xor(avx2 ? read_avx2(p, part) : read_plain(p, part));
            });
        }
        while (ready.load() < n_threads) {}
        const auto t0 = std::chrono::steady_clock::now();
        go.store(true, std::memory_order_release);
        for (auto & th : threads) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(part) * n_threads / s);
    }
    munmap(mem, bytes);
    return best;
}

}  // namespace skippy::cli
