// The AMX entries of the kernel table (see quants_amx.h).
#include "kernels/quants_amx.h"

namespace skippy::kernels::amx {

// No entry is replaced yet: the AMX table runs the AVX-512 kernels.
void install_kernels(type_kernels * entries, size_t n) {
    (void)entries;
    (void)n;
}

}  // namespace skippy::kernels::amx
