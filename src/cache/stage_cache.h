// The stage's prefix cache: what the stage message loop calls (DESIGN §6).
//
// It ties together the tiers (tier.h: resident pool blocks, exact-state pages in host
// memory, page files on disk, pages on a shared Redis), the radix index of the
// in-memory tiers, the activation cache, the per-session prompt accumulator, the
// record worker and the decision events. The runtime is reached only through
// kv_backend_i.
//
// Every call is safe from any thread, but calls naming a session must come from the
// thread driving that session (the backend's rule). Cache failures never fail a
// request: every error becomes a decision ("miss" / "error") and the caller computes.
//
// Typical use by a stage for one request (session = lane):
//   restore({ns, lane, prompt, prompt_tokens - 1})   -> R tokens restored (maybe 0)
//   make_room_for_write(lane, R, chunk)               before each forward
//   note_prefill(lane, pos_start, chunk_tokens)       after each prefilled chunk and decoded token
//   record_checkpoint(..., n, snapshot)               recurrent layers: each snapshot a chunk took
//                                                     at prefill_checkpoints(ns, lane, pos_start, chunk)
//   record(ns, lane, record_reason::final_prefill)    after the final chunk
//   record(ns, lane, record_reason::stop)             at Stop: prompt + decoded tokens (only if more was added)
#pragma once

#include "base/status.h"
#include "cache/activation_cache.h"
#include "cache/decision_event.h"
#include "cache/decisions.h"
#include "cache/disk_tier.h"
#include "cache/exact_state_store.h"
#include "cache/identity.h"
#include "cache/inflight_records.h"
#include "cache/kv_backend.h"
#include "cache/memory_tiers.h"
#include "cache/radix_index.h"
#include "cache/record_worker.h"
#include "cache/redis_tier.h"
#include "cache/resident_cache.h"
#include "cache/session_accumulator.h"
#include "telemetry/telemetry.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

struct stage_cache_config {
    cache_mode mode = cache_mode::lookup_record;  // --kv-cache
    int64_t min_tokens = 32;                      // --kv-cache-min-tokens: shorter prefixes are neither recorded nor restored
    int64_t max_entries = 256;                    // --kv-cache-max-entries: resident entries; 0 turns the resident tier off
    int64_t exact_max_bytes = 512ll << 20;        // --kv-cache-exact-max-bytes: exact-state hard limit (physical bytes); 0 turns the tier off
    int64_t exact_soft_bytes = 0;                 // exact-state soft limit; 0: 3/4 of exact_max_bytes
    bool    demote_on_evict = true;               // export evicted resident entries into the exact-state tier
    int64_t exact_page_tokens = 64;               // exact-state pages cover [k*this, (k+1)*this): shared prefixes dedupe by page
    int64_t exact_block_bytes = 64ll << 10;       // blob block size of the exact-state store
    int64_t activation_max_bytes = 64ll << 20;    // activation cache capacity; 0 turns it off (final stages)
    std::string disk_dir;                         // --kv-cache-disk: this stage's page-file directory (disk_dir_for_stage); "" turns the tier off
    int64_t disk_max_bytes = 0;                   // --kv-cache-disk-max-bytes: 0 = min(10 GiB, 10% of the filesystem)
    std::string redis_url;                        // --kv-cache-redis: redis://host[:port][/db]; "" turns the tier off
    int32_t redis_timeout_ms = 50;                // --kv-cache-redis-timeout-ms: bound on connecting and on every command
    disk_fault_hook disk_fault_for_testing;       // injected write failures (tests only)
    // --kv-cache-checkpoint-tokens: on a stage with recurrent layers (the backend's
    // has_recurrent_state), prefill takes a snapshot at every multiple of this many
    // tokens (checkpoint_policy.h), besides the prompt's and the generation's ends; 0:
    // only those. Ignored elsewhere (KV slices at any length).
    int64_t checkpoint_tokens = 64;
    // A lookup that a record still queued for the worker would serve better waits for
    // it, at most this long (ms; 0: never waits).
    int32_t record_wait_ms = 2000;
    // Records waiting for the worker (beyond the one it runs): a record that does not
    // extend a waiting one joins the queue, and beyond this many the oldest is dropped
    // (n_records_superseded). Each holds references on its session's blocks, so at most
    // this many plus one snapshots hold blocks. About the number of lanes: concurrent
    // requests' records then all reach the page tiers (on a recurrent stage those are
    // the only tiers).
    int32_t max_pending_records = 8;

