// The framing of a page outside the process (docs/kv-cache.md "Page records"): a disk
// tier page file and a Redis page value are the same bytes.
//
//   offset size field
//        0    8 magic "SKPYPREC"
//        8    2 version u16 = 1
//       10    2 reserved, zero
//       12    4 reserved, zero
//       16   32 namespace hash
//       48   32 page key: prefix_hash(ns, tokens [0, token_start + token_count))
//       80    8 token_start i64
//       88    8 token_count i64
//       96    8 payload_bytes u64
//      104    P payload: the page as the backend exported it (opaque here)
//    104+P   32 SHA-256 of every byte before it
//
// The page key names the prefix the page's KV depends on (every earlier token), so a
// record found under the key computed from the query's own tokens, whose header
// repeats that key and whose checksum holds, is the page for those tokens — nothing in
// an index has to be trusted.
#pragma once

#include "base/status.h"
#include "cache/digest.h"

#include <cstdint>
#include <span>
#include <vector>

namespace skippy::cache {

inline constexpr uint16_t page_record_version = 1;
inline constexpr size_t   page_record_header_bytes = 104;
inline constexpr size_t   page_record_overhead_bytes = page_record_header_bytes + 32;
// Largest payload accepted when reading (a KV page of 2^24 tokens of a big stage is
// far below): a length field beyond it is invalid_data, never an allocation.
inline constexpr uint64_t page_record_max_payload_bytes = uint64_t{1} << 34;
// Largest token position or count a record or a disk manifest may name.
inline constexpr int64_t page_record_max_tokens = int64_t{1} << 24;

struct page_record_header {
    digest256 ns;
    digest256 key;
    int64_t   token_start = 0;
    int64_t   token_count = 0;
    uint64_t  payload_bytes = 0;
};

// The whole record: header (payload_bytes taken from payload), payload, checksum.
std::vector<uint8_t> encode_page_record(const page_record_header & h, std::span<const uint8_t> payload);
// The 104 header bytes alone (h.payload_bytes as given), for writers that stream the
// payload; the checksum is SHA-256 over header then payload.
std::vector<uint8_t> encode_page_record_header(const page_record_header & h);

// Parses and checks the header alone (magic, version, reserved, ranges, lengths
// against total_bytes). invalid_data / unsupported (version).
result<page_record_header> decode_page_record_header(std::span<const uint8_t> bytes, uint64_t total_bytes);

// Checks a whole record against what the caller expects: header as above, then ns,
// key, token range (invalid_data on a mismatch: another prefix or another model),
// then the checksum (integrity). Returns the payload's place in `bytes`.
result<std::span<const uint8_t>> verify_page_record(std::span<const uint8_t> bytes, const digest256 & ns,
                                                    const digest256 & key, int64_t token_start, int64_t token_count);

}  // namespace skippy::cache
