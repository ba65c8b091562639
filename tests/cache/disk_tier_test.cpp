// The disk tier on its own: longest page-aligned prefixes across a restart, one owner
// per directory, recovery from what a crash leaves, bad files quarantined and never
// served, the byte bound, injected write failures (a full disk), and 50 writers killed
// by SIGKILL at random points.
#include "cache/disk_tier.h"
#include "cache/page_record.h"

#include "common/test_data.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace skippy::cache {
namespace {

namespace fs = std::filesystem;
using testing::checking_importer;
using testing::concat;
using testing::dir_bytes;
using testing::files_in;
using testing::run_of;
using toks = std::vector<token_id>;

cache_namespace make_ns(const std::string & model = "disk-model") { return testing::test_namespace(model); }

constexpr int64_t k_page_tokens = 4;
constexpr size_t k_payload = 200;

struct disk_fixture : ::testing::Test {
    std::string     dir = skippy::testing::make_temp_dir("disk-tier");
    cache_namespace ns = make_ns();

    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    disk_tier_config config(int64_t max_bytes = 1 << 20) const {
        disk_tier_config c;
        c.dir = dir;
        c.max_bytes = max_bytes;
        c.page_tokens = k_page_tokens;
        return c;
    }
    std::unique_ptr<disk_tier> open(const disk_tier_config & c) {
        auto t = disk_tier::open(c);
        EXPECT_TRUE(t.is_ok()) << t.error().to_string();
        return t.is_ok() ? std::move(t).value() : nullptr;
    }
    std::unique_ptr<disk_tier> open() { return open(config()); }
    static tier_store_result store(disk_tier & t, const cache_namespace & ns, const toks & tokens, size_t bytes = k_payload) {
        const auto pages = testing::pages_of(ns, tokens, k_page_tokens, bytes);
        return t.store(tier_store_request{ns, tokens, pages});
    }
    tier_store_result store(disk_tier & t, const toks & tokens) { return store(t, ns, tokens); }
    int64_t restorable(disk_tier & t, const toks & query, int64_t target = -1) {
        return t.peek(tier_peek_request{ns, query, target < 0 ? static_cast<int64_t>(query.size()) : target}).restorable_tokens;
    }
    tier_restore_result restore(disk_tier & t, const toks & query, int64_t n, checking_importer & imp) {
        return t.restore(tier_restore_request{ns, 0, query, n, &imp});
    }
    void check(disk_tier & t) {
        status st = t.check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_LE(dir_bytes(dir), t.disk_stats().max_bytes);
        ASSERT_EQ(dir_bytes(dir), t.disk_stats().bytes) << "accounting equals the files";
    }
};

TEST_F(disk_fixture, AStoredPromptSurvivesARestartAndServesTheLongestSharedPrefix) {
    const toks a = run_of(10, 10);  // pages [0,4) [4,8) [8,10)
    {
        auto t = open();
        EXPECT_EQ(store(*t, a).state, tier_store_state::stored);
        EXPECT_EQ(store(*t, a).state, tier_store_state::present);
        check(*t);
    }
    auto t = open();  // a new process, the same directory
    EXPECT_EQ(t->disk_stats().n_recovered_entries, 1);
    EXPECT_EQ(t->disk_stats().n_pages, 3);
    check(*t);
    // A different query sharing 6 tokens: all 6, from a's pages [0,4) and [4,8) (the
    // importer keeps [0, 6) of the second).
    const toks shares6 = concat(toks(a.begin(), a.begin() + 6), run_of(900, 6));
    EXPECT_EQ(restorable(*t, shares6), 6);
    // The stored prompt minus its last token: 9.
    EXPECT_EQ(restorable(*t, toks(a.begin(), a.end() - 1)), 9);
    // A query extending the stored prompt: the whole stored prompt is on its path.
    const toks longer = concat(a, run_of(500, 7));
    EXPECT_EQ(restorable(*t, longer), 10);
    EXPECT_EQ(restorable(*t, longer, 9), 9);  // clipped to the caller's target
    EXPECT_EQ(restorable(*t, run_of(11, 10)), 0);  // shares nothing

    checking_importer imp;
    ASSERT_EQ(restore(*t, shares6, 6, imp).error, error_code::ok);
    EXPECT_EQ(imp.last_pages.size(), 2u);
    EXPECT_EQ(imp.last_tokens, 6);
    EXPECT_TRUE(imp.pages_match(ns, a, k_payload)) << "the stored prompt's own pages";
    ASSERT_EQ(restore(*t, longer, 10, imp).error, error_code::ok);
    EXPECT_EQ(imp.last_pages.size(), 3u);
    EXPECT_TRUE(imp.pages_match(ns, longer, k_payload));
    // 9 of the query: pages up to the one covering 9, the caller truncates.
    ASSERT_EQ(restore(*t, longer, 9, imp).error, error_code::ok);
    EXPECT_EQ(imp.last_tokens, 9);
    EXPECT_TRUE(imp.pages_match(ns, longer, k_payload));
    check(*t);
}

TEST_F(disk_fixture, PromptsSharingAPrefixShareItsPageFiles) {
    auto t = open();
    const toks base = run_of(10, 8);
    ASSERT_EQ(store(*t, concat(base, run_of(100, 3))).state, tier_store_state::stored);
    const tier_store_result second = store(*t, concat(base, run_of(200, 5)));
    ASSERT_EQ(second.state, tier_store_state::stored);
    EXPECT_EQ(second.n_pages_written, 2);  // [8,12) and [12,13): the first two pages are shared
    EXPECT_EQ(t->disk_stats().n_pages, 5);
    check(*t);
}

TEST_F(disk_fixture, ASecondOwnerIsRefusedWithAClearError) {
    auto first = open();
    auto second = disk_tier::open(config());
    ASSERT_FALSE(second.is_ok());
    EXPECT_EQ(second.error().code(), error_code::unavailable);
    EXPECT_NE(second.error().message().find("in use by another process"), std::string::npos) << second.error().message();
    EXPECT_NE(second.error().message().find(std::to_string(::getpid())), std::string::npos) << "names the owner";
    first.reset();
    EXPECT_TRUE(disk_tier::open(config()).is_ok()) << "the lock goes with its owner";
}

TEST_F(disk_fixture, AnotherFormatIsRefused) {
    { auto t = open(); }
    std::ofstream(dir + "/FORMAT", std::ios::trunc) << "skippy kv disk cache, format 99\n";
    auto t = disk_tier::open(config());
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.error().code(), error_code::unsupported);
}

