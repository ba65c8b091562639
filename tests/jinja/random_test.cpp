// Differential testing against jinja2: random expressions and statement soups
// (tests/jinja/random_cases.py, fixed seeds) rendered by both, byte-identical outputs or
// the same kind of failure demanded. Found the scoping rules of frame_analysis
// (parser.cpp) and a dozen Python-semantics corner cases while it was written.
#include "common/test_data.h"
#include "oracle.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace skippy::jinja::testing {
namespace {

std::vector<jinja_case> random_cases(const std::string & python, int seed, int count) {
    std::string dir = skippy::testing::make_temp_dir("jinja_random");
    std::string path = dir + "/cases.json";
    auto r = skippy::testing::run_command(
        {python, test_dir() + "/random_cases.py", std::to_string(seed), std::to_string(count), path}, 120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<jinja_case> cases;
    if (r.exit_code != 0) return cases;
    auto j = nlohmann::ordered_json::parse(read_file(path));
    for (const auto & x : j) {
        jinja_case c;
        c.name = x["name"].get<std::string>();
        c.source = x["template"].get<std::string>();
        c.context = x["context"];
        c.trim_blocks = x.value("trim_blocks", true);
        c.lstrip_blocks = x.value("lstrip_blocks", true);
        cases.push_back(std::move(c));
    }
    std::filesystem::remove_all(dir);
    return cases;
}

TEST(jinja_random, random_templates_render_like_jinja2) {
    auto python = find_python_with_jinja2();
    if (!python) {
        if (skippy::testing::running_in_ci()) FAIL() << "python3-jinja2 missing (CI)";
        GTEST_SKIP() << "python3-jinja2 missing";
    }
    auto cases = random_cases(*python, 20261201, 600);
    ASSERT_EQ(cases.size(), 600u);
    SKIPPY_REQUIRE_ORACLE(theirs, cases);
    size_t same = expect_same(cases, theirs);
    size_t rendered = 0;
    for (const auto & o : theirs) rendered += o.ok;
    std::printf("jinja random: %zu of %zu cases identical to jinja2 (%zu rendered)\n", same, cases.size(), rendered);
    EXPECT_EQ(same, cases.size());
}

}  // namespace
}  // namespace skippy::jinja::testing
