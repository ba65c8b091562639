// Paged KV pool on a tiny geometry: 1 layer, kv_dim 2, f32, block_tokens 4, 5 blocks.
#include "kv/kv.h"

#include <gtest/gtest.h>

#include <cstring>

namespace skippy {
namespace {

kv_geometry one_layer_geometry() {
    kv_geometry g;
    g.n_layers = 1;
    g.kv_dim = 2;
    g.block_tokens = 4;
    g.dtype = kv_dtype::f32;
    return g;
}

void write_pos(kv_sequence & s, int64_t pos, float value) {
    float row[2] = {value, -value};
    std::memcpy(s.k_row(0, pos), row, sizeof(row));
    std::memcpy(s.v_row(0, pos), row, sizeof(row));
}

float read_k(const kv_sequence & s, int64_t pos) {
    float v;
    std::memcpy(&v, s.k_row(0, pos), 4);
    return v;
}

// Every block is either free (refcount 0) or referenced; counts add up.
void check_invariants(const kv_pool & pool) {
    int64_t free_count = 0;
    for (kv_block_id b = 0; b < pool.n_blocks(); ++b) {
        ASSERT_GE(pool.refcount(b), 0);
        if (pool.refcount(b) == 0) ++free_count;
    }
    EXPECT_EQ(free_count, pool.n_free());
}

TEST(kv_pool, GeometrySizesFollowTheLayout) {
    kv_geometry g = one_layer_geometry();
    EXPECT_EQ(g.row_bytes(), 8u);
    EXPECT_EQ(g.layer_bytes(), 64u);
    EXPECT_EQ(g.block_bytes(), 64u);
    g.dtype = kv_dtype::f16;
    g.n_layers = 3;
    EXPECT_EQ(g.block_bytes(), 3u * 2 * 4 * 2 * 2);
}

TEST(kv_pool, AllocatesUntilExhaustedThenReportsUnavailable) {
    kv_pool pool(one_layer_geometry(), 5);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.allocate().is_ok());
    auto none = pool.allocate();
    ASSERT_FALSE(none.is_ok());
    EXPECT_EQ(none.error().code(), error_code::unavailable);
    check_invariants(pool);
}

TEST(kv_pool, ReleasedBlocksReturnToTheFreeList) {
    kv_pool pool(one_layer_geometry(), 2);
    kv_block_id a = *pool.allocate();
    pool.retain(a);
    pool.release(a);
    EXPECT_EQ(pool.n_free(), 1);
    pool.release(a);
    EXPECT_EQ(pool.n_free(), 2);
    check_invariants(pool);
}

TEST(kv_sequence, WritesGrowTheBlockTable) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence s(pool);
    // positions 0..5 -> blocks [b0: 0 1 2 3][b1: 4 5 . .]
    ASSERT_TRUE(s.prepare_write(0, 6).is_ok());
    EXPECT_EQ(s.n_tokens(), 6);
    EXPECT_EQ(s.blocks().size(), 2u);
    for (int p = 0; p < 6; ++p) write_pos(s, p, static_cast<float>(p));
    ASSERT_TRUE(s.prepare_write(6, 1).is_ok());
    EXPECT_EQ(s.blocks().size(), 2u);
    ASSERT_TRUE(s.prepare_write(7, 2).is_ok());
    EXPECT_EQ(s.blocks().size(), 3u);
    EXPECT_EQ(read_k(s, 5), 5.0f);
    check_invariants(pool);
}

TEST(kv_sequence, GapsAreRefused) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence s(pool);
    status st = s.prepare_write(3, 1);
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_EQ(s.n_tokens(), 0);
}

TEST(kv_sequence, ExhaustionLeavesNoLeakedBlocks) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence s(pool);
    ASSERT_TRUE(s.prepare_write(0, 8).is_ok());  // 2 blocks
    status st = s.prepare_write(8, 16);          // needs 4 more, only 3 free
    EXPECT_EQ(st.code(), error_code::unavailable);
    EXPECT_EQ(s.n_tokens(), 8);
    EXPECT_EQ(pool.n_free(), 3);
    check_invariants(pool);
}

TEST(kv_sequence, RewritingEarlierPositionsDropsLaterOnes) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence s(pool);
    ASSERT_TRUE(s.prepare_write(0, 10).is_ok());  // 3 blocks
    ASSERT_TRUE(s.prepare_write(3, 1).is_ok());
    EXPECT_EQ(s.n_tokens(), 4);
    EXPECT_EQ(s.blocks().size(), 1u);
    EXPECT_EQ(pool.n_free(), 4);
    check_invariants(pool);
}

