// Element-wise kernels of the forward pass (softmax weights, SwiGLU) and of sampling
// (argmax, the finiteness check): the scalar reference and the dispatch to AVX2 or
// AVX-512 (which the AMX path uses too).
#include "kernels/kernels.h"

#include "kernels/exp_approx.h"
#include "kernels/quants_scalar.h"
#include "kernels/type_kernels.h"

#include "base/fp16.h"

#include <cmath>
#include <cstring>

#if SKIPPY_KERNELS_AVX2
#include "kernels/avx512_kernels.h"
#include "kernels/quants_avx2.h"
#endif

namespace skippy::kernels {
namespace scalar {

// exp_approx.h's sequence, one operation per statement.
float exp_approx(float x) {
    if (x != x) return x;
    if (x < k_exp_min) return 0.0f;
    const float xc = x > k_exp_max ? k_exp_max : x;
    const float fx = xc * k_log2e;
    const float n = (fx + k_round_magic) - k_round_magic;
    const float nh = n * k_ln2_hi;
    float r = xc - nh;
    const float nl = n * k_ln2_lo;
    r = r - nl;
    float p = k_p0 * r;
    p = p + k_p1;
    p = p * r;
    p = p + k_p2;
    p = p * r;
    p = p + k_p3;
    p = p * r;
    p = p + k_p4;
    p = p * r;
    p = p + k_p5;
    const float z = r * r;
    float y = p * z;
    y = y + r;
    y = y + 1.0f;
    const uint32_t scale_bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    return y * bits_to_float(scale_bits);
}

void exp_shifted(const float * x, float shift, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = exp_approx(x[i] - shift);
}

void swiglu(const float * gate, const float * up, float * out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float e = exp_approx(-g);
        const float d = 1.0f + e;
        const float s = g / d;
        out[i] = s * up[i];
    }
}

int64_t argmax_first(const float * x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
        if (x[i] > x[best]) best = i;
    }
    return best;
}

bool all_finite(const float * x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(x[i])) return false;
    }
    return true;
}

}  // namespace scalar

void exp_shifted(const float * x, float shift, float * y, int64_t n) {
#if SKIPPY_KERNELS_AVX2
    const implementation impl = active_impl();
    if (impl == implementation::avx512 || impl == implementation::amx) return avx512::exp_shifted(x, shift, y, n);
    if (impl == implementation::avx2) return avx2::exp_shifted(x, shift, y, n);
#endif
    scalar::exp_shifted(x, shift, y, n);
}

// AVX-512 runs four rows side by side; the other paths take the rows one by one (AVX2's
// exp_shifted already takes 8 values a vector).
void exp_shifted_rows(const float * x, int64_t x_stride, const float * shifts, int32_t n_rows, float * y, int64_t y_stride,
                      int64_t n) {
#if SKIPPY_KERNELS_AVX2
    const implementation impl = active_impl();
    if (impl == implementation::avx512 || impl == implementation::amx) {
        return avx512::exp_shifted_rows(x, x_stride, shifts, n_rows, y, y_stride, n);
    }
#endif
    for (int32_t r = 0; r < n_rows; ++r) exp_shifted(x + r * x_stride, shifts[r], y + r * y_stride, n);
}

void swiglu(const float * gate, const float * up, float * out, int64_t n) {
#if SKIPPY_KERNELS_AVX2
    const implementation impl = active_impl();
    if (impl == implementation::avx512 || impl == implementation::amx) return avx512::swiglu(gate, up, out, n);
    if (impl == implementation::avx2) return avx2::swiglu(gate, up, out, n);
#endif
    scalar::swiglu(gate, up, out, n);
}

// AVX2 for the AVX-512 and AMX paths too: these passes are read-bound, and eight lanes
// already take them from L2 at about the rate it delivers.
int64_t argmax_first(const float * x, int64_t n) {
#if SKIPPY_KERNELS_AVX2
    if (active_impl() != implementation::scalar) return avx2::argmax_first(x, n);
#endif
    return scalar::argmax_first(x, n);
}

bool all_finite(const float * x, int64_t n) {
#if SKIPPY_KERNELS_AVX2
    if (active_impl() != implementation::scalar) return avx2::all_finite(x, n);
#endif
    return scalar::all_finite(x, n);
}

}  // namespace skippy::kernels
