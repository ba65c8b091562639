// The stage cache with a disk tier, on the fake backend: a restarted cache restores
// from disk exactly what a cold compute gives; the tier order and the decisions;
// per-tier lookup counts; bad pages fall back to compute; the directory bound.
#include "cache/page_record.h"
#include "cache/stage_cache.h"

#include "common/test_data.h"
#include "fakes.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace skippy::cache {
namespace {

namespace fs = std::filesystem;
using testing::expected_kv;
using testing::fake_kv_backend;
using testing::recording_sink;
using toks = std::vector<token_id>;

cache_namespace disk_ns() { return testing::test_namespace("model-D", 1); }

using testing::run_of;
toks prefix(const toks & t, size_t n) { return toks(t.begin(), t.begin() + static_cast<ptrdiff_t>(n)); }

struct disk_cache_fixture : ::testing::Test {
    std::string                      dir = skippy::testing::make_temp_dir("stage-cache-disk");
    std::shared_ptr<recording_sink>  sink = std::make_shared<recording_sink>();
    std::unique_ptr<fake_kv_backend> backend;
    std::unique_ptr<stage_cache>     cache;
    cache_namespace                  ns = disk_ns();

    void TearDown() override {
        cache.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    stage_cache_config config() const {
        stage_cache_config c;
        c.min_tokens = 4;
        c.max_entries = 8;
        c.exact_max_bytes = 1 << 20;
        c.exact_page_tokens = 4;
        c.exact_block_bytes = 16;
        c.activation_max_bytes = 0;
        c.disk_dir = dir;
        c.disk_max_bytes = 1 << 20;
        return c;
    }
    // A fresh process: new pool, new cache over the same directory.
    void start(const stage_cache_config & c, int32_t n_blocks = 32) {
        cache.reset();
        backend = std::make_unique<fake_kv_backend>(n_blocks, 4, 3);
        auto made = stage_cache::create(*backend, c, sink);
        ASSERT_TRUE(made.is_ok()) << made.error().to_string();
        cache = std::move(made).value();
    }
    void start() { start(config()); }
    void check() {
        cache->wait_for_records();  // the invariants hold between stores, not during one
        status st = cache->check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_EQ(backend->violations(), 0);
    }
    restore_result request(int32_t session, const toks & prompt) {
        restore_result r = cache->restore({ns, session, prompt, static_cast<int64_t>(prompt.size()) - 1});
        EXPECT_EQ(backend->kv_of(session), expected_kv(prefix(prompt, static_cast<size_t>(r.restored_tokens))));
        const int64_t from = r.restored_tokens;
        toks rest(prompt.begin() + from, prompt.end());
        EXPECT_TRUE(cache->make_room_for_write(session, from, static_cast<int64_t>(rest.size())).enough);
        EXPECT_TRUE(backend->compute(session, from, rest).is_ok());
        cache->note_prefill(session, from, rest);
        EXPECT_EQ(backend->kv_of(session), expected_kv(prompt));  // exactness
        cache->record(ns, session, record_reason::final_prefill);
        cache->reset_session(session);
        EXPECT_TRUE(backend->truncate_session(session, 0).is_ok());
        return r;
    }
    int64_t tier_hits(std::string_view tier) const {
        for (const tier_snapshot & t : cache->tier_snapshots()) {
            if (t.name == tier) return t.stats.hits;
        }
        return -1;
    }
    int64_t tier_misses(std::string_view tier) const {
        for (const tier_snapshot & t : cache->tier_snapshots()) {
            if (t.name == tier) return t.stats.misses;
        }
        return -1;
    }
};

TEST_F(disk_cache_fixture, ARestartedCacheRestoresFromDiskExactly) {
    start();
    const toks p = run_of(10, 14);
    EXPECT_EQ(request(0, p).restored_tokens, 0);
    EXPECT_EQ(sink->last(record_event_name, "skippy.disk_cache.record"), "queued");
    cache->wait_for_records();
    EXPECT_EQ(sink->last(disk_store_event_name, "skippy.disk_cache.record"), "stored");
    ASSERT_EQ(cache->stats().disk.n_entries, 1);

    start();  // restart: memory tiers empty, the disk keeps the prompt
    EXPECT_EQ(cache->stats().disk.n_recovered_entries, 1);
    EXPECT_EQ(cache->stats().resident.n_entries, 0);
    const probe_result pr = cache->probe({ns, p, static_cast<int64_t>(p.size()) - 1, 0});
    EXPECT_EQ(pr.decision, "probe_hit");
    EXPECT_EQ(pr.tier, cache_tier::disk);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.candidates"), "resident=0 exact_state=0 disk=13");
    const restore_result r = request(0, p);  // request() checks the KV against a cold compute
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.tier, cache_tier::disk);
    EXPECT_EQ(r.restored_tokens, 13);
    EXPECT_EQ(r.imported_pages, 4);
    EXPECT_EQ(r.counters.kv_lookup_hits, 1u);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.tier"), "disk");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.disk_cache.matched_tokens"), "14");
    EXPECT_EQ(cache->stats().n_disk_restores, 1);
    EXPECT_EQ(tier_hits("disk"), 1);
    EXPECT_EQ(tier_misses("resident"), 1);  // asked first, did not serve
    EXPECT_EQ(tier_misses("exact_state"), 1);
    // Recorded again into memory: the next request is served by the resident tier.
    EXPECT_EQ(request(1, p).tier, cache_tier::resident);
    check();
}