TEST_F(disk_fixture, WhatACrashLeavesIsRemovedAtOpen) {
    const toks a = run_of(10, 10), b = run_of(300, 6), c = run_of(600, 5);
    {
        auto t = open();
        ASSERT_EQ(store(*t, a).state, tier_store_state::stored);
        ASSERT_EQ(store(*t, b).state, tier_store_state::stored);
        ASSERT_EQ(store(*t, c).state, tier_store_state::stored);
    }
    // A write in progress, pages of a prompt whose manifest never came (b), a manifest
    // whose page is gone (c).
    std::ofstream(dir + "/tmp/x.page.1.0.tmp") << "half a page";
    fs::remove(dir + "/entries/" + prefix_hash(ns, b).hex() + ".entry");
    fs::remove(dir + "/pages/" + prefix_hash(ns, toks(c.begin(), c.begin() + 4)).hex() + ".page");

    auto t = open();
    const disk_tier_stats s = t->disk_stats();
    EXPECT_EQ(s.n_recovered_entries, 1);  // a
    EXPECT_EQ(s.n_dropped_entries, 1);    // c
    EXPECT_EQ(s.n_orphans_removed, 1 + 2 + 1);  // the tmp file, b's two pages, c's surviving page
    EXPECT_EQ(testing::n_files(dir + "/tmp"), 0);
    EXPECT_EQ(testing::n_files(dir + "/pages"), 3) << "a's pages only";
    EXPECT_EQ(restorable(*t, a), 10);
    EXPECT_EQ(restorable(*t, b), 0);
    EXPECT_EQ(restorable(*t, c), 0);
    check(*t);
}

