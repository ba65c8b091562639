// The checksums of the cache's byte images, per byte: CRC-32C (what KV pages and state
// snapshots carry; its SSE4.2 path and the table reference) against SHA-256 (what
// content addresses and prefix keys use), over a page-sized buffer. A restore from the
// exact-state tier checks one checksum over every byte it imports.
#include "base/crc32c.h"
#include "cache/digest.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

std::vector<uint8_t> page_bytes(size_t n) {
    std::vector<uint8_t> out(n);
    uint32_t x = 12345;
    for (auto & b : out) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
    return out;
}

void bm_crc32c(benchmark::State & state) {
    const auto data = page_bytes(static_cast<size_t>(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(skippy::crc32c(data));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

void bm_crc32c_reference(benchmark::State & state) {
    const auto data = page_bytes(static_cast<size_t>(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(skippy::crc32c_detail::crc32c_reference(data));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

void bm_sha256(benchmark::State & state) {
    const auto data = page_bytes(static_cast<size_t>(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(skippy::cache::sha256(data));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK(bm_crc32c)->Arg(16 << 10)->Arg(4 << 20);
BENCHMARK(bm_crc32c_reference)->Arg(4 << 20);
BENCHMARK(bm_sha256)->Arg(16 << 10)->Arg(4 << 20);

}  // namespace
