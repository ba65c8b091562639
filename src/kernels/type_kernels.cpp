// The kernel tables and the choice of implementation.
#include "kernels/type_kernels.h"

#include "kernels/quants_avx2.h"
#include "kernels/quants_scalar.h"

#include "base/log.h"

#include <array>
#include <cstdlib>
#include <string_view>

#if SKIPPY_KERNELS_AVX2
#include <cpuid.h>
#endif

namespace skippy::kernels {
namespace {

using table = std::array<type_kernels, 17>;

constexpr table k_scalar_table = {{
    {tensor_type::f32, tensor_type::f32, scalar::to_float_f32, scalar::from_float_f32,
     scalar::from_float_f32, scalar::vec_dot_f32, nullptr, scalar::add_scaled_f32},
    {tensor_type::f16, tensor_type::f16, scalar::to_float_f16, scalar::from_float_f16,
     scalar::from_float_f16, scalar::vec_dot_f16, nullptr, scalar::add_scaled_f16},
    {tensor_type::bf16, tensor_type::bf16, scalar::to_float_bf16, scalar::from_float_bf16,
     scalar::from_float_bf16, scalar::vec_dot_bf16, nullptr, nullptr},
    {tensor_type::q8_0, tensor_type::q8_0, scalar::to_float_q8_0, scalar::from_float_q8_0,
     scalar::from_float_q8_0_activation, scalar::vec_dot_q8_0_q8_0, nullptr, nullptr},
    {tensor_type::q4_0, tensor_type::q8_0, scalar::to_float_q4_0, scalar::from_float_q4_0,
     nullptr, scalar::vec_dot_q4_0_q8_0, nullptr, nullptr},
    {tensor_type::q4_k, tensor_type::q8_k, scalar::to_float_q4_k, scalar::from_float_q4_k,
     nullptr, scalar::vec_dot_q4_k_q8_k, nullptr, nullptr},
    {tensor_type::q6_k, tensor_type::q8_k, scalar::to_float_q6_k, scalar::from_float_q6_k,
     nullptr, scalar::vec_dot_q6_k_q8_k, nullptr, nullptr},
    {tensor_type::q8_k, tensor_type::q8_k, scalar::to_float_q8_k, scalar::from_float_q8_k,
     scalar::from_float_q8_k, nullptr, nullptr, nullptr},
    {tensor_type::q8_1, tensor_type::q8_1, scalar::to_float_q8_1, scalar::from_float_q8_1,
     scalar::from_float_q8_1, nullptr, nullptr, nullptr},
    {tensor_type::q5_0, tensor_type::q8_0, scalar::to_float_q5_0, scalar::from_float_q5_0,
     nullptr, scalar::vec_dot_q5_0_q8_0, nullptr, nullptr},
    {tensor_type::q5_1, tensor_type::q8_1, scalar::to_float_q5_1, scalar::from_float_q5_1,
     nullptr, scalar::vec_dot_q5_1_q8_1, nullptr, nullptr},
    {tensor_type::iq4_nl, tensor_type::q8_0, scalar::to_float_iq4_nl, scalar::from_float_iq4_nl,
     nullptr, scalar::vec_dot_iq4_nl_q8_0, nullptr, nullptr},
    {tensor_type::mxfp4, tensor_type::q8_0, scalar::to_float_mxfp4, scalar::from_float_mxfp4,
     nullptr, scalar::vec_dot_mxfp4_q8_0, nullptr, nullptr},
    {tensor_type::q2_k, tensor_type::q8_k, scalar::to_float_q2_k, scalar::from_float_q2_k,
     nullptr, scalar::vec_dot_q2_k_q8_k, nullptr, nullptr},
    {tensor_type::q3_k, tensor_type::q8_k, scalar::to_float_q3_k, scalar::from_float_q3_k,
     nullptr, scalar::vec_dot_q3_k_q8_k, nullptr, nullptr},
    {tensor_type::q5_k, tensor_type::q8_k, scalar::to_float_q5_k, scalar::from_float_q5_k,
     nullptr, scalar::vec_dot_q5_k_q8_k, nullptr, nullptr},
    {tensor_type::iq4_xs, tensor_type::q8_k, scalar::to_float_iq4_xs, scalar::from_float_iq4_xs,
     nullptr, scalar::vec_dot_iq4_xs_q8_k, nullptr, nullptr},
}};

const type_kernels * find(const table & t, tensor_type type) {
    for (const auto & k : t) {
        if (k.type == type) return &k;
    }
    return nullptr;
}

#if SKIPPY_KERNELS_AVX2
type_kernels & find_mutable(table & t, tensor_type type) {
    for (auto & k : t) {
        if (k.type == type) return k;
    }
    std::abort();  // every type of the scalar table is in the copy
}

// The scalar table with the entries AVX2 accelerates replaced. Conversions that are
// not on a hot path (dequantization for embedding lookups, weight quantization for
// make-model) stay scalar. Every replacement returns the scalar entry's bits.
table make_avx2_table() {
    table t = k_scalar_table;
    type_kernels & f32 = find_mutable(t, tensor_type::f32);
    f32.vec_dot = avx2::vec_dot_f32;
    f32.mul_tile = avx2::mul_tile_f32;
    f32.add_scaled = avx2::add_scaled_f32;
    type_kernels & f16 = find_mutable(t, tensor_type::f16);
    f16.from_float_activation = avx2::from_float_f16;
    f16.vec_dot = avx2::vec_dot_f16;
    f16.mul_tile = avx2::mul_tile_f16;
    f16.add_scaled = avx2::add_scaled_f16;
    type_kernels & bf16 = find_mutable(t, tensor_type::bf16);
    bf16.from_float_activation = avx2::from_float_bf16;
    bf16.vec_dot = avx2::vec_dot_bf16;
    bf16.mul_tile = avx2::mul_tile_bf16;
    type_kernels & q8_0 = find_mutable(t, tensor_type::q8_0);
    q8_0.from_float_activation = avx2::from_float_q8_0_activation;
    q8_0.vec_dot = avx2::vec_dot_q8_0_q8_0;
    q8_0.mul_tile = avx2::mul_tile_q8_0_q8_0;
    type_kernels & q4_0 = find_mutable(t, tensor_type::q4_0);
    q4_0.vec_dot = avx2::vec_dot_q4_0_q8_0;
    q4_0.mul_tile = avx2::mul_tile_q4_0_q8_0;
    type_kernels & q4_k = find_mutable(t, tensor_type::q4_k);
    q4_k.vec_dot = avx2::vec_dot_q4_k_q8_k;
    q4_k.mul_tile = avx2::mul_tile_q4_k_q8_k;
    type_kernels & q6_k = find_mutable(t, tensor_type::q6_k);
    q6_k.vec_dot = avx2::vec_dot_q6_k_q8_k;
    q6_k.mul_tile = avx2::mul_tile_q6_k_q8_k;
    type_kernels & q8_k = find_mutable(t, tensor_type::q8_k);
    q8_k.from_float_activation = avx2::from_float_q8_k;
    type_kernels & q8_1 = find_mutable(t, tensor_type::q8_1);
    q8_1.from_float_activation = avx2::from_float_q8_1;
    struct product {
        tensor_type type;
        vec_dot_fn  vec_dot;
        mul_tile_fn mul_tile;
    };
    const product products[] = {
        {tensor_type::q5_0, avx2::vec_dot_q5_0_q8_0, avx2::mul_tile_q5_0_q8_0},
        {tensor_type::q5_1, avx2::vec_dot_q5_1_q8_1, avx2::mul_tile_q5_1_q8_1},
        {tensor_type::iq4_nl, avx2::vec_dot_iq4_nl_q8_0, avx2::mul_tile_iq4_nl_q8_0},
        {tensor_type::mxfp4, avx2::vec_dot_mxfp4_q8_0, avx2::mul_tile_mxfp4_q8_0},
        {tensor_type::q2_k, avx2::vec_dot_q2_k_q8_k, avx2::mul_tile_q2_k_q8_k},
        {tensor_type::q3_k, avx2::vec_dot_q3_k_q8_k, avx2::mul_tile_q3_k_q8_k},
        {tensor_type::q5_k, avx2::vec_dot_q5_k_q8_k, avx2::mul_tile_q5_k_q8_k},
        {tensor_type::iq4_xs, avx2::vec_dot_iq4_xs_q8_k, avx2::mul_tile_iq4_xs_q8_k},
    };
    for (const product & p : products) {
        type_kernels & k = find_mutable(t, p.type);
        k.vec_dot = p.vec_dot;
        k.mul_tile = p.mul_tile;
    }
    return t;
}
#endif

// AVX2, FMA and F16C in CPUID, and YMM state enabled by the OS (XCR0 bits 1 and 2):
// without the latter the instructions fault even on a CPU that has them.
bool cpu_has_avx2_fma_f16c() {
#if SKIPPY_KERNELS_AVX2
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool fma = (ecx & (1u << 12)) != 0;
    const bool osxsave = (ecx & (1u << 27)) != 0;
    const bool avx = (ecx & (1u << 28)) != 0;
    const bool f16c = (ecx & (1u << 29)) != 0;
    if (!(fma && osxsave && avx && f16c)) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6u) != 0x6u) return false;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return (ebx & (1u << 5)) != 0;  // AVX2
#else  // no AVX2 kernels in this build
    return false;
#endif
}