TEST_F(disk_fixture, ABitFlippedPageIsQuarantinedAndNeverServed) {
    const toks a = run_of(10, 10);
    auto t = open();
    ASSERT_EQ(store(*t, a).state, tier_store_state::stored);
    const std::string page = dir + "/pages/" + prefix_hash(ns, toks(a.begin(), a.begin() + 8)).hex() + ".page";
    {
        std::fstream f(page, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(page_record_header_bytes + 17));
        char c = 0;
        f.seekg(static_cast<std::streamoff>(page_record_header_bytes + 17));
        f.get(c);
        f.seekp(static_cast<std::streamoff>(page_record_header_bytes + 17));
        f.put(static_cast<char>(c ^ 0x04));
    }
    checking_importer imp;
    const tier_restore_result r = restore(*t, a, 10, imp);
    EXPECT_EQ(r.error, error_code::integrity);
    EXPECT_TRUE(r.quarantined);
    EXPECT_EQ(imp.n_calls, 0) << "nothing reached the session";
    EXPECT_FALSE(fs::exists(page));
    EXPECT_EQ(testing::n_files(dir + "/quarantine"), 1);
    EXPECT_EQ(restorable(*t, a), 0) << "the entry using the page is gone";
    EXPECT_EQ(t->disk_stats().n_quarantines, 1);
    check(*t);
    t.reset();
    auto again = open();  // and after a restart
    EXPECT_EQ(restorable(*again, a), 0);
    check(*again);
}

TEST_F(disk_fixture, ATruncatedPageIsNeverServed) {
    const toks a = run_of(10, 10);
    auto t = open();
    ASSERT_EQ(store(*t, a).state, tier_store_state::stored);
    const std::string page = dir + "/pages/" + prefix_hash(ns, toks(a.begin(), a.begin() + 4)).hex() + ".page";
    fs::resize_file(page, fs::file_size(page) - 50);
    checking_importer imp;
    const tier_restore_result r = restore(*t, a, 10, imp);
    EXPECT_EQ(r.error, error_code::invalid_data);
    EXPECT_EQ(imp.n_calls, 0);
    EXPECT_EQ(restorable(*t, a), 0);
    t.reset();
    // Truncated while the process was down: caught at open by its size.
    ASSERT_EQ(store(*open(), a).state, tier_store_state::stored);
    fs::resize_file(page, 10);
    auto again = open();
    EXPECT_EQ(again->disk_stats().n_dropped_entries, 1);
    EXPECT_EQ(restorable(*again, a), 0);
    check(*again);
}

TEST_F(disk_fixture, APageFromAnotherModelIsNeverServed) {
    const toks a = run_of(10, 8);
    // The same tokens stored by another model in another directory.
    const std::string other_dir = dir + "-other";
    const cache_namespace other = make_ns("another-model");
    {
        disk_tier_config c = config();
        c.dir = other_dir;
        auto o = open(c);
        ASSERT_EQ(store(*o, other, a).state, tier_store_state::stored);
    }
    auto t = open();
    ASSERT_EQ(store(*t, a).state, tier_store_state::stored);
    // Someone copies the other model's page over ours, under our name.
    const std::string ours = dir + "/pages/" + prefix_hash(ns, toks(a.begin(), a.begin() + 4)).hex() + ".page";
    const std::string theirs = other_dir + "/pages/" + prefix_hash(other, toks(a.begin(), a.begin() + 4)).hex() + ".page";
    fs::copy_file(theirs, ours, fs::copy_options::overwrite_existing);
    checking_importer imp;
    const tier_restore_result r = restore(*t, a, 8, imp);
    EXPECT_EQ(r.error, error_code::invalid_data);
    EXPECT_TRUE(r.quarantined);
    EXPECT_EQ(imp.n_calls, 0);
    EXPECT_EQ(restorable(*t, a), 0);
    check(*t);
    fs::remove_all(other_dir);
}