    // invalid_argument naming the first bad field.
    status validate() const;
    int64_t effective_soft_bytes() const { return exact_soft_bytes > 0 ? exact_soft_bytes : exact_max_bytes - exact_max_bytes / 4; }
};

// The directory of stage `stage_index` under the --kv-cache-disk directory: every
// stage of a process keeps its own ("DIR/stage-1"), each owned by one process.
std::string disk_dir_for_stage(const std::string & dir, int32_t stage_index);

struct probe_request {
    cache_namespace           ns;
    std::span<const token_id> tokens;      // the query (the prompt)
    int64_t                   max_tokens = 0;  // the most the caller would restore (prompt_tokens - 1)
    int32_t                   session = -1;    // for the event only
    uint64_t                  request_id = 0;  // for the event only (0: not given)
    std::string_view          message_kind = {};  // for the event only (e.g. "ProbePrefill")
};

struct probe_result {
    lookup_outcome   outcome = lookup_outcome::miss;  // hit: max_tokens restorable; short: >= min_tokens
    std::string_view decision = "probe_miss";
    int64_t          restorable_tokens = 0;
    cache_tier       tier = cache_tier::none;
};

struct restore_request {
    cache_namespace           ns;
    int32_t                   session = 0;
    std::span<const token_id> tokens;           // the query (the prompt known so far)
    int64_t                   max_tokens = 0;   // restore at most this many (prompt_tokens - 1)
    lookup_kind               kind = lookup_kind::restore;
    bool                      allow_short = true;  // false: all of min(max_tokens, tokens) or nothing
    uint64_t                  request_id = 0;      // for the event only
    std::string_view          message_kind = {};   // for the event only
};

struct restore_result {
    lookup_outcome   outcome = lookup_outcome::miss;
    std::string_view decision;                  // the event's skippy.kv.decision; empty when lookups are off
    cache_tier       tier = cache_tier::none;
    int64_t          restored_tokens = 0;       // the session now holds exactly these positions (0 on miss/error)
    int64_t          matched_tokens = 0;        // the longest match any tier had, before clipping
    int64_t          imported_pages = 0;
    error_code       error = error_code::ok;    // on error; error_class_name(error) is reported
    cache_counters   counters;                  // add to the request's stats block
};

struct activation_restore_request {
    cache_namespace           ns;
    int32_t                   session = 0;
    std::span<const token_id> tokens;           // the chunk's tokens from position 0
    int32_t                   width = 0;        // row width of the frame (n_embd)
    int64_t                   max_tokens = -1;  // -1: tokens.size()
    uint64_t                  request_id = 0;   // for the event only
    std::string_view          message_kind = {};  // for the event only
};

struct activation_restore_result {
    activation_outcome outcome = activation_outcome::miss;
    std::string_view   decision;
    restore_result     kv;                  // the KV part (in-band decision values)
    activation_frame   frame;               // set only on activation hit: forward it, skip compute
};

// final_prefill: after the prompt's last prefill chunk; stop: the prompt and the answer
// at Stop; checkpoint: a snapshot a prefill chunk took (recurrent layers).
enum class record_reason : uint8_t { final_prefill, stop, checkpoint };

struct record_request {
    cache_namespace  ns;
    int32_t          session = 0;
    record_reason    reason = record_reason::final_prefill;
    uint64_t         request_id = 0;  // for the event only
    std::string_view message_kind = {};  // for the event only
};

