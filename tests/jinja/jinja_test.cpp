// The interpreter's own contract: error codes and positions, constructs outside the
// subset, render limits (a template is file input: never a crash or a hang), the
// injectable clock, and concurrent renders of one template.
#include "jinja/jinja.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace skippy::jinja {
namespace {

using ojson = nlohmann::ordered_json;

result<std::string> render(std::string_view source, const ojson & context = ojson::object(),
                           const render_options & ro = {}, const parse_options & po = {}) {
    auto t = compiled_template::parse(source, po);
    if (!t.is_ok()) return t.error();
    return t->render(context, ro);
}

status parse_error(std::string_view source, const parse_options & po = {}) {
    auto t = compiled_template::parse(source, po);
    return t.is_ok() ? status::ok() : t.error();
}

TEST(jinja, renders_a_chat_with_hugging_face_settings) {
    auto out = render(
        "{% for m in messages %}\n"
        "    <|{{ m.role }}|>{{ m.content }}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}\n",
        ojson{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"add_generation_prompt", true}});
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, "    <|user|>hi\n<|assistant|>");  // lstrip_blocks leaves lines of {{ }} alone
}

TEST(jinja, syntax_errors_are_invalid_data_with_line_and_column) {
    status st = parse_error("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_EQ(st.message().rfind("line 3, column 10: ", 0), 0u) << st.message();

    st = parse_error("{% for x in y %}");
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("'endfor'"), std::string::npos) << st.message();

    st = parse_error("{{ x|no_such_filter }}");
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("no_such_filter"), std::string::npos);

    st = parse_error("{% bogus %}");
    EXPECT_EQ(st.code(), error_code::invalid_data);
    EXPECT_NE(st.message().find("'bogus'"), std::string::npos);
}

TEST(jinja, unsupported_constructs_fail_to_parse_naming_them) {
    const std::pair<const char *, const char *> cases[] = {
        {"{% extends 'base.html' %}", "'extends'"},
        {"{% include 'x' %}", "'include'"},
        {"{% import 'm' as m %}", "'import'"},
        {"{% from 'm' import x %}", "'from'"},
        {"{% block b %}{% endblock %}", "'block'"},
        {"{% call m() %}x{% endcall %}", "'call'"},
        {"{% autoescape true %}{% endautoescape %}", "'autoescape'"},
        {"{% do x %}", "'do'"},
        {"{% for x in y recursive %}{% endfor %}", "recursive"},
        {"{{ x|groupby('a') }}", "'groupby'"},
        {"{{ x|wordwrap }}", "'wordwrap'"},
        {"{{ f(*args) }}", "*args"},
        {"{% for (a, (b, c)) in x %}{% endfor %}", "nested tuple"},
    };
    for (const auto & [source, name] : cases) {
        status st = parse_error(source);
        EXPECT_EQ(st.code(), error_code::unsupported) << source << ": " << st.to_string();
        EXPECT_NE(st.message().find(name), std::string::npos) << source << ": " << st.message();
        EXPECT_EQ(st.message().rfind("line 1, column ", 0), 0u) << st.message();
    }
}

TEST(jinja, raise_exception_is_invalid_argument_with_the_templates_message) {
    auto out = render("before{{ raise_exception('Conversation roles must alternate') }}after");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::invalid_argument);
    EXPECT_EQ(out.error().message(), "Conversation roles must alternate");
}