TEST_F(disk_fixture, ACorruptManifestIsQuarantinedAtOpen) {
    const toks a = run_of(10, 8);
    { ASSERT_EQ(store(*open(), a).state, tier_store_state::stored); }
    const std::string manifest = dir + "/entries/" + prefix_hash(ns, a).hex() + ".entry";
    {
        std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(60);
        f.put('\x7f');
    }
    auto t = open();
    EXPECT_EQ(t->disk_stats().n_recovered_entries, 0);
    EXPECT_EQ(t->disk_stats().n_quarantines, 1);
    EXPECT_EQ(t->disk_stats().n_orphans_removed, 2) << "its pages went with it";
    EXPECT_EQ(restorable(*t, a), 0);
    check(*t);
}

TEST_F(disk_fixture, TheBoundEvictsLeastRecentlyUsedAndRefusesWhatCannotFit) {
    // Each prompt of 8 tokens: two pages of 200 + 136 bytes and a manifest.
    const int64_t page_file = static_cast<int64_t>(k_payload + page_record_overhead_bytes);
    const int64_t entry_bytes = 2 * page_file + 56 + 4 * 8 + 2 * 56 + 32;
    const int64_t lock_file = static_cast<int64_t>(std::to_string(::getpid()).size() + 1);  // the owner's pid
    const int64_t fixed = static_cast<int64_t>(disk_format_text.size()) + lock_file;
    auto t = open(config(fixed + 3 * entry_bytes));
    const toks a = run_of(10, 8), b = run_of(100, 8), c = run_of(200, 8), d = run_of(300, 8);
    ASSERT_EQ(store(*t, a).state, tier_store_state::stored);
    ASSERT_EQ(store(*t, b).state, tier_store_state::stored);
    ASSERT_EQ(store(*t, c).state, tier_store_state::stored);
    check(*t);
    checking_importer imp;
    ASSERT_EQ(restore(*t, a, 8, imp).error, error_code::ok);  // a is now the most recent
    const tier_store_result r = store(*t, d);
    ASSERT_EQ(r.state, tier_store_state::stored);
    EXPECT_EQ(r.n_evicted, 1);
    EXPECT_EQ(restorable(*t, b), 0) << "b was least recently used";
    EXPECT_EQ(restorable(*t, a), 8);
    EXPECT_EQ(restorable(*t, c), 8);
    EXPECT_EQ(t->disk_stats().n_evictions, 1);
    check(*t);
    // An entry larger than the whole bound is refused without evicting anything.
    const tier_store_result huge = store(*t, ns, run_of(700, 8), 5000);
    EXPECT_EQ(huge.state, tier_store_state::refused);
    EXPECT_EQ(huge.error, error_code::unavailable);
    EXPECT_EQ(t->disk_stats().n_entries, 3);
    check(*t);
}

TEST_F(disk_fixture, AFullDiskFailsTheWriteAndLeavesNothingPartial) {
    disk_tier_config c = config();
    std::atomic<int64_t> budget{600};  // bytes the "disk" takes before ENOSPC
    c.fault = [&budget](std::string_view, int64_t, int64_t n) {
        if (budget.fetch_sub(n) < n) return error_code::unavailable;
        return error_code::ok;
    };
    auto t = open(c);
    const toks a = run_of(10, 10);  // 3 pages of 336 bytes: the second one fails
    const tier_store_result r = store(*t, a);
    EXPECT_EQ(r.state, tier_store_state::refused);
    EXPECT_EQ(r.error, error_code::unavailable);
    EXPECT_EQ(t->disk_stats().n_write_failures, 1);
    EXPECT_EQ(testing::n_files(dir + "/pages"), 0) << "the page written before the failure went again";
    EXPECT_EQ(testing::n_files(dir + "/entries"), 0);
    EXPECT_EQ(testing::n_files(dir + "/tmp"), 0);
    EXPECT_EQ(restorable(*t, a), 0);
    check(*t);
    budget = int64_t{1} << 40;  // space again
    EXPECT_EQ(store(*t, a).state, tier_store_state::stored);
    EXPECT_EQ(restorable(*t, a), 10);
    check(*t);
}