// What a record did in a tier that stores pages (exact state, disk, Redis).
// skipped_busy: the record worker was stopping (a running worker always takes a record).
enum class exact_record_state : uint8_t { off, queued, present, skipped_busy, error };
using page_record_state = exact_record_state;
std::string_view exact_record_state_name(exact_record_state s);
std::string_view resident_record_name(resident_record_outcome o);

struct record_result {
    record_outcome          outcome = record_outcome::skipped;
    std::string_view        decision;         // empty when no event was emitted (nothing new to record)
    int64_t                 tokens = 0;
    resident_record_outcome resident = resident_record_outcome::off;
    exact_record_state      exact = exact_record_state::off;
    error_code              error = error_code::ok;
    cache_counters          counters;
    page_record_state       disk = page_record_state::off;
    page_record_state       redis = page_record_state::off;
};

struct admission_result {
    int64_t    needed_blocks = 0;
    int64_t    n_free_blocks = 0;
    int64_t    n_evicted = 0;
    bool       enough = false;  // n_free_blocks >= needed_blocks
    error_code error = error_code::ok;
    int64_t    n_lost = 0;      // evicted entries no other tier holds (neither demoted nor already there)
    status     write_status;    // what the write returned (ok when none was given)
};

// One tier's numbers for /metrics (docs/metrics.md): name "resident", "exact_state",
// "disk", "redis" or "activation".
struct tier_snapshot {
    std::string_view name;
    tier_stats       stats;
};

struct stage_cache_stats {
    cache_counters      totals;      // every counter since start
    resident_stats      resident;
    exact_state_stats   exact;
    activation_stats    activation;
    radix_stats         index;
    accumulator_stats   accumulator;
    record_worker_stats worker;
    int64_t n_demotions = 0;         // resident entries exported into the exact tier on eviction
    int64_t n_records_queued = 0;    // exact-state records handed to the worker
    int64_t n_records_skipped_busy = 0;  // the worker was stopping
    // Records waiting for the worker: dropped as the oldest beyond max_pending_records
    // (superseded), or taken along as a checkpoint by a newer record that extends their
    // tokens on the same namespace (the record at Stop after the one after the prompt),
    // which stores both (merged).
    int64_t n_records_superseded = 0;
    int64_t n_records_merged = 0;
    int64_t n_records_dropped_for_room = 0;  // waiting records dropped so that a write fits
    int64_t n_records_stored = 0;    // exact-state records the worker stored
    int64_t n_records_failed = 0;    // export failed or the tier refused them
    int64_t n_quarantines = 0;
    int64_t n_resident_restores = 0;  // restores served by the resident tier
    int64_t n_exact_restores = 0;     // restores served by the exact-state tier
    int64_t n_disk_restores = 0;
    int64_t n_redis_restores = 0;
    // Stages with recurrent layers: snapshots stored with exact-state entries, and
    // restores that put one back.
    int64_t n_state_records = 0;
    int64_t n_state_restores = 0;
    // Lookups that waited for a queued record (docs/kv-cache.md §6), and of those the
    // ones whose record was not stored within record_wait_ms.
    int64_t n_lookup_waits = 0;
    int64_t n_lookup_wait_timeouts = 0;
    disk_tier_stats  disk;           // zero when the tier is off
    redis_tier_stats redis;
};

class stage_cache {
public:
    // REQUIRES: config.validate().is_ok(); the backend outlives the cache.
    stage_cache(kv_backend_i & backend, const stage_cache_config & config, telemetry::event_sink_ptr sink = nullptr);
    static result<std::unique_ptr<stage_cache>> create(kv_backend_i & backend, const stage_cache_config & config,
                                                       telemetry::event_sink_ptr sink = nullptr);
    // Stops the worker and releases every block the cache holds. A running record
    // finishes; a pending one is dropped, unless a disk or Redis tier is on: then it
    // runs first, so an orderly shutdown (SIGTERM) keeps what was queued.
    ~stage_cache();
    stage_cache(const stage_cache &) = delete;
    stage_cache & operator=(const stage_cache &) = delete;

