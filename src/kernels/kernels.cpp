// Row conversions of the public interface, dispatched through the kernel table.
#include "kernels/kernels.h"

#include "kernels/type_kernels.h"

#include <cassert>

namespace skippy::kernels {

bool is_supported(tensor_type t) {
    const type_kernels * k = active_kernels(t);
    return k != nullptr && k->vec_dot != nullptr;
}

void dequantize_row(tensor_type t, const void * src, float * dst, int64_t n) {
    const type_kernels * k = active_kernels(t);
    assert(k != nullptr && k->to_float != nullptr);
    k->to_float(static_cast<const uint8_t *>(src), dst, n);
}

void quantize_row(tensor_type t, const float * src, void * dst, int64_t n) {
    const type_kernels * k = active_kernels(t);
    assert(k != nullptr && k->from_float != nullptr);
    k->from_float(src, static_cast<uint8_t *>(dst), n);
}

const char * active_implementation() {
    switch (active_impl()) {
        case implementation::scalar: return "scalar";
        case implementation::avx2: return "avx2";
    }
    return "scalar";
}

}  // namespace skippy::kernels
