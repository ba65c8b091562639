// Blob store: dedupe, refcounts, logical vs physical bytes, underflow, corruption.
#include "cache/blob_store.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

namespace skippy::cache {
namespace {

std::vector<uint8_t> bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

TEST(blob_store, SplitsIntoFixedBlocksAndReadsBack) {
    blob_store store(4);
    auto data = bytes("abcdefghij");  // [abcd][efgh][ij]
    auto ids = store.put(data);
    ASSERT_EQ(ids.size(), 3u);
    auto back = store.read(ids);
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, data);
    EXPECT_EQ(store.stats().physical_bytes, 10);
    EXPECT_TRUE(store.put({}).empty());
    EXPECT_INVARIANTS(store);
}

TEST(blob_store, IdenticalBlocksAreStoredOnce) {
    blob_store store(4);
    //   A = [abcd][efgh][ij]     B = [abcd][efgh][kl]
    //   physical: abcd efgh ij kl = 12 bytes; logical: 20 bytes
    auto a = store.put(bytes("abcdefghij"));
    auto b = store.put(bytes("abcdefghkl"));
    EXPECT_EQ(a[0], b[0]);
    EXPECT_EQ(a[1], b[1]);
    EXPECT_NE(a[2], b[2]);
    blob_stats s = store.stats();
    EXPECT_EQ(s.n_blocks, 4);
    EXPECT_EQ(s.physical_bytes, 12);
    EXPECT_EQ(s.logical_bytes, 20);
    EXPECT_EQ(s.n_dedupe_hits, 2);
    EXPECT_EQ(s.n_refs, 6);
    EXPECT_EQ(store.new_bytes_for(bytes("abcdzzzz")), 4);
    EXPECT_EQ(store.unique_bytes(a), 10);
    EXPECT_INVARIANTS(store);

    ASSERT_TRUE(store.release_all(a).is_ok());
    s = store.stats();
    EXPECT_EQ(s.physical_bytes, 10);  // ij went, the shared blocks stay for B
    EXPECT_EQ(s.logical_bytes, 10);
    EXPECT_EQ(*store.read(b), bytes("abcdefghkl"));
    ASSERT_TRUE(store.release_all(b).is_ok());
    EXPECT_EQ(store.stats().physical_bytes, 0);
    EXPECT_EQ(store.stats().n_blocks, 0);
    EXPECT_INVARIANTS(store);
}

TEST(blob_store, RepeatedBlockWithinOnePutCountsTwoReferences) {
    blob_store store(2);
    auto ids = store.put(bytes("xyxyxy"));
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[0], ids[2]);
    EXPECT_EQ(store.stats().physical_bytes, 2);
    EXPECT_EQ(store.stats().logical_bytes, 6);
    EXPECT_INVARIANTS(store);
}

TEST(blob_store, UnderflowIsDetectedNotApplied) {
    blob_store store(4);
    auto ids = store.put(bytes("abcd"));
    ASSERT_TRUE(store.release(ids[0]).is_ok());
    status st = store.release(ids[0]);  // not held any more
    EXPECT_EQ(st.code(), error_code::internal);
    EXPECT_EQ(store.release(999).code(), error_code::internal);
    EXPECT_EQ(store.retain(999).code(), error_code::not_found);
    EXPECT_EQ(store.stats().n_underflows, 2);
    EXPECT_EQ(store.stats().n_refs, 0);
    EXPECT_INVARIANTS(store);
}

TEST(blob_store, RetainKeepsABlockAlive) {
    blob_store store(4);
    auto ids = store.put(bytes("abcd"));
    ASSERT_TRUE(store.retain(ids[0]).is_ok());
    ASSERT_TRUE(store.release(ids[0]).is_ok());
    EXPECT_EQ(*store.read(ids), bytes("abcd"));
    ASSERT_TRUE(store.release(ids[0]).is_ok());
    EXPECT_EQ(store.read(ids).error().code(), error_code::not_found);
}

// Hashing outside the caller's lock: a put with precomputed digests stores and
// dedupes exactly as a plain put does.
TEST(blob_store, PutWithPrecomputedDigestsEqualsPlainPut) {
    blob_store store(4);
    const auto data = bytes("abcdefghij");
    const auto digests = blob_store::block_digests(data, store.block_bytes());
    ASSERT_EQ(digests.size(), 3u);
    EXPECT_EQ(digests[0], sha256(bytes("abcd")));
    EXPECT_EQ(digests[2], sha256(bytes("ij")));
    auto a = store.put(data, digests);
    auto b = store.put(data);
    EXPECT_EQ(a, b);
    EXPECT_EQ(store.stats().n_blocks, 3);
    EXPECT_EQ(store.stats().n_dedupe_hits, 3);
    EXPECT_EQ(*store.read(a), data);
    EXPECT_TRUE(blob_store::block_digests({}, 4).empty());
    EXPECT_INVARIANTS(store);
}

TEST(blob_store, CorruptedBlockFailsItsHashAndIsUnlinkedFromDedupe) {
    blob_store store(4);
    auto ids = store.put(bytes("abcdefgh"));
    ASSERT_TRUE(store.corrupt_for_testing(ids[1], 2));
    auto r = store.read(ids);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::integrity);
    EXPECT_EQ(store.stats().n_integrity_failures, 1);
    EXPECT_INVARIANTS(store);
    // The same content put again gets a fresh, good copy, not the bad block.
    auto again = store.put(bytes("abcdefgh"));
    EXPECT_EQ(again[0], ids[0]);
    EXPECT_NE(again[1], ids[1]);
    EXPECT_EQ(*store.read(again), bytes("abcdefgh"));
    // The bad block's holder can still release it by id.
    EXPECT_TRUE(store.release_all(ids).is_ok());
    EXPECT_TRUE(store.release_all(again).is_ok());
    EXPECT_EQ(store.stats().n_blocks, 0);
    EXPECT_INVARIANTS(store);
}

}  // namespace
// A reader whose bytes carry their own checksum reads without re-hashing (and into a
// buffer it keeps); when its own check fails it calls verify, which finds the bad
// block and unlinks it as read would.
TEST(blob_store, AnUnverifiedReadLeavesTheCheckToTheReaderAndVerifyUnlinksTheBadBlock) {
    blob_store store(4);
    auto ids = store.put(bytes("abcdefgh"));
    std::vector<uint8_t> buffer;
    buffer.reserve(64);
    const uint8_t * kept = buffer.data();
    ASSERT_TRUE(store.read_into(ids, buffer, false).is_ok());
    EXPECT_EQ(buffer, bytes("abcdefgh"));
    EXPECT_EQ(buffer.data(), kept) << "the caller's buffer, not a new one";
    EXPECT_TRUE(store.verify(ids).is_ok());
    ASSERT_TRUE(store.corrupt_for_testing(ids[0], 1));
    ASSERT_TRUE(store.read_into(ids, buffer, false).is_ok()) << "not re-hashed";
    EXPECT_NE(buffer, bytes("abcdefgh"));
    EXPECT_EQ(store.read_into(ids, buffer).code(), error_code::integrity) << "re-hashed by default";
    EXPECT_TRUE(buffer.empty());
    EXPECT_EQ(store.verify(ids).code(), error_code::integrity);
    EXPECT_EQ(store.stats().n_integrity_failures, 2);
    auto again = store.put(bytes("abcdefgh"));
    EXPECT_NE(again[0], ids[0]) << "unlinked: a fresh copy";
    EXPECT_TRUE(store.release_all(ids).is_ok());
    EXPECT_TRUE(store.release_all(again).is_ok());
    EXPECT_INVARIANTS(store);
}

}  // namespace skippy::cache
