// One interface for every tier of the prefix cache (DESIGN §6 "Tiers"; docs/kv-cache.md
// "Tiers"): resident (pool blocks), exact state (pages in host memory), disk (pages in
// files) and Redis (pages on a shared server).
//
// The stage cache asks each tier, in order, how much of a query it could restore
// (peek), restores from the one it chooses (choose_tier), offers each record to every
// tier (record on the request thread; store with the exported pages on the record
// worker), asks for room (evict) and reads their numbers (stats). Calls take and
// return small structs so fields can be added without touching every tier.
//
// Pages are opaque to a tier: bytes the backend exported (KV pages, kv_page.h, and on a
// stage with recurrent layers one recurrent-state snapshot per entry,
// model/recurrent_snapshot.h) that the backend validates on import. A tier stores them,
// checks its own framing and checksums, and hands them back.
//
// Locking: a tier with does_io() == false (resident, exact state) is called with the
// stage cache's lock held and must not block; a tier with does_io() == true (disk,
// Redis) is called without it and synchronizes itself, so its file or network waits
// never stall another lane. A tier never calls back into the stage cache except
// through the page_importer_i it is handed.
#pragma once

#include "base/status.h"
#include "cache/decisions.h"
#include "cache/identity.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::cache {

// What a page holds: KV rows of [token_start, token_start + token_count), or the
// recurrent state after the first token_count tokens (token_start 0; it follows the
// entry's KV pages and stands for the entry's whole length).
enum class page_kind : uint8_t { kv, state };

// One exported page, as the backend produced it.
struct page_bytes {
    int64_t              token_start = 0;
    int64_t              token_count = 0;
    std::string          page_id;
    std::vector<uint8_t> bytes;
    // SHA-256 of each block of bytes (blob_store::block_digests with the store's
    // block_bytes), or empty: the exact-state store then hashes them itself.
    std::vector<digest256> block_digests;
    page_kind            kind = page_kind::kv;
};

// What the stage cache does with pages a tier read: puts them into a session.
class page_importer_i {
public:
    virtual ~page_importer_i() = default;
    // Replaces the session's contents with the pages (KV pages contiguous from 0, in
    // order), then keeps positions [0, n_tokens), then imports a state page if there is
    // one (its token_count must be n_tokens). Makes room in the pool first. On failure the
    // session is empty and the status is the backend's: integrity / invalid_data /
    // unsupported for a page that is not what it claims (the tier quarantines it),
    // unavailable for a full pool.
    virtual status import(int32_t session, std::span<const page_bytes> pages, int64_t n_tokens) = 0;
};

struct tier_peek_request {
    cache_namespace           ns;
    std::span<const token_id> tokens;      // the query
    int64_t                   target = 0;  // the most the caller wants: min(max_tokens, tokens.size())
};

struct tier_peek_result {
    int64_t    matched_tokens = 0;     // the tier's raw match (before page alignment and clipping)
    int64_t    restorable_tokens = 0;  // what restore would put back, <= target
    error_code error = error_code::ok; // the tier could not answer: treated as restorable 0
};

struct tier_restore_request {
    cache_namespace           ns;
    int32_t                   session = 0;
    std::span<const token_id> tokens;         // the query
    int64_t                   n_tokens = 0;   // restore exactly this many (<= what peek said)
    page_importer_i *         importer = nullptr;
};

struct tier_restore_result {
    error_code error = error_code::ok;  // ok: the session holds exactly n_tokens positions
    int64_t    imported_pages = 0;      // a resident restore counts one
    bool       quarantined = false;     // a page failed validation and was taken out
};

struct tier_record_request {
    cache_namespace           ns;
    std::span<const token_id> tokens;  // the session's positions [0, tokens.size())
    int32_t                   session = 0;
};

enum class resident_record_outcome : uint8_t {
    recorded,  // a new entry holds the session's blocks
    covered,   // an entry already serves every token: nothing to add
    full,      // max_entries reached and nothing evictable
    off,       // the tier is disabled
    unsupported,  // the stage has recurrent layers: KV blocks alone cannot restore them
};