TEST_F(disk_fixture, TheDefaultBoundIsTenGiBOrATenthOfTheFilesystem) {
    disk_tier_config c = config(0);
    auto t = open(c);
    struct statvfs sv {};
    ASSERT_EQ(::statvfs(dir.c_str(), &sv), 0);
    const int64_t tenth = static_cast<int64_t>(static_cast<long double>(sv.f_blocks) * sv.f_frsize / 10);
    EXPECT_EQ(t->disk_stats().max_bytes, std::min<int64_t>(int64_t{10} << 30, tenth));
}

TEST_F(disk_fixture, PagesCutAtAnotherPageSizeAreNotServed) {
    const toks a = run_of(10, 10);
    { ASSERT_EQ(store(*open(), a).state, tier_store_state::stored); }
    disk_tier_config c = config();
    c.page_tokens = 8;
    auto t = open(c);
    EXPECT_EQ(t->disk_stats().n_dropped_entries, 1);
    EXPECT_EQ(t->peek(tier_peek_request{ns, a, 10}).restorable_tokens, 0);
    check(*t);
}

// A writer process that stores prompts sharing prefixes in a loop, killed with
// SIGKILL at a random point, 50 times. After each kill the directory reopens, stays
// within its bound, and every prompt it still claims restores with exactly the bytes
// its tokens give; nothing corrupt is served.
TEST_F(disk_fixture, WritersKilledAtRandomPointsNeverLeaveACorruptPageServed) {
    const int64_t bound = 1 << 20;
    constexpr size_t big_payload = 8 << 10;  // pages large enough that kills land inside writes
    std::mt19937 rng(12345);
    auto prompt = [](uint32_t i) {
        // Groups of prompts share their first 8 tokens (two pages).
        return concat(run_of(static_cast<int32_t>(1000 + (i % 5) * 50), 8), run_of(static_cast<int32_t>(5000 + i * 13), 1 + i % 11));
    };
    uint32_t next_prompt = 0;
    for (int round = 0; round < 50; ++round) {
        const uint32_t first = next_prompt;
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            // The child: only the tier, no threads, no gtest.
            auto t = disk_tier::open(config(bound));
            if (!t.is_ok()) ::_exit(3);
            for (uint32_t i = first;; ++i) {
                const toks p = prompt(i);
                const auto pages = testing::pages_of(ns, p, k_page_tokens, big_payload);
                (void)(*t)->store(tier_store_request{ns, p, pages});
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(1000, 250000)(rng)));
        ASSERT_EQ(::kill(pid, SIGKILL), 0);
        int wstatus = 0;
        ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
        ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer must still have been running (exit " << WEXITSTATUS(wstatus) << ")";
        ASSERT_LE(dir_bytes(dir), bound) << "round " << round << ": over the bound while writing";
        next_prompt += 40;

        auto t = open(config(bound));
        ASSERT_NE(t, nullptr);
        check(*t);
        // This round's prompts, where the kill landed, and a sample of the older ones
        // (all of them were checked in their own round; restoring every one each round
        // made this test over a minute long under ASan).
        std::vector<uint32_t> to_check;
        for (uint32_t i = first; i < next_prompt; ++i) to_check.push_back(i);
        for (int k = 0; k < 40 && first > 0; ++k) to_check.push_back(std::uniform_int_distribution<uint32_t>(0, first - 1)(rng));
        int n_served = 0;
        for (const uint32_t i : to_check) {
            const toks p = prompt(i);
            const int64_t n = t->peek(tier_peek_request{ns, p, static_cast<int64_t>(p.size())}).restorable_tokens;
            if (n == 0) continue;
            checking_importer imp;
            const tier_restore_result r = t->restore(tier_restore_request{ns, 0, p, n, &imp});
            ASSERT_EQ(r.error, error_code::ok) << "round " << round << " prompt " << i << ": a stored page failed to read";
            ASSERT_TRUE(imp.pages_match(ns, p, big_payload)) << "round " << round << " prompt " << i;
            ++n_served;
        }
        EXPECT_EQ(t->disk_stats().n_quarantines, 0) << "a crash never leaves a bad file under a final name";
        if (round == 49) {
            EXPECT_GT(n_served, 0);
        }
        check(*t);
    }
}

}  // namespace
}  // namespace skippy::cache
