#include "base/crc32c.h"

#include <array>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__)  // _mm_crc32_u64 needs 64-bit mode
#include <nmmintrin.h>
#define SKIPPY_CRC32C_X86 1
#endif

namespace skippy {
namespace {

// Reflected: bit 31 of a register is the coefficient of x^0, bit 0 that of x^31.
constexpr uint32_t k_poly_reflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_byte_table() {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t reg = i;
        for (int bit = 0; bit < 8; ++bit) reg = (reg & 1) ? (reg >> 1) ^ k_poly_reflected : reg >> 1;
        table[i] = reg;
    }
    return table;
}

constexpr std::array<uint32_t, 256> k_byte_table = make_byte_table();

// a(x) * b(x) mod P(x), both reflected. Register states are linear in their input, so
// this is how a state moves past n zero bytes: state * x^(8n).
uint32_t mul_mod_p(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t coefficient = 1u << 31; coefficient != 0; coefficient >>= 1) {
        if (a & coefficient) product ^= b;
        b = (b & 1) ? (b >> 1) ^ k_poly_reflected : b >> 1;  // b *= x
    }
    return product;
}

// x^(8 n) mod P, by squaring.
uint32_t x_pow_8n(uint64_t n) {
    uint32_t result = 1u << 31;  // x^0
    uint32_t power = 1u << 23;   // x^8
    for (; n != 0; n >>= 1) {
        if (n & 1) result = mul_mod_p(result, power);
        power = mul_mod_p(power, power);
    }
    return result;
}

uint32_t reference_update(uint32_t reg, const uint8_t * p, size_t n) {
    for (size_t i = 0; i < n; ++i) reg = k_byte_table[(reg ^ p[i]) & 0xFF] ^ (reg >> 8);
    return reg;
}

#if defined(SKIPPY_CRC32C_X86)

__attribute__((target("sse4.2"))) uint32_t hardware_update_one_stream(uint32_t reg, const uint8_t * p, size_t n) {
    uint64_t reg64 = reg;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        reg64 = _mm_crc32_u64(reg64, word);
    }
    reg = static_cast<uint32_t>(reg64);
    for (; n > 0; ++p, --n) reg = _mm_crc32_u8(reg, *p);
    return reg;
}

// The instruction's latency is three times its issue interval, so one stream runs at a
// third of the speed three independent ones reach. Long inputs go in groups of three
// lanes, each lane's state started at zero and shifted into place afterwards: a lane is
// long enough that the two shifts per group cost about 1% of it.
constexpr size_t k_lane_bytes = 32 * 1024;

__attribute__((target("sse4.2"))) uint32_t hardware_update(uint32_t reg, const uint8_t * p, size_t n) {
    static const uint32_t shift_one_lane = x_pow_8n(k_lane_bytes);
    for (; n >= 3 * k_lane_bytes; p += 3 * k_lane_bytes, n -= 3 * k_lane_bytes) {
        uint64_t a = reg, b = 0, c = 0;
        const uint8_t * pa = p;
        const uint8_t * pb = p + k_lane_bytes;
        const uint8_t * pc = p + 2 * k_lane_bytes;
        for (size_t i = 0; i < k_lane_bytes; i += 8) {
            uint64_t wa, wb, wc;
            std::memcpy(&wa, pa + i, 8);
            std::memcpy(&wb, pb + i, 8);
            std::memcpy(&wc, pc + i, 8);
            a = _mm_crc32_u64(a, wa);
            b = _mm_crc32_u64(b, wb);
            c = _mm_crc32_u64(c, wc);
        }
        reg = mul_mod_p(static_cast<uint32_t>(a), shift_one_lane) ^ static_cast<uint32_t>(b);
        reg = mul_mod_p(reg, shift_one_lane) ^ static_cast<uint32_t>(c);
    }
    return hardware_update_one_stream(reg, p, n);
}

#endif

}  // namespace

namespace crc32c_detail {

uint32_t crc32c_reference(std::span<const uint8_t> data, uint32_t seed) {
    return ~reference_update(~seed, data.data(), data.size());
}

bool has_crc32_instruction() {
#if defined(SKIPPY_CRC32C_X86)
    static const bool has = __builtin_cpu_supports("sse4.2");
    return has;
#else
    return false;
#endif
}

uint32_t crc32c_hardware(std::span<const uint8_t> data, uint32_t seed) {
#if defined(SKIPPY_CRC32C_X86)
    return ~hardware_update(~seed, data.data(), data.size());
#else
    return crc32c_reference(data, seed);
#endif
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return mul_mod_p(crc_a, x_pow_8n(len_b)) ^ crc_b;
}

}  // namespace crc32c_detail

uint32_t crc32c(std::span<const uint8_t> data, uint32_t seed) {
    if (crc32c_detail::has_crc32_instruction()) return crc32c_detail::crc32c_hardware(data, seed);
    return crc32c_detail::crc32c_reference(data, seed);
}

}  // namespace skippy
