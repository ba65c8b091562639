// The kernel tables and the choice of implementation.
#include "kernels/type_kernels.h"

#include "kernels/quants_avx2.h"
#include "kernels/quants_scalar.h"

#include "base/log.h"

#include <array>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <string_view>

#if SKIPPY_KERNELS_AVX2
#include "kernels/quants_amx.h"
#include "kernels/quants_avx512.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

// The AVX2 table with what the AVX-512 kernels accelerate replaced (avx512_table.cpp).
table make_avx512_table() {
    table t = make_avx2_table();
    avx512::install_kernels(t.data(), t.size());
    return t;
}

// The AVX-512 table with what the AMX tiles accelerate replaced (amx_table.cpp).
table make_amx_table() {
    table t = make_avx512_table();
    amx::install_kernels(t.data(), t.size());
    return t;
}
#endif

// What CPUID and XCR0 say, read once. AMX also needs the kernel's permission to use
// tile data (Linux 5.16+, arch_prctl ARCH_REQ_XCOMP_PERM), asked for here: without it
// the first tile instruction kills the process.
struct cpu_features {
    bool         avx2 = false;  // with FMA, F16C and YMM state enabled by the OS
    bool         avx512 = false;  // F, BW, VL, DQ, VNNI, with ZMM and opmask state enabled
    bool         amx = false;     // TILE, INT8, tile state enabled and permitted
    const char * avx2_missing = "a build with the x86-64 kernels";
    const char * avx512_missing = "a build with the x86-64 kernels";
    const char * amx_missing = "a build with the x86-64 kernels";
};

cpu_features read_cpu_features() {
    cpu_features f;
#if SKIPPY_KERNELS_AVX2
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        f.avx2_missing = f.avx512_missing = f.amx_missing = "CPUID leaf 1";
        return f;
    }
    const bool fma = (ecx & (1u << 12)) != 0;
    const bool osxsave = (ecx & (1u << 27)) != 0;
    const bool avx = (ecx & (1u << 28)) != 0;
    const bool f16c = (ecx & (1u << 29)) != 0;
    uint64_t xcr0 = 0;
    if (osxsave) {
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
    }
    unsigned ebx7 = 0, ecx7 = 0, edx7 = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        ebx7 = ebx;
        ecx7 = ecx;
        edx7 = edx;
    }
    const bool avx2 = (ebx7 & (1u << 5)) != 0;
    if (!(fma && avx && f16c && avx2)) {
        f.avx2_missing = !avx2 ? "AVX2" : !fma ? "FMA" : !f16c ? "F16C" : "AVX";
    } else if (!osxsave || (xcr0 & 0x6u) != 0x6u) {
        f.avx2_missing = "YMM state enabled by the OS";
    } else {
        f.avx2 = true;
        f.avx2_missing = "";
    }
    if (!f.avx2) {
        f.avx512_missing = f.amx_missing = f.avx2_missing;
        return f;
    }
    const bool avx512f = (ebx7 & (1u << 16)) != 0;
    const bool avx512dq = (ebx7 & (1u << 17)) != 0;
    const bool avx512bw = (ebx7 & (1u << 30)) != 0;
    const bool avx512vl = (ebx7 & (1u << 31)) != 0;
    const bool avx512vnni = (ecx7 & (1u << 11)) != 0;
    if (!avx512f) {
        f.avx512_missing = "AVX-512 F";
    } else if (!avx512bw) {
        f.avx512_missing = "AVX-512 BW";
    } else if (!avx512vl) {
        f.avx512_missing = "AVX-512 VL";
    } else if (!avx512dq) {
        f.avx512_missing = "AVX-512 DQ";
    } else if (!avx512vnni) {
        f.avx512_missing = "AVX-512 VNNI";
    } else if ((xcr0 & 0xe0u) != 0xe0u) {
        f.avx512_missing = "ZMM and opmask state enabled by the OS";
    } else {
        f.avx512 = true;
        f.avx512_missing = "";
    }
    if (!f.avx512) {
        f.amx_missing = f.avx512_missing;
        return f;
    }
    const bool amx_tile = (edx7 & (1u << 24)) != 0;
    const bool amx_int8 = (edx7 & (1u << 25)) != 0;
    if (!amx_tile) {
        f.amx_missing = "AMX-TILE";
    } else if (!amx_int8) {
        f.amx_missing = "AMX-INT8";
    } else if ((xcr0 & 0x60000u) != 0x60000u) {
        f.amx_missing = "AMX tile state enabled by the OS";
    } else {
        constexpr long arch_req_xcomp_perm = 0x1023;
        constexpr long xfeature_xtiledata = 18;
        if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0) {
            f.amx_missing = "the kernel's permission for AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)";
        } else {
            f.amx = true;
            f.amx_missing = "";
        }
    }
