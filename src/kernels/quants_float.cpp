// F32, F16 and BF16 rows: conversions and dot products.
#include "kernels/quants_scalar.h"

#include "base/byte_io.h"
#include "base/fp16.h"

#include <cstddef>
#include <cstring>

namespace skippy::kernels::scalar {
namespace {

inline float load_f32(const uint8_t * p) { return bits_to_float(load_u32_le(p)); }

// Eight lanes keep the rounding error of long rows low (each lane sums n/8 terms) and
// give the reduction a fixed shape that a SIMD kernel can reproduce exactly.
template <typename load_fn>
float dot_8_lanes(const uint8_t * w, const uint8_t * x, int64_t n, size_t elem_bytes, load_fn load) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
        const float prod = load(w + i * elem_bytes) * load(x + i * elem_bytes);
        lane[i & 7] += prod;
    }
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

}  // namespace

void to_float_f32(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = load_f32(src + 4 * i);
}

void from_float_f32(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_u32_le(dst + 4 * i, float_to_bits(src[i]));
}

float vec_dot_f32(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_8_lanes(w_row, x_row, n, 4, load_f32);
}

void to_float_f16(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16_le(src + 2 * i));
}

void from_float_f16(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_u16_le(dst + 2 * i, f32_to_f16(src[i]));
}

float vec_dot_f16(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_8_lanes(w_row, x_row, n, 2, [](const uint8_t * p) { return f16_to_f32(load_u16_le(p)); });
}

void to_float_bf16(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16_le(src + 2 * i));
}

void from_float_bf16(const float * src, uint8_t * dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_u16_le(dst + 2 * i, f32_to_bf16(src[i]));
}

float vec_dot_bf16(const uint8_t * w_row, const uint8_t * x_row, int64_t n) {
    return dot_8_lanes(w_row, x_row, n, 2, [](const uint8_t * p) { return bf16_to_f32(load_u16_le(p)); });
}

void add_scaled_f32(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * x = rows + r * row_stride_bytes;
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a[r] * load_f32(x + 4 * i);
    }
}

void add_scaled_f16(const float * a, const uint8_t * rows, size_t row_stride_bytes, int64_t n_rows, float * y, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * x = rows + r * row_stride_bytes;
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a[r] * f16_to_f32(load_u16_le(x + 2 * i));
    }
}

}  // namespace skippy::kernels::scalar