// A repeated prepare of the same write (a stage prepares under its cache's admission,
// then the model's pass again) keeps the blocks: none goes back to the free list, where
// another thread could take it, and the pool is never asked again.
TEST(kv_sequence, RepeatedPrepareKeepsTheBlocks) {
    kv_pool pool(one_layer_geometry(), 3);
    kv_sequence s(pool);
    ASSERT_TRUE(s.prepare_write(0, 6).is_ok());
    write_pos(s, 1, 1.0f);
    ASSERT_TRUE(s.prepare_write(2, 8).is_ok());  // 3 blocks: the pool is full
    const std::vector<kv_block_id> before = s.blocks();
    const int64_t allocations_before = pool.n_allocations();
    ASSERT_EQ(pool.n_free(), 0);
    ASSERT_TRUE(s.prepare_write(2, 8).is_ok());
    EXPECT_EQ(s.blocks(), before);
    EXPECT_EQ(pool.n_allocations(), allocations_before);
    EXPECT_EQ(s.n_tokens(), 10);
    EXPECT_EQ(read_k(s, 1), 1.0f);
    check_invariants(pool);
}

// A repeat whose blocks are shared is no repeat: the shared ones are copied as ever.
TEST(kv_sequence, RepeatedPrepareOverASharedBlockStillCopies) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence owner(pool), reader(pool);
    ASSERT_TRUE(owner.prepare_write(0, 6).is_ok());
    write_pos(owner, 4, 4.0f);
    reader.share_from(owner.blocks(), 6);
    const int64_t allocations_before = pool.n_allocations();
    ASSERT_TRUE(owner.prepare_write(5, 1).is_ok());  // 6 tokens as before, but b1 is shared
    EXPECT_EQ(pool.n_allocations(), allocations_before + 1);
    EXPECT_NE(owner.blocks()[1], reader.blocks()[1]);
    EXPECT_EQ(read_k(owner, 4), 4.0f);
    EXPECT_EQ(pool.refcount(reader.blocks()[1]), 1);
    check_invariants(pool);
}

TEST(kv_sequence, SharedPartialBlockIsCopiedOnWrite) {
    kv_pool pool(one_layer_geometry(), 5);
    kv_sequence owner(pool);
    ASSERT_TRUE(owner.prepare_write(0, 6).is_ok());
    for (int p = 0; p < 6; ++p) write_pos(owner, p, static_cast<float>(p));

    // reader shares the first 6 positions:  [b0: 0 1 2 3][b1: 4 5 . .] refcounts 2, 2
    kv_sequence reader(pool);
    reader.share_from(owner.blocks(), 6);
    EXPECT_EQ(pool.refcount(owner.blocks()[0]), 2);
    EXPECT_EQ(pool.refcount(owner.blocks()[1]), 2);

    // reader writes position 6 -> b1 is copied for it; b0 stays shared
    ASSERT_TRUE(reader.prepare_write(6, 1).is_ok());
    write_pos(reader, 6, 60.0f);
    EXPECT_EQ(reader.blocks()[0], owner.blocks()[0]);
    EXPECT_NE(reader.blocks()[1], owner.blocks()[1]);
    EXPECT_EQ(pool.refcount(owner.blocks()[1]), 1);
    EXPECT_EQ(read_k(reader, 5), 5.0f) << "copy keeps the shared rows";
    EXPECT_EQ(read_k(reader, 6), 60.0f);

    // the owner's view is untouched; rewriting position 5 in the owner copies nothing
    // (its b1 is no longer shared) but rewriting position 2 copies b0.
    ASSERT_TRUE(owner.prepare_write(2, 1).is_ok());
    write_pos(owner, 2, 20.0f);
    EXPECT_EQ(read_k(reader, 2), 2.0f);
    EXPECT_EQ(read_k(owner, 2), 20.0f);
    check_invariants(pool);
}

TEST(kv_sequence, DestroyingSequencesFreesEverything) {
    kv_pool pool(one_layer_geometry(), 5);
    {
        kv_sequence a(pool);
        ASSERT_TRUE(a.prepare_write(0, 9).is_ok());
        kv_sequence b(pool);
        b.share_from(a.blocks(), 9);
        b.share_from(a.blocks(), 9);  // re-sharing the same blocks must not drop them
        EXPECT_EQ(pool.refcount(a.blocks()[0]), 2);
        check_invariants(pool);
    }
    EXPECT_EQ(pool.n_free(), 5);
    check_invariants(pool);
}

}  // namespace
}  // namespace skippy
