// Recurrent-state snapshots: the self-describing byte image of a sequence's recurrent
// state at a token boundary (a checkpoint), which the exact-state cache stores next to
// the KV pages of the same prefix (DESIGN §6; format spec with a worked example in
// docs/kv-cache.md §2, "Recurrent-state snapshot").
//
//   offset  size  field
//        0     8  magic "SKPYRSNP"
//        8     2  format version (u16, 2)
//       10     2  dtype (u16, 0: f32)
//       12     4  reserved, zero
//       16    32  namespace hash (the cache namespace the snapshot belongs to)
//       48     4  layer_start (i32)        the stage's layer range
//       52     4  layer_end (i32)
//       56     4  n_layers (i32)           recurrent layers in the range
//       60     4  d_conv (i32)             convolution taps
//       64     4  conv_channels (i32)
//       68     4  d_state (i32)
//       72     4  n_v_head (i32)
//       76     4  reserved, zero
//       80     8  n_tokens (i64)           positions folded into the state
//       88     8  payload_bytes (u64) = n_layers * 4 * ((d_conv - 1) * conv_channels + n_v_head * d_state^2)
//       96     …  payload: per recurrent layer, the conv inputs [d_conv - 1][conv_channels]
//                 then the matrices [n_v_head][d_state][d_state], f32
//   96 + payload   4  CRC-32C of every byte before it (u32; base/crc32c.h)
//
// All integers and floats little-endian. The floats are the state's bits, so a
// snapshot decoded into a state continues the sequence exactly as the original would.
#pragma once

#include "base/status.h"
#include "model/model.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace skippy {

inline constexpr uint8_t  recurrent_snapshot_magic[8] = {'S', 'K', 'P', 'Y', 'R', 'S', 'N', 'P'};
// Written: 2, checksummed with CRC-32C. Also read: 1, the same with a SHA-256 checksum
// (32 bytes), which cost a restore a SHA-256 pass over the whole state.
inline constexpr uint16_t recurrent_snapshot_version = 2;
inline constexpr uint16_t recurrent_snapshot_version_sha256 = 1;
inline constexpr uint16_t recurrent_snapshot_dtype_f32 = 0;
inline constexpr size_t   recurrent_snapshot_header_bytes = 96;
inline constexpr size_t   recurrent_snapshot_checksum_bytes = 4;          // version 2
inline constexpr size_t   recurrent_snapshot_sha256_checksum_bytes = 32;  // version 1
// Bounds a header may declare, so a hostile one never sizes an allocation or overflows
// a size (the model's own limits are tighter: family_qwen35.cpp).
inline constexpr int32_t  recurrent_snapshot_max_layers = 4096;
inline constexpr int64_t  recurrent_snapshot_max_tokens = int64_t{1} << 24;

// The 32 bytes naming the namespace (cache::digest256's bytes; opaque here).
using snapshot_namespace = std::array<uint8_t, 32>;

struct recurrent_snapshot_header {
    uint16_t           version = recurrent_snapshot_version;
    snapshot_namespace ns{};
    recurrent_shape    shape;
    int64_t            n_tokens = 0;
    uint64_t           payload_bytes = 0;
};

// Total bytes of a snapshot of this shape. REQUIRES: a shape with n_layers >= 1.
size_t recurrent_snapshot_bytes(const recurrent_shape & shape);

// Serializes `state` (positions [0, state.n_tokens()) folded in).
// REQUIRES (else invalid_argument): shape.n_layers >= 1, the state has that shape and
// holds a valid prefix (n_tokens >= 0).
result<std::vector<uint8_t>> encode_recurrent_snapshot(const recurrent_state & state, const recurrent_shape & shape,
                                                        const snapshot_namespace & ns);

// Checks framing, limits, sizes and the checksum: invalid_data (magic, reserved bytes,
// a size or count out of range or disagreeing with the bytes present), unsupported
// (version, dtype), integrity (checksum). Reads nothing past the bytes given.
result<recurrent_snapshot_header> validate_recurrent_snapshot(std::span<const uint8_t> bytes);

// Validates the snapshot completely (validate_recurrent_snapshot), then that it is the
// one asked for: namespace `ns`, exactly `shape`, and `n_tokens` positions (-1: any)
// — invalid_data otherwise. Only then copies it into `out` (in place when `out`
// already has the shape, else into a new state of it), which is left untouched on any
// error.
status decode_recurrent_snapshot(std::span<const uint8_t> bytes, const recurrent_shape & shape, const snapshot_namespace & ns,
                                 int64_t n_tokens, recurrent_state & out);

}  // namespace skippy
