// The AVX-512 kernels (internal to kernels): installed into a copy of the AVX2 table.
//
// The avx512_*.cpp files are compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
// -mavx512vnni (plus the AVX2 flags) and follow avx2_util.h's linkage rule; this header
// only declares, so baseline files may include it.
#pragma once

#include "kernels/type_kernels.h"

#include <cstddef>

namespace skippy::kernels::avx512 {

// Replaces the entries of `entries` (a copy of the AVX2 table, n of them) that the
// AVX-512 kernels accelerate; every replacement gives the scalar entry's bits.
// REQUIRES: cpu_supports(implementation::avx512).
void install_kernels(type_kernels * entries, size_t n);

}  // namespace skippy::kernels::avx512
