// Measures how fast this machine streams memory into the cores, for the benchmark's
// decode bandwidth ratio (decode is memory-bound: each token reads every weight once).
#pragma once

#include <cstdint>

namespace skippy::cli {

// Best-of-`passes` read bandwidth in bytes/s over a buffer of `buffer_bytes` (much
// larger than the caches), read by `n_threads` threads in disjoint parts.
double measure_read_bandwidth(int32_t n_threads, int64_t buffer_bytes = int64_t(1) << 30, int passes = 5);

}  // namespace skippy::cli
