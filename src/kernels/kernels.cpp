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

void dot_rows(tensor_type t, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, const uint8_t * x,
              size_t x_stride_bytes, int64_t n_x, int64_t n, float * y, int64_t y_stride) {
    assert(t == tensor_type::f32 || t == tensor_type::f16);
    const type_kernels * k = active_kernels(t);
    if (k->mul_tile != nullptr) {
        k->mul_tile(rows, row_stride_bytes, n_rows, x, x_stride_bytes, n_x, n, y, y_stride);
        return;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t i = 0; i < n_x; ++i) y[i * y_stride + r] = k->vec_dot(rows + r * row_stride_bytes, x + i * x_stride_bytes, n);
    }
}

void add_scaled_rows(tensor_type t, const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows,
                     float * y, int64_t n) {
    const type_kernels * k = active_kernels(t);
    assert(k != nullptr && k->add_scaled != nullptr);
    k->add_scaled(a, rows, row_stride_bytes, n_rows, y, n);
}

void add_scaled_rows_heads(tensor_type t, const float * a, int64_t a_stride, int32_t n_heads, const uint8_t * rows,
                           size_t row_stride_bytes, int64_t n_rows, float * y, int64_t y_stride, int64_t n) {
    const type_kernels * k = active_kernels(t);
    assert(k != nullptr && k->add_scaled != nullptr);
    if (k->add_scaled_heads != nullptr) {
        k->add_scaled_heads(a, a_stride, n_heads, rows, row_stride_bytes, n_rows, y, y_stride, n);
        return;
    }
    for (int32_t g = 0; g < n_heads; ++g) k->add_scaled(a + g * a_stride, rows, row_stride_bytes, n_rows, y + g * y_stride, n);
}

const char * active_implementation() { return implementation_name(active_impl()); }

status select_implementation(std::string_view name) {
    if (name == "auto") {
        implementation best = implementation::scalar;
        for (implementation impl : k_all_implementations) {
            if (cpu_supports(impl)) best = impl;
        }
        set_active_impl(best);
        return status::ok();
    }
    for (implementation impl : k_all_implementations) {
        if (name != implementation_name(impl)) continue;
        if (!cpu_supports(impl)) {
            return {error_code::unsupported,
                    std::string("kernel path '") + implementation_name(impl) + "' needs " + missing_cpu_features(impl) +
                        ", which this CPU or system lacks"};
        }
        set_active_impl(impl);
        return status::ok();
    }
    return {error_code::invalid_argument,
            "'" + std::string(name) + "' is not a kernel path (scalar, avx2, avx512, amx or auto)"};
}

std::vector<std::string> supported_implementations() {
    std::vector<std::string> out;
    for (implementation impl : k_all_implementations) {
        if (cpu_supports(impl)) out.emplace_back(implementation_name(impl));
    }
    return out;
}

}  // namespace skippy::kernels