    const stage_cache_config & config() const { return config_; }

    // ProbePrefill: how much would restore, with no state change (peek: no recency).
    probe_result probe(const probe_request & req);

    // Restores the longest cached prefix of req.tokens, at most req.max_tokens and at
    // least min_tokens, into the session (replacing its contents): resident first (no
    // copy), else exact state (import; a page failing validation quarantines its entry).
    // On success the session holds exactly restored_tokens positions and the
    // accumulator knows them. On miss the session is untouched; on error it is empty.
    restore_result restore(const restore_request & req);

    // In-band on a non-final stage: the activation frame of the whole chunk plus its KV.
    // A hit needs both; otherwise the KV part stands as restored (see kv.restored_tokens).
    activation_restore_result restore_with_activation(const activation_restore_request & req);

    // Before a forward writes positions [pos_start, pos_start + n_tokens) of the session:
    // evicts unreferenced resident entries until the pool can hold the write. `write`,
    // when given, is the write itself (it takes the blocks); it runs under the lock the
    // restores import under, so no restore on another session takes the room between the
    // eviction and the write. Its status is the result's write_status, whether or not
    // room was found (a write that does not fit reports the full pool itself).
    admission_result make_room_for_write(int32_t session, int64_t pos_start, int64_t n_tokens,
                                         const std::function<status()> & write = nullptr);

    // Tokens whose KV the session now holds (after their forward succeeded): a
    // prefilled chunk, or a decoded token, so the record at Stop covers the answer too.
    void note_prefill(int32_t session, int64_t pos_start, std::span<const token_id> tokens);

    // Records the session's accumulated prompt when tokens were added since it was
    // restored or last recorded; otherwise does nothing (no event).
    record_result record(const cache_namespace & ns, int32_t session, record_reason reason);
    record_result record(const record_request & req);
    // Stages with recurrent layers, records on: the lengths inside a prefill chunk of
    // [pos_start, pos_start + n_tokens) at which the stage should snapshot its state
    // (checkpoint_policy.h with checkpoint_tokens and min_tokens). Empty elsewhere.
    std::vector<int64_t> prefill_checkpoints(int64_t pos_start, int64_t n_tokens) const;
    // The same for a chunk of a session's prompt, plus its branch point when that falls
    // inside the chunk: where the prompt leaves every path the exact-state tier holds,
    // when no entry ends there (checkpoint_policy.h). A later prompt sharing this one's
    // prefix up to there then restores all of it, not the checkpoint before it.
    // Without the session's earlier chunks noted (note_prefill), the plain lengths.
    std::vector<int64_t> prefill_checkpoints(const cache_namespace & ns, int32_t session, int64_t pos_start,
                                             std::span<const token_id> chunk) const;
    // Records the session's first n_tokens accumulated tokens with `state`, the snapshot
    // the stage took at that length while it computed them (reason checkpoint).
    // REQUIRES: the chunk holding them was noted (note_prefill). Nothing (no event) when
    // records are off or the session's accumulation does not reach n_tokens.
    record_result record_checkpoint(const record_request & req, int64_t n_tokens, state_snapshot_ptr state);
    // Records positions [0, tokens.size()) of the session as the prefix `tokens` (on a
    // stage with recurrent layers, with a snapshot of the session's live state, which
    // must hold exactly these positions).
    // REQUIRES: the session's KV was computed from exactly these tokens.
    record_result record_tokens(const cache_namespace & ns, int32_t session, std::span<const token_id> tokens,
                                record_reason reason);
    record_result record_tokens(const record_request & req, std::span<const token_id> tokens);

    // Keeps the frame a non-final stage forwarded for tokens [0, n). false when off,
    // too short, or too large.
    bool record_activation(const cache_namespace & ns, std::span<const token_id> tokens, int32_t width,
                           std::vector<uint8_t> frame);

