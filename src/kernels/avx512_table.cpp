// The AVX-512 entries of the kernel table (see quants_avx512.h).
#include "kernels/quants_avx512.h"

namespace skippy::kernels::avx512 {

// No entry is replaced yet: the AVX-512 table runs the AVX2 kernels.
void install_kernels(type_kernels * entries, size_t n) {
    (void)entries;
    (void)n;
}

}  // namespace skippy::kernels::avx512
