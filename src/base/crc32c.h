// CRC-32C (Castagnoli): the checksum of the byte images the cache keeps and restores
// (KV pages, recurrent-state snapshots; docs/kv-cache.md). It detects corruption, not
// forgery: where a collision must be infeasible (content addresses, prefix keys) the
// cache uses SHA-256 (cache/digest.h).
//
// The standard parameters (RFC 3720 §B.4, "iSCSI"): reflected polynomial 0x82F63B78,
// register preset to all ones, result inverted. crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstdint>
#include <span>

namespace skippy {

// The CRC-32C of `data`. Chains: crc32c(b, crc32c(a)) == crc32c(a followed by b), and
// crc32c of nothing is 0 (the `seed` returned unchanged). Uses the CPU's CRC32
// instruction (SSE4.2) when it has one, else the table-driven reference; both give the
// same value for every input.
uint32_t crc32c(std::span<const uint8_t> data, uint32_t seed = 0);

namespace crc32c_detail {

// The table-driven reference, one byte at a time: the definition the fast path is
// tested against.
uint32_t crc32c_reference(std::span<const uint8_t> data, uint32_t seed = 0);

// The SSE4.2 path. REQUIRES: has_crc32_instruction().
uint32_t crc32c_hardware(std::span<const uint8_t> data, uint32_t seed = 0);

bool has_crc32_instruction();

// The CRC-32C of a followed by b, from crc32c(a), crc32c(b) and b's length.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace crc32c_detail
}  // namespace skippy
