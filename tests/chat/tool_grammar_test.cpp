// The tool-call grammar hook: the GBNF compiles, admits the calls the output parser
// reads back as calls, and refuses other text.
#include "chat/chat.h"
#include "grammar/grammar.h"

#include <gtest/gtest.h>

namespace skippy::chat {
namespace {

conversation weather_conversation() {
    conversation c;
    c.tools = ojson::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    ])");
    c.choice.mode = tool_choice_mode::required;
    return c;
}

// True when `text` is a complete match of `gbnf`.
bool matches(const std::string & gbnf, const std::string & text) {
    auto g = grammar::compile(gbnf);
    EXPECT_TRUE(g.is_ok()) << (g.is_ok() ? "" : g.error().to_string()) << "\n" << gbnf;
    if (!g.is_ok()) return false;
    grammar::matcher m(*g);
    return m.advance(text).is_ok() && m.can_end();
}

output_format format_of(tool_format f) {
    output_format o;
    o.tools = f;
    o.reasoning = f == tool_format::harmony ? reasoning_format::harmony : reasoning_format::none;
    o.tool_names = {"get_weather", "get_time"};
    return o;
}

TEST(chat_tool_grammar, each_format_admits_its_calls_and_the_parser_reads_them) {
    const conversation conv = weather_conversation();
    struct sample {
        tool_format format;
        std::string text;
        size_t      n_calls;
    };
    const std::vector<sample> samples = {
        {tool_format::hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>", 1},
        {tool_format::hermes,
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
         "\"arguments\": {}}\n</tool_call>",
         2},
        {tool_format::llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"f\"}}", 1},
        {tool_format::harmony,
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\", \"unit\": \"c\"}", 1},
        {tool_format::harmony,
         "<|channel|>analysis<|message|>Weather it is.<|end|><|start|>assistant<|channel|>commentary to=functions.get_time "
         "<|constrain|>json<|message|>{}",
         1},
    };
    for (const sample & s : samples) {
        auto gbnf = tool_call_grammar(s.format, conv);
        ASSERT_TRUE(gbnf.is_ok()) << gbnf.error().to_string();
        EXPECT_TRUE(matches(*gbnf, s.text)) << s.text << "\n" << *gbnf;
        EXPECT_EQ(parse_output(format_of(s.format), s.text).tool_calls.size(), s.n_calls) << s.text;
    }
}

TEST(chat_tool_grammar, refuses_arguments_outside_the_schema_and_other_text) {
    const conversation conv = weather_conversation();
    auto gbnf = tool_call_grammar(tool_format::hermes, conv);
    ASSERT_TRUE(gbnf.is_ok());
    EXPECT_FALSE(matches(*gbnf, "Hello"));
    EXPECT_FALSE(matches(*gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"k\"}}\n</tool_call>"));
    EXPECT_FALSE(matches(*gbnf, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"));
}

TEST(chat_tool_grammar, named_choice_and_single_call) {
    conversation conv = weather_conversation();
    conv.choice = {tool_choice_mode::named, "get_time"};
    conv.parallel_tool_calls = false;
    auto gbnf = tool_call_grammar(tool_format::llama3, conv);
    ASSERT_TRUE(gbnf.is_ok());
    EXPECT_TRUE(matches(*gbnf, "{\"name\": \"get_time\", \"parameters\": {}}"));
    EXPECT_FALSE(matches(*gbnf, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a\", \"unit\": \"c\"}}"));
    EXPECT_FALSE(matches(*gbnf, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_time\", \"parameters\": {}}"));
}

TEST(chat_tool_grammar, errors) {
    conversation conv = weather_conversation();
    EXPECT_EQ(tool_call_grammar(tool_format::none, conv).error().code(), error_code::invalid_argument);
    conv.choice = {tool_choice_mode::named, "missing"};
    EXPECT_EQ(tool_call_grammar(tool_format::hermes, conv).error().code(), error_code::invalid_argument);
    conversation empty;
    EXPECT_FALSE(tool_call_grammar(tool_format::hermes, empty).is_ok());
    conversation bad = weather_conversation();
    bad.tools[0]["function"]["parameters"] = ojson::parse(R"({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})");
    EXPECT_FALSE(tool_call_grammar(tool_format::hermes, bad).is_ok());
}

}  // namespace
}  // namespace skippy::chat