    // Lane reset (end of request): forgets the accumulated prompt.
    void reset_session(int32_t session);
    // Rollback after a downstream miss: empties the session's KV and forgets its prompt.
    void rollback_session(int32_t session);

    stage_cache_stats stats() const;
    // Per tier, for /metrics: resident, exact_state, disk and redis when on, activation.
    // A KV lookup counts once per request and stage (probes and in-band chunks
    // included): a hit in the tier that served it, a miss in every enabled tier before
    // it, or in every enabled tier when none served.
    std::vector<tier_snapshot> tier_snapshots() const;

    // Blocks until the record worker is idle. For tests, for runs of prompts one after
    // another (generate --prompts-file) and orderly shutdown; a request waits only for a
    // record that would serve its own lookup (record_wait_ms).
    void wait_for_records();
    // Test hook run on the worker thread at the start of every record job.
    void set_record_hook_for_testing(std::function<void()> hook);
    // Test access to the exact-state store (corruption tests). REQUIRES: no concurrent use.
    exact_state_store & exact_store_for_testing() { return exact_; }
    // The disk tier (null when off). For tests.
    disk_tier * disk_for_testing() { return disk_tier_.get(); }
    // ok or the first broken invariant of index and tiers. For tests. REQUIRES: no
    // record in flight (wait_for_records() first), no restore running.
    status check_invariants() const;

private:
    struct block_snapshot;
    class locked_importer;
    class unlocked_importer;
    // A shorter prefix recorded along with a record (its tokens' first n_tokens), and on
    // a stage with recurrent layers the snapshot taken at that length.
    struct checkpoint {
        int64_t            n_tokens = 0;
        state_snapshot_ptr state;
    };
    using lock_type = std::unique_lock<std::mutex>;
    using candidates = std::array<tier_candidate, n_cache_tiers>;
    // Which tiers a record job stores pages into.
    struct page_wants {
        bool exact = false, disk = false, redis = false;
        bool any() const { return exact || disk || redis; }
    };
    // One KV lookup per request and session is counted in the tier numbers.
    struct look_ledger {
        bool counted = false;
        bool hit = false;
    };

    stage_cache(kv_backend_i & backend, const stage_cache_config & config, telemetry::event_sink_ptr sink,
                std::unique_ptr<disk_tier> disk);

    // REQUIRES: lock holds mutex_ on entry; it holds it again on return (io tiers are
    // asked with it released).
    restore_result restore_impl(const restore_request & req, decision_event & ev, lock_type & lock);
    void peek_tiers(const cache_namespace & ns, std::span<const token_id> tokens, int64_t target, candidates & c,
                    lock_type & lock);
    status import_locked(const digest256 & ns, int32_t session, std::span<const page_bytes> pages, int64_t n_tokens);
    // Waits (releasing the lock) while a queued or running record would restore more of
    // the query than `best`, at most record_wait_ms. Returns the time waited (ms), 0
    // without waiting. REQUIRES: lock holds mutex_.
    double wait_for_inflight_locked(const digest256 & ns, std::span<const token_id> tokens, int64_t target, int64_t best,
                                    lock_type & lock);
    bool tier_usable(size_t i) const;
    record_result record_tokens_impl(const record_request & req, std::span<const token_id> tokens, state_snapshot_ptr snap);
    bool demote_locked(const evicted_resident & ev);
    void count_look_locked(int32_t session, cache_tier served);
    void note_tier_attrs(decision_event & ev, const candidates & c) const;
    // The ids of the exact-state pages of an entry holding tokens, in order.
    std::vector<std::string> page_ids(const cache_namespace & ns, std::span<const token_id> tokens) const;
    // Its pages (named ids, page_ids) from page from_page on.
    result<std::vector<page_bytes>> export_pages(std::span<const token_id> tokens, std::span<const kv_block_id> blocks,
                                                 std::span<const std::string> ids, size_t from_page) const;
    void run_record_job(const cache_namespace & ns, const std::vector<token_id> & tokens,
                        std::span<const kv_block_id> blocks, page_wants wants, const state_snapshot_ptr & state);
    // A record waiting for the worker (see record(); at most max_pending_records).
    struct pending_record {
        cache_namespace                 ns;
        std::vector<token_id>           tokens;
        std::shared_ptr<block_snapshot> snapshot;     // blocks holding tokens
        state_snapshot_ptr              state;        // recurrent layers: the state after tokens
        page_wants                      wants;
        std::vector<checkpoint>         checkpoints;  // shorter prefixes recorded first, ascending
        std::function<void()>           hook;
        inflight_records::ticket        ticket = 0;   // what lookups may wait for, until stored
    };
    // Records waiting for the worker hold references on blocks; a write or an import
    // that does not fit without them comes first (records are never waited for): drops
    // the oldest until needed_blocks are free or none waits. Returns how many it dropped.
    // REQUIRES: mutex_ held.
    int64_t drop_waiting_records_locked(int64_t needed_blocks);
    // On the worker: stores the waiting records, oldest first, until none is left (or
    // the cache is being destroyed without an io tier).
    void run_pending_records();
    void emit(const telemetry::event & ev) const;
    void emit(const decision_event & ev) const;
    bool lookups_enabled() const { return config_.mode == cache_mode::lookup_record; }
    bool records_enabled() const { return config_.mode != cache_mode::off; }
    bool any_io_tier() const { return disk_tier_ != nullptr || redis_tier_ != nullptr; }
    cache_tier_i * tier(cache_tier t) const { return tiers_[static_cast<size_t>(t) - 1]; }

