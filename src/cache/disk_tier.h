// Disk tier (L3): exact-state pages in files that survive a restart (DESIGN §6 "Tiers";
// layout, formats and recovery rules in docs/kv-cache.md "Disk tier").
//
//   DIR/FORMAT                     "skippy kv disk cache, format 1\n"
//   DIR/LOCK                       flock'ed by the owning process (its pid inside)
//   DIR/pages/<page key>.page      one page record (page_record.h) per file
//   DIR/entries/<entry key>.entry  one manifest per stored prompt: its tokens and pages
//   DIR/tmp/                       writes in progress (write, fsync, rename)
//   DIR/quarantine/                files that failed validation, never served
//
// A page file is named by its page key, the prefix hash of every token its KV depends
// on, so prompts sharing a prefix share its page files, and a restore reads the files
// named by the query's own prefix hashes. A restore serves the longest prefix the
// query shares with any stored prompt, not only whole stored prompts: that prompt's
// pages through the one holding the last shared token, the last cut on import.
//
// Crash safety: a file appears under its final name only complete and fsynced (tmp,
// fsync, rename, fsync of the directory); an entry's manifest only after all its
// pages. Opening the directory removes temporary files, pages no manifest lists and
// manifests whose pages are missing, quarantines files that fail validation, and
// rebuilds the index from the manifests. A page is verified (framing, namespace, key,
// token range, checksum) on every read; a bad one is quarantined with every entry
// using it and never served.
//
// Bound: bytes of the files in DIR (pages, manifests, quarantine, a write in progress)
// never exceed max_bytes: a write reserves its bytes, evicting least recently used
// entries first, before it creates a file.
//
// Thread-safe: one mutex over the index, never held across file reads or writes.
// One process owns a directory (flock on LOCK, released on exit or crash).
#pragma once

#include "base/status.h"
#include "cache/radix_index.h"
#include "cache/tier.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace skippy::cache {

// Called before every write of n_bytes at `offset` of a file being created (tmp path);
// a non-ok code fails that write as the disk would (e.g. unavailable for ENOSPC).
// For tests: a full disk without a full disk.
using disk_fault_hook = std::function<error_code(std::string_view path, int64_t offset, int64_t n_bytes)>;

// An entry manifest (docs/kv-cache.md "Disk tier"): what a stored prompt is made of.
struct disk_manifest {
    struct page {
        int64_t   token_start = 0;
        int64_t   token_count = 0;
        int64_t   file_bytes = 0;  // size of the page file
        digest256 key;             // its page key (its file name)
    };
    digest256             ns;
    std::vector<token_id> tokens;
    std::vector<page>     pages;
};
inline constexpr uint16_t disk_manifest_version = 1;
inline constexpr std::string_view disk_format_text = "skippy kv disk cache, format 1\n";

std::vector<uint8_t> encode_disk_manifest(const disk_manifest & m);
// invalid_data (framing, ranges, pages not contiguous from 0), unsupported (version),
// integrity (checksum).
result<disk_manifest> decode_disk_manifest(std::span<const uint8_t> bytes);

inline constexpr int64_t disk_default_max_bytes = int64_t{10} << 30;  // and at most 10% of the filesystem

struct disk_tier_config {
    std::string     dir;              // created if missing
    int64_t         max_bytes = 0;    // 0: min(10 GiB, 10% of the filesystem holding dir)
    int64_t         page_tokens = 64; // pages cut at multiples of this (the exact-state page size)
    disk_fault_hook fault;
};

struct disk_tier_stats {
    int64_t n_entries = 0;
    int64_t n_pages = 0;           // distinct page files
    int64_t bytes = 0;             // bytes of every file in the directory (incl. quarantine, reservations)
    int64_t max_bytes = 0;
    int64_t quarantine_bytes = 0;
    // At open:
    int64_t n_recovered_entries = 0;  // manifests loaded
    int64_t n_dropped_entries = 0;    // manifests removed (pages missing, another page size)
    int64_t n_orphans_removed = 0;    // page and temporary files no manifest listed
    // Cumulative:
    int64_t n_restores = 0;
    int64_t n_stores = 0;          // entries written
    int64_t n_pages_written = 0;
    int64_t n_bytes_written = 0;
    int64_t n_evictions = 0;
    int64_t n_quarantines = 0;     // files moved to quarantine/
    int64_t n_write_failures = 0;
    int64_t n_read_failures = 0;
    int64_t n_refused = 0;         // entries larger than the bound, or no room (everything in use)
};

