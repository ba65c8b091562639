#include "base/status.h"

#include <gtest/gtest.h>

#include <set>

namespace skippy {
namespace {

result<int> parse_positive(int v) {
    if (v <= 0) return make_error(error_code::invalid_argument, "not positive");
    return v;
}

status double_it(int v, int & out) {
    SKIPPY_ASSIGN_OR_RETURN(int x, parse_positive(v));
    out = 2 * x;
    return status::ok();
}

TEST(status, OkByDefaultAndNamesItsCode) {
    status st;
    EXPECT_TRUE(st.is_ok());
    EXPECT_EQ(st.to_string(), "ok");
    status bad = make_error(error_code::invalid_data, "short read");
    EXPECT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.to_string(), "invalid_data: short read");
    EXPECT_EQ(bad.with_context("file x").message(), "file x: short read");
    EXPECT_EQ(bad.with_context("file x").code(), error_code::invalid_data);
}

TEST(status, ResultCarriesValueOrError) {
    auto good = parse_positive(3);
    ASSERT_TRUE(good.is_ok());
    EXPECT_EQ(*good, 3);
    auto bad = parse_positive(-1);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.error().code(), error_code::invalid_argument);
}

TEST(status, AssignOrReturnPropagatesErrors) {
    int out = 0;
    EXPECT_TRUE(double_it(4, out).is_ok());
    EXPECT_EQ(out, 8);
    status st = double_it(0, out);
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_EQ(out, 8);
}

TEST(status, EveryCodeHasADistinctName) {
    std::set<std::string_view> names;
    for (int c = 0; c <= static_cast<int>(error_code::peer_closed); ++c) names.insert(error_code_name(static_cast<error_code>(c)));
    EXPECT_EQ(names.size(), static_cast<size_t>(error_code::peer_closed) + 1);
}

}  // namespace
}  // namespace skippy
