// Shared tier on Redis (DESIGN §6 "Tiers"; key schema in docs/kv-cache.md "Redis
// tier"): stage replicas on different machines that serve the same model and layer
// range publish pages to one Redis server and restore each other's prefixes.
//
// Keys: "skippy:kv:1:<namespace hex>:<page key hex>" -> a page record (page_record.h).
// The page key of a page is the prefix hash of every token up to its end, so the keys
// of the pages ending at P, 2P, 3P, ... (and at the query's own end) form a hash chain
// computed from the query alone: one pipelined EXISTS finds the longest page-aligned
// prefix (or the whole query) that Redis holds, with no index to trust. Every value
// is verified (framing, namespace, key, token range, checksum) before it is used; one
// that fails is deleted and never served.
//
// Failure: connecting and every exchange are bounded by timeout_ms (plus transfer
// time for large values at a floor rate); a timeout, a refused connection or a
// protocol error answers unavailable / invalid_data — a miss with an error decision —
// and the tier then rests for backoff_ms (answers unavailable at once) before it tries
// again, so a dead server costs at most one timeout per backoff period.
//
// Thread-safe: lookups take a connection from a small pool; publishing (the record
// worker) has its own connection.
#pragma once

#include "base/status.h"
#include "cache/redis_client.h"
#include "cache/tier.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace skippy::cache {

struct redis_tier_config {
    std::string url;                       // redis://host[:port][/db]
    int32_t     timeout_ms = 50;           // connect, and every exchange (see above)
    int32_t     backoff_ms = 1000;         // rest after a failure
    int64_t     page_tokens = 64;          // pages cut at multiples of this
    int64_t     bytes_per_token = 0;       // KV bytes per position: sizes the transfer allowance
    int32_t     max_connections = 4;       // lookup connections kept
    int64_t     min_bytes_per_second = 64ll << 20;  // floor transfer rate granted on top of timeout_ms
};

struct redis_tier_stats {
    int64_t n_lookups = 0;          // peeks that asked the server
    int64_t n_restores = 0;
    int64_t n_pages_fetched = 0;
    int64_t n_pages_published = 0;
    int64_t n_bytes_published = 0;
    int64_t n_errors = 0;           // exchanges that failed (timeouts, refused, protocol)
    int64_t n_timeouts = 0;         // of those, deadlines
    int64_t n_bad_values = 0;       // values that failed verification (deleted, never served)
    int64_t n_resting = 0;          // calls answered unavailable during a backoff
};

class redis_tier final : public cache_tier_i {
public:
    // Parses the URL (invalid_argument); connects lazily.
    static result<std::unique_ptr<redis_tier>> create(const redis_tier_config & config);

    cache_tier id() const override { return cache_tier::redis; }
    bool enabled() const override { return true; }
    bool does_io() const override { return true; }
    tier_peek_result peek(const tier_peek_request & req) override;
    tier_restore_result restore(const tier_restore_request & req) override;
    // wants_pages unless this process published the same prompt recently.
    tier_record_result record(const tier_record_request & req) override;
    // Publishes the pages Redis does not hold yet.
    tier_store_result store(const tier_store_request & req) override;
    tier_evict_result evict(const tier_evict_request & req) override;
    tier_stats stats() const override;

    redis_tier_stats redis_stats() const;

    // The key of a page (schema above).
    static std::string page_key_name(const digest256 & ns, const digest256 & page_key);

private:
    using clock_type = redis_connection::clock_type;
    struct lease;

    explicit redis_tier(const redis_tier_config & config, redis_url url);
    // A connection for a lookup (pooled) or for publishing; unavailable while resting.
    result<std::unique_ptr<redis_connection>> take(bool publisher);
    void give_back(std::unique_ptr<redis_connection> c, bool publisher);
    void note_failure(const status & st);
    clock_type::time_point deadline_for(int64_t bytes) const;
    // The end of the longest chain Redis holds for the query (0: none), at most target.
    result<int64_t> chain_end(redis_connection & c, const cache_namespace & ns, std::span<const token_id> tokens, int64_t target,
                              int64_t & matched);

    redis_tier_config                               config_;
    redis_url                                       url_;
    mutable std::mutex                              mutex_;  // pool, publisher, backoff, stats
    std::vector<std::unique_ptr<redis_connection>>  pool_;
    std::unique_ptr<redis_connection>               publisher_;
    clock_type::time_point                          rest_until_{};
    std::vector<digest256>                          published_;  // recent entry keys, oldest first
    redis_tier_stats                                counts_;
};

}  // namespace skippy::cache
