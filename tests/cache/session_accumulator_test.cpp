// Per-session accumulation of prefilled tokens.
#include "cache/session_accumulator.h"

#include <gtest/gtest.h>

namespace skippy::cache {
namespace {

using toks = std::vector<token_id>;

toks of(std::span<const token_id> s) { return toks(s.begin(), s.end()); }

TEST(session_accumulator, ContiguousChunksAppend) {
    session_accumulator acc;
    EXPECT_TRUE(acc.note_prefill(0, 0, toks{1, 2, 3}));
    EXPECT_TRUE(acc.note_prefill(0, 3, toks{4, 5}));
    EXPECT_EQ(of(acc.tokens(0)), (toks{1, 2, 3, 4, 5}));
    EXPECT_TRUE(acc.dirty(0));
}

TEST(session_accumulator, PositionZeroStartsOver) {
    session_accumulator acc;
    acc.note_prefill(0, 0, toks{1, 2, 3});
    acc.note_prefill(0, 0, toks{9});
    EXPECT_EQ(of(acc.tokens(0)), (toks{9}));
}

TEST(session_accumulator, AGapBreaksTheSessionUntilPositionZero) {
    session_accumulator acc;
    acc.note_prefill(0, 0, toks{1, 2});
    EXPECT_FALSE(acc.note_prefill(0, 5, toks{3}));  // gap
    EXPECT_TRUE(acc.tokens(0).empty());
    EXPECT_FALSE(acc.dirty(0));
    EXPECT_FALSE(acc.note_prefill(0, 0 + 2, toks{3}));  // still broken: not counted twice
    EXPECT_EQ(acc.stats().n_gaps, 1);
    EXPECT_TRUE(acc.note_prefill(0, 0, toks{7}));
    EXPECT_EQ(of(acc.tokens(0)), (toks{7}));
}

TEST(session_accumulator, RewritingEarlierPositionsIsAGapToo) {
    session_accumulator acc;
    acc.note_prefill(0, 0, toks{1, 2, 3});
    EXPECT_FALSE(acc.note_prefill(0, 1, toks{5}));
    EXPECT_EQ(acc.stats().n_gaps, 1);
}

TEST(session_accumulator, DirtyTracksWhatWasAddedSinceTheLastRecord) {
    session_accumulator acc;
    acc.note_prefill(0, 0, toks{1, 2});
    acc.mark_recorded(0);
    EXPECT_FALSE(acc.dirty(0));
    acc.note_prefill(0, 2, toks{});
    EXPECT_FALSE(acc.dirty(0));  // nothing added
    acc.note_prefill(0, 2, toks{3});
    EXPECT_TRUE(acc.dirty(0));
}

TEST(session_accumulator, SeedIsCleanAndContinues) {
    session_accumulator acc;
    acc.seed(0, toks{1, 2, 3});  // a restore put these in place
    EXPECT_FALSE(acc.dirty(0));
    EXPECT_TRUE(acc.note_prefill(0, 3, toks{4}));
    EXPECT_TRUE(acc.dirty(0));
    EXPECT_EQ(of(acc.tokens(0)), (toks{1, 2, 3, 4}));
}

TEST(session_accumulator, SessionsAreIndependent) {
    session_accumulator acc;
    acc.note_prefill(0, 0, toks{1});
    acc.note_prefill(1, 0, toks{2});
    acc.reset(0);
    EXPECT_TRUE(acc.tokens(0).empty());
    EXPECT_EQ(of(acc.tokens(1)), (toks{2}));
    EXPECT_EQ(acc.stats().n_sessions, 1);
}

}  // namespace
}  // namespace skippy::cache
