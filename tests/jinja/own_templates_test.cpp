// Llama 3.1-style tool-calling templates written for these tests (tests/jinja/templates),
// rendered with every conversation of conversations.json by jinja2 and by us.
#include "common/test_data.h"
#include "oracle.h"

#include <gtest/gtest.h>

namespace skippy::jinja::testing {
namespace {

TEST(jinja_own_templates, tool_templates_render_byte_identical_to_jinja2) {
    std::vector<jinja_case> cases;
    for (const char * name : {"llama31_tools", "llama32_tools_system"}) {
        std::string source = read_file(test_dir() + "/templates/" + name + ".jinja");
        auto more = conversation_cases(name, source, "<|begin_of_text|>", "<|eot_id|>");
        cases.insert(cases.end(), more.begin(), more.end());
    }
    SKIPPY_REQUIRE_ORACLE(theirs, cases);
    size_t same = expect_same(cases, theirs);
    std::printf("jinja own tool templates: %zu of %zu cases identical to jinja2\n", same, cases.size());
    EXPECT_EQ(same, cases.size());
}

}  // namespace
}  // namespace skippy::jinja::testing
