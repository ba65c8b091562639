// The pieces every tier shares: the choice among tiers, the decision-event builder,
// the page record (disk file / Redis value) and the disk manifest, with golden bytes.
#include "cache/decision_event.h"
#include "cache/disk_tier.h"
#include "cache/page_record.h"
#include "cache/redis_client.h"
#include "cache/tier.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace skippy::cache {
namespace {

tier_candidate cand(cache_tier t, int64_t n, error_code e = error_code::ok) {
    tier_candidate c;
    c.tier = t;
    c.peeked = true;
    c.peek.restorable_tokens = n;
    c.peek.matched_tokens = n;
    c.peek.error = e;
    return c;
}

TEST(choose_tier, TheMostTokensWinsAndTiesGoToTheEarlierTier) {
    const tier_candidate c1[] = {cand(cache_tier::resident, 10), cand(cache_tier::exact_state, 10), cand(cache_tier::disk, 8)};
    EXPECT_EQ(choose_tier(c1, 4), 0);
    const tier_candidate c2[] = {cand(cache_tier::resident, 10), cand(cache_tier::exact_state, 12), cand(cache_tier::disk, 64),
                                 cand(cache_tier::redis, 64)};
    EXPECT_EQ(choose_tier(c2, 4), 2);
    const tier_candidate c3[] = {cand(cache_tier::resident, 3), cand(cache_tier::exact_state, 2)};
    EXPECT_EQ(choose_tier(c3, 4), -1) << "below min_tokens";
    tier_candidate skipped = cand(cache_tier::disk, 99);
    skipped.peeked = false;
    const tier_candidate c4[] = {cand(cache_tier::resident, 5), skipped, cand(cache_tier::redis, 50, error_code::unavailable)};
    EXPECT_EQ(choose_tier(c4, 4), 0) << "tiers not asked, or that failed, never serve";
}

TEST(choose_tier, CandidatesTextListsWhatWasAsked) {
    tier_candidate skipped = cand(cache_tier::disk, 1);
    skipped.peeked = false;
    const tier_candidate c[] = {cand(cache_tier::resident, 12), cand(cache_tier::exact_state, 8), skipped,
                                cand(cache_tier::redis, 0, error_code::unavailable)};
    EXPECT_EQ(candidates_text(c), "resident=12 exact_state=8 redis=error");
}

TEST(decision_event, AttributesKeepTheirTypesAndTableOrder) {
    decision_event ev("stage.test", 3);
    ev.text<attr::kv_decision>("restore_hit").num<attr::kv_session>(2).flag<attr::kv_enough>(true).real<attr::kv_lookup_ms>(0.5);
    ev.num<attr::kv_session>(4);  // set twice: the last value stays
    const telemetry::event e = ev.to_event();
    EXPECT_EQ(e.name, "stage.test");
    EXPECT_EQ(e.stage, 3);
    ASSERT_EQ(e.attrs.size(), 4u);
    EXPECT_EQ(e.attrs[0].first, "skippy.kv.session");
    EXPECT_EQ(std::get<int64_t>(e.attrs[0].second), 4);
    EXPECT_EQ(e.attrs[1].first, "skippy.kv.decision");
    EXPECT_EQ(std::get<std::string>(e.attrs[1].second), "restore_hit");
    EXPECT_EQ(e.attrs[2].first, "skippy.kv.lookup_ms");
    EXPECT_EQ(std::get<double>(e.attrs[2].second), 0.5);
    EXPECT_EQ(e.attrs[3].first, "skippy.kv.enough");
    EXPECT_TRUE(std::get<bool>(e.attrs[3].second));
    ev.move<attr::kv_decision, attr::kv_restore_decision>();
    EXPECT_FALSE(ev.has(attr::kv_decision));
    EXPECT_TRUE(ev.has(attr::kv_restore_decision));
}

TEST(decision_event, EveryNameIsUniqueAndDocumentedUnderSkippy) {
    // The table is checked at compile time (static_assert); this pins a few names the
    // transport tests and dashboards rely on.
    EXPECT_EQ(describe(attr::kv_decision).name, "skippy.kv.decision");
    EXPECT_EQ(describe(attr::exact_matched_tokens).name, "skippy.exact_cache.matched_tokens");
    EXPECT_EQ(describe(attr::activation_hit).name, "skippy.activation_cache.hit");
    EXPECT_EQ(describe(attr::disk_record).name, "skippy.disk_cache.record");
    EXPECT_EQ(describe(attr::redis_matched_tokens).name, "skippy.redis_cache.matched_tokens");
}

digest256 filled(uint8_t b) {
    digest256 d;
    d.bytes.fill(b);
    return d;
}

std::string hex(std::span<const uint8_t> bytes) {
    std::string out;
    char buf[4];
    for (uint8_t b : bytes) {
        std::snprintf(buf, sizeof(buf), "%02x", b);
        out += buf;
    }
    return out;
}

// docs/kv-cache.md "Page records": the example there, byte for byte.
TEST(page_record, GoldenBytesOfAThreeBytePayload) {
    page_record_header h;
    h.ns = filled(0x11);
    h.key = filled(0x22);
    h.token_start = 4;
    h.token_count = 2;
    const uint8_t payload[] = {'a', 'b', 'c'};
    const std::vector<uint8_t> rec = encode_page_record(h, payload);
    ASSERT_EQ(rec.size(), 139u);
    const std::string want_header = "534b505950524543"      // SKPYPREC
                                    "0100" "0000" "00000000"  // version 1, reserved
                                    + std::string(64, '1') + std::string(64, '2') +
                                    "0400000000000000"  // token_start 4
                                    "0200000000000000"  // token_count 2
                                    "0300000000000000"  // payload_bytes 3
                                    "616263";           // abc
    EXPECT_EQ(hex(std::span<const uint8_t>(rec).first(107)), want_header);
    EXPECT_EQ(hex(std::span<const uint8_t>(rec).subspan(107)),
              hex(sha256(std::span<const uint8_t>(rec).first(107)).bytes));
    EXPECT_EQ(hex(std::span<const uint8_t>(rec).subspan(107)), "8ae5746af1aa2b94eecb84cf166e7b2424a26c6d1f689649513db1ae3e52dbef")
        << "golden checksum (docs/kv-cache.md)";
    auto p = verify_page_record(rec, h.ns, h.key, 4, 2);
    ASSERT_TRUE(p.is_ok()) << p.error().to_string();
    EXPECT_EQ(std::string(p->begin(), p->end()), "abc");
}

TEST(page_record, EveryMismatchIsRefused) {
    page_record_header h;
    h.ns = filled(1);
    h.key = filled(2);
    h.token_start = 0;
    h.token_count = 4;
    const uint8_t payload[] = {9, 8, 7, 6};
    const std::vector<uint8_t> rec = encode_page_record(h, payload);
    EXPECT_EQ(verify_page_record(rec, filled(3), h.key, 0, 4).error().code(), error_code::invalid_data) << "another namespace";
    EXPECT_EQ(verify_page_record(rec, h.ns, filled(3), 0, 4).error().code(), error_code::invalid_data) << "another prefix";
    EXPECT_EQ(verify_page_record(rec, h.ns, h.key, 4, 4).error().code(), error_code::invalid_data) << "another range";
    std::vector<uint8_t> flipped = rec;
    flipped[page_record_header_bytes + 1] ^= 1;
    EXPECT_EQ(verify_page_record(flipped, h.ns, h.key, 0, 4).error().code(), error_code::integrity);
    std::vector<uint8_t> truncated(rec.begin(), rec.end() - 1);
    EXPECT_EQ(verify_page_record(truncated, h.ns, h.key, 0, 4).error().code(), error_code::invalid_data);
    std::vector<uint8_t> longer = rec;
    longer.push_back(0);
    EXPECT_EQ(verify_page_record(longer, h.ns, h.key, 0, 4).error().code(), error_code::invalid_data);
    std::vector<uint8_t> version = rec;
    version[8] = 2;
    EXPECT_EQ(verify_page_record(version, h.ns, h.key, 0, 4).error().code(), error_code::unsupported);
    std::vector<uint8_t> huge = rec;
    for (int i = 0; i < 8; ++i) huge[96 + static_cast<size_t>(i)] = 0xff;  // payload_bytes 2^64 - 1
    EXPECT_EQ(verify_page_record(huge, h.ns, h.key, 0, 4).error().code(), error_code::invalid_data);
    for (size_t n = 0; n < rec.size(); ++n) {  // every prefix of a record is refused, none crashes
        EXPECT_FALSE(verify_page_record(std::span<const uint8_t>(rec).first(n), h.ns, h.key, 0, 4).is_ok());
    }
}

// docs/kv-cache.md "Disk tier": the manifest example, byte for byte.
TEST(disk_manifest, GoldenBytesOfATwoPageEntry) {
    disk_manifest m;
    m.ns = filled(0x11);
    m.tokens = {5, 6, 7};
    m.pages.push_back({0, 2, 140, filled(0x33)});
    m.pages.push_back({2, 1, 137, filled(0x44)});
    const std::vector<uint8_t> bytes = encode_disk_manifest(m);
    ASSERT_EQ(bytes.size(), 56u + 12 + 2 * 56 + 32);
    const std::string want = "534b505944454e54"  // SKPYDENT
                             "0100" "0000"       // version 1, reserved
                             "02000000"          // 2 pages
                             + std::string(64, '1') +
                             "0300000000000000"          // 3 tokens
                             "050000000600000007000000"  // 5 6 7
                             "0000000000000000" "0200000000000000" "8c00000000000000" + std::string(64, '3') +
                             "0200000000000000" "0100000000000000" "8900000000000000" + std::string(64, '4');
    EXPECT_EQ(hex(std::span<const uint8_t>(bytes).first(bytes.size() - 32)), want);
    EXPECT_EQ(hex(std::span<const uint8_t>(bytes).subspan(bytes.size() - 32)),
              "ba9f4db4c3082e36e5eff326e595b22f2207db07f664c0958a22b3e42b801235")
        << "golden checksum (docs/kv-cache.md)";
    auto back = decode_disk_manifest(bytes);
    ASSERT_TRUE(back.is_ok()) << back.error().to_string();
    EXPECT_EQ(back->tokens, m.tokens);
    ASSERT_EQ(back->pages.size(), 2u);
    EXPECT_EQ(back->pages[1].key, filled(0x44));
    EXPECT_EQ(back->pages[1].file_bytes, 137);
}

TEST(disk_manifest, BadManifestsAreRefused) {
    disk_manifest m;
    m.ns = filled(1);
    m.tokens = {1, 2, 3, 4};
    m.pages.push_back({0, 4, 200, filled(2)});
    const std::vector<uint8_t> good = encode_disk_manifest(m);
    ASSERT_TRUE(decode_disk_manifest(good).is_ok());
    std::vector<uint8_t> flipped = good;
    flipped[60] ^= 1;
    EXPECT_EQ(decode_disk_manifest(flipped).error().code(), error_code::integrity);
    disk_manifest gap = m;
    gap.pages[0].token_start = 1;
    EXPECT_EQ(decode_disk_manifest(encode_disk_manifest(gap)).error().code(), error_code::invalid_data);
    disk_manifest short_cover = m;
    short_cover.pages[0].token_count = 3;
    EXPECT_EQ(decode_disk_manifest(encode_disk_manifest(short_cover)).error().code(), error_code::invalid_data);
    std::vector<uint8_t> version = good;
    version[8] = 9;
    EXPECT_EQ(decode_disk_manifest(version).error().code(), error_code::unsupported);
    for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(decode_disk_manifest(std::span<const uint8_t>(good).first(n)).is_ok());
}

TEST(redis_url, ParsesHostPortDatabaseAndPassword) {
    auto u = parse_redis_url("redis://127.0.0.1:6390/2");
    ASSERT_TRUE(u.is_ok());
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, 6390);
    EXPECT_EQ(u->db, 2);
    auto d = parse_redis_url("redis://localhost");
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->port, 6379);
    EXPECT_EQ(d->db, 0);
    auto p = parse_redis_url("redis://:s3cret@10.0.0.2:7000");
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(p->password, "s3cret");
    EXPECT_EQ(p->host, "10.0.0.2");
    for (const char * bad : {"http://x", "redis://", "redis://h:0", "redis://h:99999", "redis://h:12x", "redis://h/x"}) {
        EXPECT_EQ(parse_redis_url(bad).error().code(), error_code::invalid_argument) << bad;
    }
}

}  // namespace
}  // namespace skippy::cache
