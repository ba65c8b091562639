// Stop strings and UTF-8 holdback on streamed text.
#include "http/text_stream.h"

#include <gtest/gtest.h>

namespace skippy::http {
namespace {

// Feeds `pieces` one by one; returns what was released at each step, then finish().
std::vector<std::string> feed(stop_text_stream & s, const std::vector<std::string> & pieces) {
    std::vector<std::string> out;
    for (const auto & p : pieces) out.push_back(s.push(p));
    out.push_back(s.finish());
    return out;
}

std::string joined(const std::vector<std::string> & v) {
    std::string s;
    for (const auto & x : v) s += x;
    return s;
}

TEST(IncompleteUtf8Tail, CountsOnlyBytesThatCanStillComplete) {
    EXPECT_EQ(incomplete_utf8_tail(""), 0u);
    EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
    EXPECT_EQ(incomplete_utf8_tail("a\xe2"), 1u);          // 3-byte lead alone
    EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82"), 2u);      // lead + 1 of 2 continuations
    EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82\xac"), 0u);  // € complete
    EXPECT_EQ(incomplete_utf8_tail("\xf0\x9f\x98"), 3u);   // 4-byte lead + 2
    EXPECT_EQ(incomplete_utf8_tail("\xf0\x9f\x98\x80"), 0u);
    EXPECT_EQ(incomplete_utf8_tail("\xc3"), 1u);
    EXPECT_EQ(incomplete_utf8_tail("\x82"), 0u);            // lone continuation: invalid, not held
    EXPECT_EQ(incomplete_utf8_tail("\xff"), 0u);            // never valid
}

TEST(StopTextStream, WithoutStopsTextPassesThrough) {
    stop_text_stream s({});
    EXPECT_EQ(s.push("Hello"), "Hello");
    EXPECT_EQ(s.push(", world"), ", world");
    EXPECT_EQ(s.finish(), "");
    EXPECT_FALSE(s.stopped());
    EXPECT_EQ(s.released(), "Hello, world");
}

TEST(StopTextStream, AStopInsideOnePieceTrimsItAndEverythingAfter) {
    stop_text_stream s({"END"});
    EXPECT_EQ(s.push("abcENDxyz"), "abc");
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.matched_stop(), "END");
    EXPECT_EQ(s.push("more"), "");
    EXPECT_EQ(s.finish(), "");
    EXPECT_EQ(s.released(), "abc");
}

TEST(StopTextStream, APossibleStopPrefixIsHeldUntilItCannotMatch) {
    stop_text_stream s({"</end>"});
    const auto out = feed(s, {"text <", "/e", "x more"});
    EXPECT_EQ(out[0], "text ");        // "<" could start "</end>"
    EXPECT_EQ(out[1], "");             // "</e" still could
    EXPECT_EQ(out[2], "</ex more");    // it did not
    EXPECT_FALSE(s.stopped());
}

TEST(StopTextStream, AStopSplitAcrossPiecesIsFoundAndTrimmed) {
    stop_text_stream s({"\nUser:"});
    const auto out = feed(s, {"Sure.", "\n", "Us", "er", ": next"});
    EXPECT_EQ(joined(out), "Sure.");
    EXPECT_TRUE(s.stopped());
}

TEST(StopTextStream, TheEarliestOfSeveralStopsWins) {
    stop_text_stream s({"bb", "ab"});
    EXPECT_EQ(s.push("xxabb"), "xx");
    EXPECT_EQ(s.matched_stop(), "ab");
}

TEST(StopTextStream, HeldPrefixIsReleasedAtTheEnd) {
    stop_text_stream s({"STOP"});
    EXPECT_EQ(s.push("value ST"), "value ");
    EXPECT_EQ(s.finish(), "ST");
    EXPECT_EQ(s.released(), "value ST");
}

TEST(StopTextStream, OverlappingStopPrefixesHoldTheLongest) {
    stop_text_stream s({"aab"});
    EXPECT_EQ(s.push("xaa"), "x");   // "aa" is a prefix of "aab"
    EXPECT_EQ(s.push("a"), "a");     // "aaa": only the last "aa" can still match
    EXPECT_EQ(s.push("b"), "");      // "aab" matched
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.released(), "xa");
}

TEST(StopTextStream, AUtf8CharacterSplitAcrossPiecesIsNeverSplitInTheOutput) {
    stop_text_stream s({});
    // € = E2 82 AC, 😀 = F0 9F 98 80, each arriving a byte at a time.
    const auto out = feed(s, {"a", "\xe2", "\x82", "\xac", "b", "\xf0", "\x9f", "\x98", "\x80"});
    EXPECT_EQ(out[1], "");
    EXPECT_EQ(out[2], "");
    EXPECT_EQ(out[3], "\xe2\x82\xac");
    EXPECT_EQ(out[5], "");
    EXPECT_EQ(out[8], "\xf0\x9f\x98\x80");
    EXPECT_EQ(joined(out), "a\xe2\x82\xac" "b\xf0\x9f\x98\x80");
}

TEST(StopTextStream, InvalidBytesBecomeReplacementCharacters) {
    stop_text_stream s({});
    EXPECT_EQ(s.push("a\xff" "b"), "a\xef\xbf\xbd" "b");
    // A lead byte followed by a non-continuation can never complete: released as U+FFFD.
    EXPECT_EQ(s.push("\xe2" "c"), "\xef\xbf\xbd" "c");
}

TEST(StopTextStream, AnIncompleteCharacterAtTheEndBecomesReplacementCharacters) {
    stop_text_stream s({});
    EXPECT_EQ(s.push("ok\xe2\x82"), "ok");
    EXPECT_EQ(s.finish(), "\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(StopTextStream, MultibyteStopStringsWorkAcrossByteSplits) {
    stop_text_stream s({"\xe2\x82\xac!"});  // "€!"
    const auto out = feed(s, {"cost 5", "\xe2", "\x82", "\xac", "! and more"});
    EXPECT_EQ(joined(out), "cost 5");
    EXPECT_TRUE(s.stopped());
}

TEST(StopTextStream, EveryReleasedChunkIsValidUtf8) {
    // A pseudo-random byte soup cut into random pieces, with a stop string in play.
    uint64_t state = 12345;
    auto next = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<uint32_t>(state >> 33);
    };
    const std::string alphabet[] = {"a", " ", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc3\xa9", "\xff", "S", "T"};
    for (int round = 0; round < 200; ++round) {
        std::string text;
        for (int i = 0; i < 40; ++i) text += alphabet[next() % 8];
        stop_text_stream s({"STOP"});
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t n = std::min<size_t>(1 + next() % 4, text.size() - pos);
            const std::string out = s.push(text.substr(pos, n));
            pos += n;
            EXPECT_EQ(incomplete_utf8_tail(out), 0u);
            EXPECT_EQ(out.find('\xff'), std::string::npos);
        }
        EXPECT_EQ(s.finish().find('\xff'), std::string::npos);
    }
}

}  // namespace
}  // namespace skippy::http