TEST(jinja, render_errors_are_runtime_with_position) {
    auto out = render("ok\n{{ messages[0].content.upper() }}", ojson{{"messages", ojson::array()}});
    // messages[0] is undefined; .content of it is the error.
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);
    EXPECT_EQ(out.error().message().rfind("line 2, column ", 0), 0u) << out.error().message();

    out = render("{{ 'a' + 1 }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);

    out = render("{% set l = [] %}{{ l.append(1) }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.error().message().find("unsafe"), std::string::npos);

    out = render("{% set l = [1] %}{{ l.pop() }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::unsupported);
}

TEST(jinja, context_must_be_an_object) {
    auto t = compiled_template::parse("x");
    ASSERT_TRUE(t.is_ok());
    auto out = t->render(ojson::array());
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::invalid_argument);
}

TEST(jinja, context_keeps_json_key_order_and_number_types) {
    auto ctx = ojson::parse(R"({"d": {"zeta": 1, "alpha": 2.0, "mid": [true, null]}})");
    auto out = render("{{ d|tojson }} {{ d }} {% for k in d %}{{ k }}{% endfor %}", ctx);
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, R"({"zeta": 1, "alpha": 2.0, "mid": [true, null]} {'zeta': 1, 'alpha': 2.0, 'mid': [True, None]} zetaalphamid)");
}

TEST(jinja, strftime_now_formats_the_injected_clock) {
    render_options ro;
    ro.local_time = [] {
        std::tm tm{};
        tm.tm_year = 2024 - 1900;
        tm.tm_mon = 6;
        tm.tm_mday = 26;
        tm.tm_hour = 9;
        tm.tm_wday = 5;
        return tm;
    };
    auto out = render("{{ strftime_now('%d %b %Y %H') }}|{{ strftime_now('%z') }}", ojson::object(), ro);
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, "26 Jul 2024 09|");
}

TEST(jinja, output_limit_stops_a_large_render) {
    render_options ro;
    ro.lim.max_output_bytes = 1000;
    auto out = render("{% for i in range(1000) %}0123456789{% endfor %}", ojson::object(), ro);
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);
    EXPECT_NE(out.error().message().find("max_output_bytes"), std::string::npos);

    ro.lim.max_output_bytes = 10000;
    out = render("{% for i in range(1000) %}0123456789{% endfor %}", ojson::object(), ro);
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(out->size(), 10000u);
}

TEST(jinja, a_string_doubling_loop_hits_a_limit_not_the_memory) {
    auto out = render("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                      "{{ ns.s|length }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);

    out = render("{{ 'x' * 1000000000 }}");
    ASSERT_FALSE(out.is_ok());
    out = render("{{ ([1] * 100000000)|length }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.error().message().find("max_items"), std::string::npos);
}

TEST(jinja, loop_iterations_are_bounded) {
    render_options ro;
    ro.lim.max_loop_iterations = 5000;
    auto out = render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", ojson::object(), ro);
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.error().message().find("max_loop_iterations"), std::string::npos);
}

TEST(jinja, unbounded_macro_recursion_is_an_error) {
    auto out = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);
    EXPECT_NE(out.error().message().find("max_call_depth"), std::string::npos);
}

TEST(jinja, work_limit_stops_busy_templates) {
    render_options ro;
    ro.lim.max_work = 100000;
    auto out = render("{% for i in range(100000) %}{% if i is even %}{% endif %}{% endfor %}", ojson::object(), ro);
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.error().message().find("max_work"), std::string::npos);
}

// Found by the jinja fuzzer (a 10 s timeout under ASan): a macro whose body calls it
// four times and runs |int on the growing output. Each call was one step, while |int
// parsed the whole string (decode, case fold, strip) uncharged. Filters and string
// methods now pay for the bytes they read.
TEST(jinja, filters_on_long_strings_count_against_the_work_limit) {
    render_options ro;
    ro.lim.max_work = 1 << 20;
    ro.lim.max_output_bytes = 1 << 16;
    const std::string call = "{{ n * f(n - 1)|int }}" + std::string(64, '.');
    const std::string source = "{% macro f(n) %}{% if n <= 1 %}1{% else %}" + call + call + call + call +
                               "{% endif %}{% endmacro %}{{ f(9) }}";
    auto out = render(source, ojson::object(), ro);
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.error().message().find("max_work"), std::string::npos) << out.error().message();
    // The same for a string method on a long string, many times over.
    auto method = render("{% set s = 'x' * 60000 %}{% for i in range(4000) %}{% set t = s.strip() %}{% endfor %}",
                         ojson::object(), ro);
    ASSERT_FALSE(method.is_ok());
    EXPECT_NE(method.error().message().find("max_work"), std::string::npos) << method.error().message();
}

