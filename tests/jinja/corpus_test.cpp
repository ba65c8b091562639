// The corpus of small templates (tests/jinja/corpus.txt), each exercising one construct,
// filter, test or error, rendered by jinja2 and by us: byte-identical outputs, or the
// same kind of failure.
#include "common/test_data.h"
#include "oracle.h"

#include <gtest/gtest.h>

namespace skippy::jinja::testing {
namespace {

TEST(jinja_corpus, renders_byte_identical_to_jinja2) {
    auto cases = load_corpus(test_dir() + "/corpus.txt");
    ASSERT_GE(cases.size(), 100u);
    SKIPPY_REQUIRE_ORACLE(theirs, cases);
    size_t same = expect_same(cases, theirs);
    std::printf("jinja corpus: %zu of %zu cases identical to jinja2\n", same, cases.size());
    EXPECT_EQ(same, cases.size());
}

}  // namespace
}  // namespace skippy::jinja::testing
