// The AMX entries of the kernel table (see quants_amx.h): the matrix-matrix products of
// the types whose prefill the tiles speed up. Every other entry, and every product of
// fewer than 8 tokens (decode), stays the AVX-512 table's.
#include "kernels/amx_kernels.h"
#include "kernels/quants_amx.h"

namespace skippy::kernels::amx {

void install_kernels(type_kernels * entries, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        type_kernels & k = entries[i];
        switch (k.type) {
            case tensor_type::q8_0: install_q8_0(k); break;
            case tensor_type::q4_0: install_q4_0(k); break;
            case tensor_type::q4_k: install_q4_k(k); break;
            case tensor_type::q5_k: install_q5_k(k); break;
            case tensor_type::q6_k: install_q6_k(k); break;
            default: break;
        }
    }
}

}  // namespace skippy::kernels::amx