// What a tier says about a record on the request thread.
enum class tier_record_state : uint8_t {
    off,          // tier disabled
    taken,        // done here (resident: the entry holds the session's blocks)
    covered,      // the tier already serves every token
    wants_pages,  // the tier stores pages: export them on the worker and call store
    refused,      // the tier cannot take it (resident: entry cap and everything in use)
    error,
};

struct tier_record_result {
    tier_record_state       state = tier_record_state::off;
    resident_record_outcome resident = resident_record_outcome::off;  // the resident tier's detail
    error_code              error = error_code::ok;
};

struct tier_store_request {
    cache_namespace             ns;
    std::span<const token_id>   tokens;
    std::span<const page_bytes> pages;  // covering [0, tokens.size()), cut at the page size
};

enum class tier_store_state : uint8_t { stored, present, refused, error };
std::string_view tier_store_state_name(tier_store_state s);  // "stored", "present", "refused", "error"

struct tier_store_result {
    tier_store_state state = tier_store_state::error;
    error_code       error = error_code::ok;
    int64_t          n_pages_written = 0;  // pages this store added (shared pages already held are not rewritten)
    int64_t          bytes_written = 0;
    int64_t          n_evicted = 0;        // entries the tier evicted to make room
};

struct tier_evict_request {
    int64_t free_blocks = 0;  // evict until the pool has this many free blocks (tiers holding pool blocks)
};

struct tier_evict_result {
    int64_t n_evicted = 0;
    int64_t n_kept = 0;         // of those, entries another tier holds now (demoted or already there)
    int64_t n_free_blocks = 0;  // after eviction
    bool    enough = false;
};

// The numbers /metrics reports per tier (docs/metrics.md), cumulative where counted.
struct tier_stats {
    int64_t hits = 0;       // lookups it served
    int64_t misses = 0;     // lookups that reached it and that it did not serve
    int64_t errors = 0;     // lookups or stores that failed in this tier
    int64_t evictions = 0;
    int64_t entries = 0;    // held now
    int64_t bytes = 0;      // held now
};

class cache_tier_i {
public:
    virtual ~cache_tier_i() = default;

    virtual cache_tier id() const = 0;
    virtual bool enabled() const = 0;
    // true: called without the stage cache's lock (file or network waits).
    virtual bool does_io() const = 0;

    // How much of the query the tier could restore; changes nothing (no recency).
    virtual tier_peek_result peek(const tier_peek_request & req) = 0;
    // Restores exactly req.n_tokens positions into the session (marking the entry
    // used). On error the session is empty.
    virtual tier_restore_result restore(const tier_restore_request & req) = 0;
    // The request-thread part of a record.
    virtual tier_record_result record(const tier_record_request & req) = 0;
    // The worker part: keeps the pages (tiers that answered wants_pages).
    virtual tier_store_result store(const tier_store_request & req) = 0;
    // Makes room; tiers that hold nothing the pool needs evict nothing.
    virtual tier_evict_result evict(const tier_evict_request & req) = 0;

    // Tier-local numbers; hits and misses are counted by the stage cache (one lookup
    // per request and stage) and filled in by it.
    virtual tier_stats stats() const = 0;
};

// A page that is not what it claims to be: never imported, its entry quarantined.
inline bool is_validation_error(error_code c) {
    return c == error_code::integrity || c == error_code::invalid_data || c == error_code::unsupported;
}

// One tier's answer to a lookup, as the stage cache collected it.
struct tier_candidate {
    cache_tier       tier = cache_tier::none;
    bool             peeked = false;  // false: not asked (disabled, or an earlier tier already served the target)
    tier_peek_result peek;
};

// The tier to restore from (DESIGN §6 "Lookups"): the candidate restoring the most
// tokens, at least min_tokens; on a tie the earlier one (resident, then exact state,
// disk, Redis: the cheaper restore). Returns the index into `candidates`, or -1 when
// no candidate reaches min_tokens.
int choose_tier(std::span<const tier_candidate> candidates, int64_t min_tokens);

// "resident=12 exact_state=8 disk=64": the peeked candidates and their restorable
// tokens (an erring tier shows "error"), for the decision event.
std::string candidates_text(std::span<const tier_candidate> candidates);

}  // namespace skippy::cache
