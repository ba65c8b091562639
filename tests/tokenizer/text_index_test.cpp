// The open-addressing index from token text to id (tokenizer/vocab.h).
#include "tokenizer/vocab.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <unordered_set>

namespace skippy::tokenizer_detail {
namespace {

std::vector<std::string> distinct_texts(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::unordered_map<std::string, int> seen;
    std::vector<std::string> texts;
    while (texts.size() < n) {
        std::string t(std::uniform_int_distribution<size_t>(1, 24)(rng), '\0');
        for (char & c : t) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
        if (seen.emplace(t, 0).second) texts.push_back(t);
    }
    return texts;
}

TEST(text_index, FindsEveryTextAtItsIdAndNothingElse) {
    const std::vector<std::string> texts = distinct_texts(20000, 7);
    text_index index;
    const text_index::duplicate d = index.build(texts);
    EXPECT_EQ(d.first, -1);
    EXPECT_EQ(d.second, -1);
    for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ(index.find(texts[i], texts), static_cast<token_id>(i)) << i;
    const std::unordered_set<std::string> known(texts.begin(), texts.end());
    int n_absent = 0;
    for (const std::string & t : distinct_texts(5000, 8)) {
        if (known.contains(t)) continue;
        ++n_absent;
        EXPECT_EQ(index.find(t, texts), -1);
        if (!known.contains(t + "x")) {
            EXPECT_EQ(index.find(t + "x", texts), -1);
        }
    }
    EXPECT_GT(n_absent, 4500);
    EXPECT_EQ(index.find("", texts), -1);
}

TEST(text_index, ReportsTheFirstDuplicatePair) {
    const std::vector<std::string> texts = {"a", "b", "c", "b", "a"};
    text_index index;
    const text_index::duplicate d = index.build(texts);
    EXPECT_EQ(d.first, 1);
    EXPECT_EQ(d.second, 3);
}

TEST(text_index, AnEmptyIndexFindsNothing) {
    text_index index;
    EXPECT_EQ(index.find("a", {}), -1);
    index.build({});
    EXPECT_EQ(index.find("a", {}), -1);
}

}  // namespace
}  // namespace skippy::tokenizer_detail
