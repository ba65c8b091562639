// Small helpers shared by the kernel tests.
#pragma once

#include "kernels/kernels.h"
#include "kernels/type_kernels.h"

#include "base/tensor_type.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace skippy::kernels::testing {

// Deterministic pseudo-random numbers (xorshift64*), the same on every platform,
// unlike the distributions of <random>.
class rng {
public:
    explicit rng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
    uint64_t next_u64() {
        state_ ^= state_ >> 12;
        state_ ^= state_ << 25;
        state_ ^= state_ >> 27;
        return state_ * 0x2545f4914f6cdd1dull;
    }
    uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }
    // Uniform in [lo, hi).
    float uniform(float lo, float hi) {
        return lo + (hi - lo) * static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
    }
    // Roughly normal (mean 0, deviation 1): a sum of four uniforms.
    float normal() {
        float s = 0.0f;
        for (int i = 0; i < 4; ++i) s += uniform(-1.0f, 1.0f);
        return s * 0.8660254f;  // sqrt(3/4): each uniform has variance 1/3
    }

private:
    uint64_t state_;
};

// n roughly normal values times `scale`, with a few larger outliers as real weights
// and activations have.
inline std::vector<float> random_row(int64_t n, uint64_t seed, float scale = 1.0f) {
    rng r(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto & x : v) {
        x = r.normal() * scale;
        if (r.next_u32() % 64 == 0) x *= 4.0f;
    }
    return v;
}

inline std::vector<uint8_t> encode(tensor_type t, const std::vector<float> & x) {
    std::vector<uint8_t> out(row_bytes(t, static_cast<int64_t>(x.size())));
    quantize_row(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
    return out;
}

inline std::vector<float> decode(tensor_type t, const std::vector<uint8_t> & bytes, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(t, bytes.data(), out.data(), n);
    return out;
}

// An activation row converted to the vec_dot_type of weight type t.
inline std::vector<uint8_t> encode_activation(tensor_type t, const std::vector<float> & x) {
    const type_kernels * wk = active_kernels(t);
    const type_kernels * ak = active_kernels(wk->vec_dot_type);
    std::vector<uint8_t> out(row_bytes(wk->vec_dot_type, static_cast<int64_t>(x.size())));
    ak->from_float_activation(x.data(), out.data(), static_cast<int64_t>(x.size()));
    return out;
}

inline int64_t block_elems_of(tensor_type t) {
    return get_tensor_type_traits(static_cast<uint32_t>(t))->block_elems;
}

inline const std::vector<tensor_type> & weight_types() {
    static const std::vector<tensor_type> types = {
        tensor_type::f32,  tensor_type::f16,  tensor_type::bf16,   tensor_type::q8_0,  tensor_type::q4_0,
        tensor_type::q5_0, tensor_type::q5_1, tensor_type::iq4_nl, tensor_type::mxfp4, tensor_type::q2_k,
        tensor_type::q3_k, tensor_type::q4_k, tensor_type::q5_k,   tensor_type::q6_k,  tensor_type::iq4_xs};
    return types;
}

// For test names: "Q4_K".
inline std::string type_param_name(tensor_type t) { return std::string(tensor_type_name(t)); }

}  // namespace skippy::kernels::testing
