// The kernel tables and the choice of implementation.
#include "kernels/type_kernels.h"

#include "kernels/quants_scalar.h"

#include "base/log.h"

#include <array>
#include <cstdlib>
#include <string_view>

namespace skippy::kernels {
namespace {

constexpr std::array<type_kernels, 8> k_scalar_table = {{
    {tensor_type::f32, tensor_type::f32, scalar::to_float_f32, scalar::from_float_f32,
     scalar::from_float_f32, scalar::vec_dot_f32, nullptr},
    {tensor_type::f16, tensor_type::f16, scalar::to_float_f16, scalar::from_float_f16,
     scalar::from_float_f16, scalar::vec_dot_f16, nullptr},
    {tensor_type::bf16, tensor_type::bf16, scalar::to_float_bf16, scalar::from_float_bf16,
     scalar::from_float_bf16, scalar::vec_dot_bf16, nullptr},
    {tensor_type::q8_0, tensor_type::q8_0, scalar::to_float_q8_0, scalar::from_float_q8_0,
     scalar::from_float_q8_0_activation, scalar::vec_dot_q8_0_q8_0, nullptr},
    {tensor_type::q4_0, tensor_type::q8_0, scalar::to_float_q4_0, scalar::from_float_q4_0,
     nullptr, scalar::vec_dot_q4_0_q8_0, nullptr},
    {tensor_type::q4_k, tensor_type::q8_k, scalar::to_float_q4_k, scalar::from_float_q4_k,
     nullptr, scalar::vec_dot_q4_k_q8_k, nullptr},
    {tensor_type::q6_k, tensor_type::q8_k, scalar::to_float_q6_k, scalar::from_float_q6_k,
     nullptr, scalar::vec_dot_q6_k_q8_k, nullptr},
    {tensor_type::q8_k, tensor_type::q8_k, scalar::to_float_q8_k, scalar::from_float_q8_k,
     scalar::from_float_q8_k, nullptr, nullptr},
}};

const type_kernels * find(const std::array<type_kernels, 8> & table, tensor_type t) {
    for (const auto & k : table) {
        if (k.type == t) return &k;
    }
    return nullptr;
}

implementation choose_implementation() {
    const char * env = std::getenv("SKIPPY_KERNELS");
    const std::string_view wanted = env ? env : "";
    if (!wanted.empty() && wanted != "scalar" && wanted != "auto") {
        SKIPPY_LOG_WARN("SKIPPY_KERNELS=%s is not an implementation (scalar, auto); using auto", env);
    }
    // The AVX2 table is not written yet: every choice resolves to the scalar path.
    // When it is, "auto" takes it if CPUID reports AVX2, FMA and F16C.
    return implementation::scalar;
}

}  // namespace

const type_kernels * kernel_table(implementation impl, tensor_type t) {
    switch (impl) {
        case implementation::scalar: return find(k_scalar_table, t);
        case implementation::avx2: return nullptr;
    }
    return nullptr;
}

implementation active_impl() {
    static const implementation impl = choose_implementation();
    return impl;
}

const type_kernels * active_kernels(tensor_type t) { return kernel_table(active_impl(), t); }

}  // namespace skippy::kernels
