// KV pages: a self-describing byte image of a token range of a session's KV
// (DESIGN §4, §6; format spec with a worked example in docs/kv-cache.md).
//
// A page carries the K and V rows of positions [token_start, token_start + token_count)
// for the layers of [layer_start, layer_end) a stage keeps KV for (all of them, but a
// hybrid model's recurrent layers, which keep none), plus everything needed to refuse
// it where it does not fit: dtype, kv_dim, layout, and a CRC-32C checksum over header
// and payload (base/crc32c.h: it guards against corruption; a page's identity is its
// SHA-256 page key, kept outside it). The exact-state cache stores pages; a stage
// imports them back.
//
//   offset  size  field
//        0     8  magic "SKPYKVPG"
//        8     2  format version (u16, 3)
//       10     2  layout id (u16, 1: per layer, K rows of the range then V rows)
//       12     1  dtype (u8: 0 f32, 1 f16 — kv_dtype)
//       13     3  reserved, zero
//       16     4  layer_start (i32)
//       20     4  layer_end (i32)
//       24     4  kv_dim (i32, elements per K and per V row)
//       28     4  n_kv_layers (i32, 1..layer_end - layer_start: the range's layers with KV)
//       32     8  token_start (i64)
//       40     8  token_count (i64)
//       48     8  payload_bytes (u64) = n_kv_layers * 2 * token_count * row_bytes
//       56     …  payload: for il in [0, n_kv_layers): K rows [token_count][row_bytes],
//                 then V rows [token_count][row_bytes]
//   56 + payload   4  CRC-32C of every byte before it (u32)
//
// All integers little-endian. Rows are copied as stored (f16 bits stay f16 bits), so an
// export followed by an import reproduces the KV byte for byte.
#pragma once

#include "base/status.h"
#include "kv/kv.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace skippy {

inline constexpr uint8_t  kv_page_magic[8] = {'S', 'K', 'P', 'Y', 'K', 'V', 'P', 'G'};
// Written: 3, checksummed with CRC-32C. Also read: 2, the same but for a SHA-256
// checksum (32 bytes), which cost a restore one SHA-256 pass over every byte it
// imported; and 1, which had bytes 28..31 reserved (zero) and held every layer of the
// range — the same bytes as a version 2 page of a dense stage.
inline constexpr uint16_t kv_page_version = 3;
inline constexpr uint16_t kv_page_version_sha256 = 2;
inline constexpr uint16_t kv_page_version_all_layers = 1;
// Layout 1: per layer, K rows of the range then V rows, each row kv_dim elements.
inline constexpr uint16_t kv_page_layout_layer_major = 1;
inline constexpr size_t   kv_page_header_bytes = 56;
inline constexpr size_t   kv_page_checksum_bytes = 4;          // version 3
inline constexpr size_t   kv_page_sha256_checksum_bytes = 32;  // versions 1 and 2
// Bounds on positions (token_start + token_count), layer count and kv_dim a page may
// declare, so a hostile header never sizes an allocation or overflows a size.
inline constexpr int64_t  kv_page_max_tokens = int64_t{1} << 24;
inline constexpr int32_t  kv_page_max_layers = 4096;
inline constexpr int32_t  kv_page_max_kv_dim = int32_t{1} << 20;

// What an importer expects a page to be made of (its stage's geometry).
struct kv_page_geometry {
    int32_t  layer_start = 0;
    int32_t  layer_end = 0;   // exclusive
    int32_t  kv_dim = 0;
    kv_dtype dtype = kv_dtype::f16;
    int32_t  n_kv_layers = 0;  // layers of the range with KV; 0: all of them

    int32_t kv_layers() const { return n_kv_layers > 0 ? n_kv_layers : layer_end - layer_start; }
    // Equal, with n_kv_layers 0 read as the whole range.
    bool same_as(const kv_page_geometry & o) const {
        return layer_start == o.layer_start && layer_end == o.layer_end && kv_dim == o.kv_dim && dtype == o.dtype &&
               kv_layers() == o.kv_layers();
    }
};

// The decoded header of a page.
struct kv_page_header {
    uint16_t         version = kv_page_version;
    uint16_t         layout = kv_page_layout_layer_major;
    kv_page_geometry geometry;
    int64_t          token_start = 0;
    int64_t          token_count = 0;
    uint64_t         payload_bytes = 0;
};

// Total bytes of a page of token_count tokens with this geometry (header, payload,
// checksum). REQUIRES: a geometry within the limits above.
size_t kv_page_bytes(const kv_page_geometry & geometry, int64_t token_count);

// Serializes positions [token_start, token_start + token_count) of `seq`.
// REQUIRES (else invalid_argument): 1 <= the pool's n_layers <= layer_end - layer_start
//   (the range's layers with KV, written as n_kv_layers),
//   0 <= token_start, 0 <= token_count, token_start + token_count <= kv_page_max_tokens,
//   token_start + token_count <= seq.n_tokens().
// The sequence is only read; blocks it shares are not copied.
result<std::vector<uint8_t>> export_page(const kv_sequence & seq, int32_t layer_start, int32_t layer_end,
                                         int64_t token_start, int64_t token_count);

// Validates a page without importing it (version 1 reads as a page of every layer of
// its range; versions 1 and 2 carry a SHA-256): length, magic, version (unsupported), layout
// (unsupported), dtype, ranges and sizes (invalid_data), checksum (integrity).
result<kv_page_header> validate_page(std::span<const uint8_t> page);

// Appends the page's positions to `seq`. Everything is validated before the first
// write: validate_page, then the page's geometry must equal `expected` and the pool's
// (invalid_data), and seq must hold exactly token_start positions (invalid_argument).
// On success seq.n_tokens() == token_start + token_count. On failure the sequence is
// unchanged, except that a pool exhaustion (unavailable) may leave it truncated to
// token_start — which it already was.
status import_page(kv_sequence & seq, std::span<const uint8_t> page, const kv_page_geometry & expected);

}  // namespace skippy