TEST(jinja, deep_nesting_fails_to_parse_instead_of_overflowing_the_stack) {
    for (const std::string & open : {std::string("("), std::string("["), std::string("not "), std::string("-"),
                                     std::string("{% if x %}")}) {
        std::string source = "{{ ";
        if (open[0] == '{') source = "";
        for (int i = 0; i < 100000; ++i) source += open;
        source += open[0] == '{' ? "" : "1";
        status st = parse_error(source);
        EXPECT_FALSE(st.is_ok()) << open;
    }
    // Left-deep chains are as deep as they are long.
    std::string chain = "{{ 1";
    for (int i = 0; i < 100000; ++i) chain += " + 1";
    chain += " }}";
    EXPECT_EQ(parse_error(chain).code(), error_code::unsupported);
    std::string filters = "{{ 'x'";
    for (int i = 0; i < 100000; ++i) filters += "|upper";
    filters += " }}";
    EXPECT_EQ(parse_error(filters).code(), error_code::unsupported);
    // Within the limit, all fine.
    std::string ok = "{{ 0";
    for (int i = 0; i < 50; ++i) ok += " + 1";
    ok += " }}";
    auto out = render(ok);
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, "50");
}

TEST(jinja, source_size_is_bounded) {
    parse_options po;
    po.lim.max_source_bytes = 10;
    EXPECT_EQ(parse_error("01234567890", po).code(), error_code::unsupported);
    EXPECT_TRUE(parse_error("0123456789", po).is_ok());
}

TEST(jinja, a_namespace_holding_itself_neither_hangs_nor_leaks) {
    auto out = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}");
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, "True");
    out = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.error().code(), error_code::runtime);
}

TEST(jinja, invalid_utf8_is_rendered_bytewise_not_rejected) {
    std::string bad = "a\xff\xc3(b";
    auto out = render(bad + "{{ x }}", ojson{{"x", "y"}});
    ASSERT_TRUE(out.is_ok()) << out.error().to_string();
    EXPECT_EQ(*out, bad + "y");
    out = render("{{ s|length }} {{ s|upper }} {{ s[::-1]|length }}", ojson{{"s", "ok"}});
    ASSERT_TRUE(out.is_ok());
}

TEST(jinja, whitespace_settings_can_be_turned_off) {
    parse_options po;
    po.trim_blocks = false;
    po.lstrip_blocks = false;
    auto out = render("  {% if true %}\nx\n  {% endif %}\n", ojson::object(), {}, po);
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(*out, "  \nx\n  ");
    out = render("  {% if true %}\nx\n  {% endif %}\n");
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(*out, "x\n");
}

TEST(jinja, one_template_renders_on_many_threads) {
    auto t = compiled_template::parse(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m|length %}{% endfor %}{{ ns.n }}");
    ASSERT_TRUE(t.is_ok());
    std::vector<std::thread> threads;
    std::vector<std::string> outs(4);
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            ojson msgs = ojson::array();
            for (int i = 0; i <= k; ++i) msgs.push_back(std::string(static_cast<size_t>(i + 1), 'x'));
            for (int rep = 0; rep < 50; ++rep) {
                auto out = t->render(ojson{{"messages", msgs}});
                outs[static_cast<size_t>(k)] = out.is_ok() ? *out : out.error().to_string();
            }
        });
    }
    for (auto & th : threads) th.join();
    EXPECT_EQ(outs[0], "1");
    EXPECT_EQ(outs[1], "3");
    EXPECT_EQ(outs[2], "6");
    EXPECT_EQ(outs[3], "10");
}

}  // namespace
}  // namespace skippy::jinja