TEST_F(disk_cache_fixture, APromptSharingAPrefixRestoresAllOfItFromDisk) {
    start();
    const toks a = run_of(10, 14);
    request(0, a);
    cache->wait_for_records();
    start();
    // Shares 10 tokens with a: pages [0,4) [4,8) [8,12) of a, the last cut at 10 on import
    // (request() checks the KV against a cold compute of b's first 10 tokens).
    const toks b = testing::concat(prefix(a, 10), run_of(700, 6));
    const restore_result r = request(0, b);
    EXPECT_EQ(r.tier, cache_tier::disk);
    EXPECT_EQ(r.restored_tokens, 10);
    EXPECT_EQ(r.decision, "restore_short");
    check();
}

TEST_F(disk_cache_fixture, MemoryTiersComeFirstAndTheDiskIsNotAskedWhenTheyServe) {
    start();
    const toks p = run_of(10, 14);
    request(0, p);
    cache->wait_for_records();
    sink->clear();
    const restore_result r = request(1, p);
    EXPECT_EQ(r.tier, cache_tier::resident);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.candidates"), "resident=13 exact_state=13") << "disk not asked";
    EXPECT_EQ(cache->stats().disk.n_restores, 0);
    check();
}

TEST_F(disk_cache_fixture, ACorruptPageOnDiskFallsBackToComputeAndIsQuarantined) {
    start();
    const toks p = run_of(10, 14);
    request(0, p);
    cache->wait_for_records();
    cache.reset();
    const std::string page = dir + "/pages/" + prefix_hash(ns, prefix(p, 8)).hex() + ".page";
    {
        std::fstream f(page, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(page_record_header_bytes + 3));
        f.put('\x55');
    }
    start();
    const restore_result r = request(0, p);  // still exact: computed
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(r.counters.kv_lookup_errors, 1u);
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.kv.error_class"), "integrity");
    EXPECT_EQ(sink->last(lookup_event_name, "skippy.disk_cache.quarantined"), "true");
    EXPECT_EQ(backend->n_imports(), 0) << "nothing from the bad page reached the pool";
    EXPECT_EQ(cache->stats().disk.n_quarantines, 1);
    check();
}

TEST_F(disk_cache_fixture, ASecondCacheOnTheSameDirectoryIsRefused) {
    start();
    fake_kv_backend other(8, 4, 1);
    auto second = stage_cache::create(other, config(), nullptr);
    ASSERT_FALSE(second.is_ok());
    EXPECT_EQ(second.error().code(), error_code::unavailable);
}

TEST_F(disk_cache_fixture, DestroyingTheCacheFlushesAQueuedDiskWrite) {
    start();
    request(0, run_of(10, 14));
    cache.reset();  // right away: the record may not even have started; an orderly shutdown writes it
    start();
    EXPECT_EQ(cache->stats().disk.n_recovered_entries, 1);
}

TEST_F(disk_cache_fixture, DiskWritesStayWithinTheBound) {
    stage_cache_config c = config();
    c.disk_max_bytes = 4096;
    c.max_entries = 0;      // only the page tiers
    c.exact_max_bytes = 0;  // only the disk
    start(c);
    for (int i = 0; i < 12; ++i) {
        request(0, run_of(100 * i, 12));
        cache->wait_for_records();
        ASSERT_LE(testing::dir_bytes(dir), 4096);
    }
    EXPECT_GT(cache->stats().disk.n_evictions, 0);
    EXPECT_GT(cache->stats().disk.n_entries, 0);
    // The most recent prompt restores from disk (as the only tier).
    const toks last = run_of(1100, 12);
    EXPECT_EQ(request(1, last).tier, cache_tier::disk);
    check();
}

// Two lanes restore from disk while the worker writes and evicts (run under TSan).
TEST_F(disk_cache_fixture, LanesRestoreWhileTheWorkerWritesAndEvicts) {
    stage_cache_config c = config();
    c.disk_max_bytes = 6000;
    c.max_entries = 0;
    c.exact_max_bytes = 0;
    // Room made for one lane's write is not reserved: the other lane's import may take
    // it before the write. So the pool holds the worst case at once — every waiting
    // record and the one being written (4 blocks each), both sessions with a
    // copy-on-write block — and no interleaving can exhaust it.
    const int32_t worst_case_blocks = (c.max_pending_records + 1) * 4 + 2 * (4 + 1);
    start(c, worst_case_blocks + 4);
    auto lane = [this](int32_t session) {
        for (int i = 0; i < 40; ++i) {
            // Prompts of a few families sharing their first 8 tokens.
            const toks p = testing::concat(run_of(1000 + 100 * (i % 3), 8), run_of(5000 + 31 * i + 7 * session, 6));
            request(session, p);  // checks exactness of whatever was restored
        }
    };
    for (int f = 0; f < 3; ++f) {  // one prompt of each family on disk before the lanes start
        request(0, testing::concat(run_of(1000 + 100 * f, 8), run_of(90, 6)));
        cache->wait_for_records();
    }
    std::thread a(lane, 0), b(lane, 1);
    a.join();
    b.join();
    cache->wait_for_records();
    EXPECT_GT(cache->stats().disk.n_restores, 0);
    EXPECT_LE(testing::dir_bytes(dir), 6000);
    check();
}

}  // namespace
}  // namespace skippy::cache