implementation choose_implementation() {
    const char * env = std::getenv("SKIPPY_KERNELS");
    const std::string_view wanted = env ? env : "";
    if (wanted == "scalar") return implementation::scalar;
    if (!wanted.empty() && wanted != "auto" && wanted != "avx2") {
        SKIPPY_LOG_WARN("SKIPPY_KERNELS=%s is not an implementation (scalar, avx2, auto); using auto", env);
    }
    const bool avx2 = cpu_has_avx2_fma_f16c();
    if (wanted == "avx2" && !avx2) SKIPPY_LOG_WARN("SKIPPY_KERNELS=avx2, but this CPU lacks AVX2, FMA or F16C; using scalar");
    return avx2 ? implementation::avx2 : implementation::scalar;
}

}  // namespace

bool cpu_supports(implementation impl) {
    switch (impl) {
        case implementation::scalar: return true;
        case implementation::avx2: {
            static const bool has = cpu_has_avx2_fma_f16c();
            return has;
        }
    }
    return false;
}

const type_kernels * kernel_table(implementation impl, tensor_type t) {
    switch (impl) {
        case implementation::scalar: return find(k_scalar_table, t);
        case implementation::avx2: {
#if SKIPPY_KERNELS_AVX2
            if (!cpu_supports(implementation::avx2)) return nullptr;
            static const table avx2_table = make_avx2_table();
            return find(avx2_table, t);
#else
            return nullptr;
#endif
        }
    }
    return nullptr;
}

implementation active_impl() {
    static const implementation impl = choose_implementation();
    return impl;
}

// Looked up per matmul and per attention block: an array indexed by type number,
// filled once, instead of a search.
const type_kernels * active_kernels(tensor_type t) {
    static const std::array<const type_kernels *, 64> by_type = [] {
        std::array<const type_kernels *, 64> a{};
        for (uint32_t i = 0; i < a.size(); ++i) a[i] = kernel_table(active_impl(), static_cast<tensor_type>(i));
        return a;
    }();
    const auto i = static_cast<uint32_t>(t);
    return i < by_type.size() ? by_type[i] : nullptr;
}

}  // namespace skippy::kernels