#endif
    return f;
}

const cpu_features & features() {
    static const cpu_features f = read_cpu_features();
    return f;
}

implementation fastest_supported() {
    implementation best = implementation::scalar;
    for (implementation impl : k_all_implementations) {
        if (cpu_supports(impl)) best = impl;
    }
    return best;
}

implementation choose_implementation() {
    const char * env = std::getenv("SKIPPY_KERNELS");
    const std::string_view wanted = env ? env : "";
    if (wanted.empty() || wanted == "auto") return fastest_supported();
    for (implementation impl : k_all_implementations) {
        if (wanted != implementation_name(impl)) continue;
        if (cpu_supports(impl)) return impl;
        SKIPPY_LOG_WARN("SKIPPY_KERNELS=%s, but this CPU lacks %s; using the fastest supported path", env,
                        missing_cpu_features(impl));
        return fastest_supported();
    }
    SKIPPY_LOG_WARN("SKIPPY_KERNELS=%s is not a kernel path (scalar, avx2, avx512, amx, auto); using auto", env);
    return fastest_supported();
}

// -1 until chosen.
std::atomic<int> g_active_impl{-1};

using type_index = std::array<const type_kernels *, 64>;

type_index make_index(implementation impl) {
    type_index a{};
    for (uint32_t i = 0; i < a.size(); ++i) a[i] = kernel_table(impl, static_cast<tensor_type>(i));
    return a;
}

}  // namespace

const char * implementation_name(implementation impl) {
    switch (impl) {
        case implementation::scalar: return "scalar";
        case implementation::avx2: return "avx2";
        case implementation::avx512: return "avx512";
        case implementation::amx: return "amx";
    }
    return "scalar";
}

bool cpu_supports(implementation impl) {
    switch (impl) {
        case implementation::scalar: return true;
        case implementation::avx2: return features().avx2;
        case implementation::avx512: return features().avx512;
        case implementation::amx: return features().amx;
    }
    return false;
}

const char * missing_cpu_features(implementation impl) {
    switch (impl) {
        case implementation::scalar: return "";
        case implementation::avx2: return features().avx2_missing;
        case implementation::avx512: return features().avx512_missing;
        case implementation::amx: return features().amx_missing;
    }
    return "";
}

const type_kernels * kernel_table(implementation impl, tensor_type t) {
    if (!cpu_supports(impl)) return nullptr;
    switch (impl) {
        case implementation::scalar: return find(k_scalar_table, t);
        case implementation::avx2: {
#if SKIPPY_KERNELS_AVX2
            static const table avx2_table = make_avx2_table();
            return find(avx2_table, t);
#else
            return nullptr;
#endif
        }
        case implementation::avx512: {
#if SKIPPY_KERNELS_AVX2
            static const table avx512_table = make_avx512_table();
            return find(avx512_table, t);
#else
            return nullptr;
#endif
        }
        case implementation::amx: {
#if SKIPPY_KERNELS_AVX2
            static const table amx_table = make_amx_table();
            return find(amx_table, t);
#else
            return nullptr;
#endif
        }
    }
    return nullptr;
}

implementation active_impl() {
    int v = g_active_impl.load(std::memory_order_acquire);
    if (v < 0) {
        int expected = -1;
        const int chosen = static_cast<int>(choose_implementation());
        v = g_active_impl.compare_exchange_strong(expected, chosen, std::memory_order_acq_rel) ? chosen : expected;
    }
    return static_cast<implementation>(v);
}

void set_active_impl(implementation impl) {
    assert(cpu_supports(impl));
    g_active_impl.store(static_cast<int>(impl), std::memory_order_release);
}

// Looked up per matmul and per attention block: an array per implementation indexed by
// type number, filled once, instead of a search.
const type_kernels * active_kernels(tensor_type t) {
    const type_index * index = nullptr;
    switch (active_impl()) {
        case implementation::scalar: {
            static const type_index a = make_index(implementation::scalar);
            index = &a;
            break;
        }
        case implementation::avx2: {
            static const type_index a = make_index(implementation::avx2);
            index = &a;
            break;
        }
        case implementation::avx512: {
            static const type_index a = make_index(implementation::avx512);
            index = &a;
            break;
        }
        case implementation::amx: {
            static const type_index a = make_index(implementation::amx);
            index = &a;
            break;
        }
    }
    const auto i = static_cast<uint32_t>(t);
    return index != nullptr && i < index->size() ? (*index)[i] : nullptr;
}

}  // namespace skippy::kernels