    kv_backend_i &                                          backend_;
    const stage_cache_config                                config_;
    const bool                                              recurrent_;  // backend_.has_recurrent_state()
    const telemetry::event_sink_ptr                         sink_;

    mutable std::mutex                                      mutex_;  // guards everything below but the worker and io tiers
    radix_index                                             index_;  // before the tiers: they use it in their destructors
    exact_state_store                                       exact_;
    resident_cache                                          resident_;
    resident_tier                                           resident_tier_;
    exact_tier                                              exact_tier_;
    std::unique_ptr<disk_tier>                              disk_tier_;   // own locking; null when off
    std::unique_ptr<redis_tier>                             redis_tier_;  // own locking; null when off
    std::array<cache_tier_i *, n_cache_tiers>               tiers_{};     // lookup order; null when absent
    activation_cache                                        activation_;
    session_accumulator                                     accumulator_;
    std::unordered_map<digest256, cache_namespace, digest256_hash> namespaces_;  // for page ids of demoted entries
    std::unordered_map<int32_t, look_ledger>                looks_;
    cache_counters                                          totals_;
    std::function<void()>                                   record_hook_;
    std::deque<std::unique_ptr<pending_record>>             pending_records_;  // oldest first
    std::atomic<bool>                                       stopping_{false};  // ~stage_cache: drop what waits
    inflight_records                                        inflight_;     // pending and running records
    std::condition_variable                                 records_cv_;   // a record left inflight_
    std::array<int64_t, n_cache_tiers>                      n_look_hits_{};
    std::array<int64_t, n_cache_tiers>                      n_look_misses_{};
    std::array<int64_t, n_cache_tiers>                      n_restores_{};
    int64_t n_demotions_ = 0;
    int64_t n_records_queued_ = 0;
    int64_t n_records_skipped_busy_ = 0;
    int64_t n_records_superseded_ = 0;
    int64_t n_records_merged_ = 0;
    int64_t n_records_dropped_for_room_ = 0;
    int64_t n_records_stored_ = 0;
    int64_t n_records_failed_ = 0;
    int64_t n_quarantines_ = 0;
    int64_t n_state_records_ = 0;
    int64_t n_state_restores_ = 0;
    int64_t n_lookup_waits_ = 0;
    int64_t n_lookup_wait_timeouts_ = 0;

    record_worker                                           worker_;  // last: destroyed (joined) first
};

}  // namespace skippy::cache
