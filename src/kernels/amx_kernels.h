// The AMX tiles per weight type (internal to kernels): each installer keeps the entry's
// previous mul_tile (the AVX-512 table's) for what the tiles do not take (fewer than 8
// tokens, see k_min_tokens in amx_util.h; the last rows of a tile that are not a group
// of 16) and puts its own in place.
// Declarations only, so amx_table.cpp and the kernel files share them.
#pragma once

#include "kernels/type_kernels.h"

namespace skippy::kernels::amx {

void install_q8_0(type_kernels & k);  // amx_q8_0.cpp
void install_q4_0(type_kernels & k);  // amx_q8_0.cpp
void install_q4_k(type_kernels & k);  // amx_q4_k.cpp
void install_q5_k(type_kernels & k);  // amx_q4_k.cpp
void install_q6_k(type_kernels & k);  // amx_q6_k.cpp

}  // namespace skippy::kernels::amx
