// Cache identities (DESIGN §6; encoding spec in docs/kv-cache.md "Identities").
//
// A namespace covers everything that makes KV bytes reusable: two prefixes share cache
// entries only when every field below is equal. The prefix hash continues it with the
// token ids. Both are SHA-256 over a length-prefixed field encoding
//   field := u16 field_id, u32 byte_length, byte_length bytes      (little-endian)
// so no two different field lists encode to the same bytes. session_id is never part
// of an identity: sessions share entries.
#pragma once

#include "base/status.h"
#include "cache/digest.h"
#include "kv/kv.h"

#include <cstdint>
#include <span>
#include <string>

namespace skippy::cache {

using token_id = int32_t;  // same type as skippy::token_id (model.h)

struct namespace_fields {
    std::string model_identity;        // identity of the weights (e.g. SHA-256 of the GGUF tensor data); non-empty
    int32_t     stage_index = 0;       // position of the stage in the chain
    int32_t     layer_start = 0;       // [layer_start, layer_end) run by the stage
    int32_t     layer_end = 0;
    kv_dtype    dtype = kv_dtype::f16; // KV element type
    int32_t     kv_layout = 1;         // KV page layout id (kv_page_layout_layer_major)
    int32_t     kv_block_tokens = 16;  // attention reduces over keys in blocks of this size
    int32_t     ctx_size = 0;          // positions per lane
    std::string platform_tag;          // CPU architecture that produced the KV (e.g. "x86_64"; every kernel path of it gives the same bits)
    std::string cache_key;             // client partition (prompt_cache_key / salt); empty: none
    int64_t     token_start = 0;       // first position the prefixes start at (only 0 is served)
};

// A namespace: its hash plus the fields page ids and decisions print.
struct cache_namespace {
    digest256 hash;
    int32_t   stage_index = 0;
    int32_t   layer_start = 0;
    int64_t   token_start = 0;

    bool operator==(const cache_namespace &) const = default;
};

// REQUIRES (else invalid_argument): non-empty model_identity, 0 <= layer_start <
// layer_end, stage_index >= 0, kv_block_tokens > 0, ctx_size >= 0, token_start >= 0.
// A non-zero token_start builds a valid namespace; using it is refused (below).
result<cache_namespace> make_namespace(const namespace_fields & fields);

// unsupported ("nonzero_token_start_unsupported") when ns.token_start != 0: entries
// are whole prefixes from position 0.
status check_token_start(const cache_namespace & ns);

// SHA-256 over (domain, namespace hash, token ids). REQUIRES: tokens.size() < 2^30.
digest256 prefix_hash(const cache_namespace & ns, std::span<const token_id> tokens);

// "{stage}:{token_start}:{token_count}:{layer_start}:{16 hex}", the hex being the first
// 8 bytes of the prefix hash of tokens [0, token_start + token_count).
std::string page_id(const cache_namespace & ns, int64_t token_start, int64_t token_count, const digest256 & prefix);

// page_id of the prefix tokens [0, tokens.size()) as one page.
std::string prefix_page_id(const cache_namespace & ns, std::span<const token_id> tokens);

}  // namespace skippy::cache