class disk_tier final : public cache_tier_i {
public:
    // Opens (creating if needed) and locks the directory, recovers it (above) and
    // rebuilds the index. unavailable when another process owns it; unsupported for
    // another format; io / permission when it cannot be created or read.
    static result<std::unique_ptr<disk_tier>> open(const disk_tier_config & config);
    ~disk_tier() override;  // releases the lock
    disk_tier(const disk_tier &) = delete;
    disk_tier & operator=(const disk_tier &) = delete;

    cache_tier id() const override { return cache_tier::disk; }
    bool enabled() const override { return true; }
    bool does_io() const override { return true; }
    tier_peek_result peek(const tier_peek_request & req) override;
    tier_restore_result restore(const tier_restore_request & req) override;
    // covered when an entry holds exactly these tokens, else wants_pages.
    tier_record_result record(const tier_record_request & req) override;
    // Writes the pages not on disk yet and the entry's manifest. refused (unavailable)
    // when the entry alone exceeds the bound or entries in use hold the room; error
    // when a write fails (nothing partial stays behind).
    tier_store_result store(const tier_store_request & req) override;
    tier_evict_result evict(const tier_evict_request & req) override;
    tier_stats stats() const override;

    // Whether an entry holds exactly (ns, tokens).
    bool holds(const digest256 & ns, std::span<const token_id> tokens) const;
    disk_tier_stats disk_stats() const;
    const std::string & dir() const { return config_.dir; }
    // ok, or internal: index, entries, page references and byte counts agree. For tests.
    // REQUIRES: no store or restore in flight (each pins pages and reserves bytes while
    // it runs, which the check would report).
    status check_invariants() const;

private:
    struct page_ref {
        digest256 key;
        int64_t   token_start = 0;
        int64_t   token_count = 0;
        int64_t   file_bytes = 0;
    };
    struct entry_rec {
        digest256             ns;
        digest256             key;          // the last page's key = the prefix hash of all its tokens
        std::vector<page_ref> pages;
        int64_t               manifest_bytes = 0;
    };
    struct page_rec {
        int64_t refs = 0;      // entries listing it, plus stores and reads in progress
        int64_t bytes = 0;
        bool    gone = false;  // quarantined: the file is no longer under pages/
    };
    struct restore_plan;

    explicit disk_tier(const disk_tier_config & config);
    status recover();
    // The longest restorable end for the query (0: none), under the lock; `serving` (if
    // given) gets the entry whose pages serve it.
    int64_t restorable_end_locked(const digest256 & ns, std::span<const token_id> tokens, int64_t & matched,
                                  entry_id * serving = nullptr) const;
    void drop_entry_locked(entry_id id, bool evicted);
    void drop_entries_with_page_locked(const digest256 & key);
    void quarantine_locked(const std::string & path, const std::string & name, int64_t bytes);
    bool make_room_locked(int64_t bytes, int64_t & n_evicted);
    void release_page_locked(const digest256 & key);
    int64_t used_bytes_locked() const;
    std::string page_path(const digest256 & key) const;
    std::string entry_path(const digest256 & key) const;
    status write_file(const std::string & final_path, std::span<const std::span<const uint8_t>> parts, int64_t & n_written);

    disk_tier_config                                          config_;
    int                                                       lock_fd_ = -1;
    mutable std::mutex                                        mutex_;
    radix_index                                               index_;  // kind disk
    std::unordered_map<entry_id, entry_rec>                   entries_;
    std::unordered_map<digest256, page_rec, digest256_hash>   pages_;
    std::vector<std::pair<std::string, int64_t>>              quarantine_;  // oldest first: path, bytes
    int64_t                                                   fixed_bytes_ = 0;     // FORMAT, LOCK
    int64_t                                                   page_bytes_ = 0;      // files under pages/
    int64_t                                                   manifest_bytes_ = 0;  // files under entries/
    int64_t                                                   quarantine_bytes_ = 0;
    int64_t                                                   reserved_bytes_ = 0;  // writes in progress
    uint64_t                                                  n_tmp_ = 0;
    disk_tier_stats                                           counts_;
};

}  // namespace skippy::cache
