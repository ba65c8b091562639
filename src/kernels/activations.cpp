// Element-wise activations of the model families that have one implementation for
// every kernel path (so scalar and AVX2 give the same bits by construction).
#include "kernels/kernels.h"

#include "kernels/quants_scalar.h"

#include <algorithm>

namespace skippy::kernels {

void gelu_gated(const float * gate, const float * up, float * out, int64_t n) {
    constexpr float k_sqrt_2_over_pi = 0.79788456080286535588f;
    constexpr float k_cubic = 0.044715f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        const float x3 = (x * x) * x;
        const float u = k_sqrt_2_over_pi * (x + k_cubic * x3);
        const float e = scalar::exp_approx(-2.0f * u);
        const float g = x / (1.0f + e);
        out[i] = g * up[i];
    }
}

void swiglu_clamped(const float * gate, const float * up, float * out, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(gate[i], limit);
        const float y = std::clamp(up[i], -limit, limit);
        const float g = x / (1.0f + scalar::exp_approx(alpha * -x));
        out[i] = g * (y + 1.0f);
    }
}

}  // namespace skippy::kernels
