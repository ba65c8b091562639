// The AMX kernels (internal to kernels): installed into a copy of the AVX-512 table.
//
// The amx_*.cpp files are compiled with the AVX-512 flags plus -mamx-tile -mamx-int8
// and follow avx2_util.h's linkage rule; this header only declares, so baseline files
// may include it.
#pragma once

#include "kernels/type_kernels.h"

#include <cstddef>

namespace skippy::kernels::amx {

// Replaces the entries of `entries` (a copy of the AVX-512 table, n of them) that the
// AMX tiles accelerate (matrix-matrix products); every replacement gives the scalar
// entry's bits. REQUIRES: cpu_supports(implementation::amx) (tile data permitted).
void install_kernels(type_kernels * entries, size_t n);

}  // namespace skippy::kernels::amx
