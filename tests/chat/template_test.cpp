// The template layer without model files: formats recognised from template text, the
// context the Jinja program sees, built-in families, and errors.
#include "chat/chat.h"

#include <gtest/gtest.h>

namespace skippy::chat {
namespace {

const char * mini_hermes = R"({%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>
{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}
</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor -%}
{%- if tools %}TOOLS {{ tools | length }}{% endif -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if force_think is defined and force_think %}<think>
{% endif %}{% endif %})";

TEST(chat_template_layer, formats_from_template_text) {
    EXPECT_EQ(detect_tool_format(mini_hermes), tool_format::hermes);
    EXPECT_EQ(detect_tool_format("<|start|>{{ '<|channel|>commentary to=functions.' }}"), tool_format::harmony);
    EXPECT_EQ(detect_tool_format("<|start_header_id|> {\"name\": x, \"parameters\": y}"), tool_format::llama3);
    EXPECT_EQ(detect_tool_format("<|start_header_id|>{{ m.content }}"), tool_format::none);
    EXPECT_EQ(detect_reasoning_format("<think>"), reasoning_format::think_tags);
    EXPECT_EQ(detect_reasoning_format("<|channel|>analysis"), reasoning_format::harmony);
    EXPECT_EQ(detect_reasoning_format("plain"), reasoning_format::none);
}

TEST(chat_template_layer, renders_tool_calls_tools_and_kwargs) {
    auto t = chat_template::from_jinja(mini_hermes, "<s>", "</s>");
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    conversation c;
    c.messages = {{"user", "weather?", "", {}, "", ""},
                  {"assistant", "", "", {{"call_1", "get_weather", "{\"city\": \"Paris\"}"}}, "", ""},
                  {"tool", "sunny", "", {}, "call_1", ""}};
    c.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
    c.template_kwargs = ojson{{"force_think", true}, {"messages", "ignored"}};
    auto r = t->render(c);
    ASSERT_TRUE(r.is_ok()) << r.error().to_string();
    EXPECT_EQ(r->text,
              "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
              "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n"
              "TOOLS 1<|im_start|>assistant\n<think>\n");
    EXPECT_EQ(r->format.tools, tool_format::hermes);
    EXPECT_TRUE(r->format.starts_in_reasoning);
    EXPECT_EQ(r->format.tool_names, std::vector<std::string>{"get_weather"});

    // tool_choice none: the template sees no tools and no calls are looked for.
    c.choice.mode = tool_choice_mode::none;
    auto none = t->render(c);
    ASSERT_TRUE(none.is_ok());
    EXPECT_EQ(none->text.find("TOOLS"), std::string::npos);
    EXPECT_EQ(none->format.tools, tool_format::none);
}

TEST(chat_template_layer, errors_are_the_clients) {
    auto raises = chat_template::from_jinja("{{ raise_exception('no system messages, please') }}", "", "");
    ASSERT_TRUE(raises.is_ok());
    conversation c;
    c.messages = {{"user", "hi", "", {}, "", ""}};
    auto r = raises->render(c);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.error().code(), error_code::invalid_argument);
    EXPECT_EQ(r.error().message(), "no system messages, please");

    auto bad = chat_template::from_jinja("{% extends 'base.html' %}", "", "");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.error().message().find("extends"), std::string::npos) << bad.error().message();

    // Tools on a template that has no tool format.
    auto plain = chat_template::from_jinja("{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
    ASSERT_TRUE(plain.is_ok());
    c.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    EXPECT_EQ(plain->render(c).error().code(), error_code::invalid_argument);
}

TEST(chat_template_layer, builtin_families_stay_and_refuse_tools) {
    const chat_template t = chat_template::builtin(chat_template_family::chatml, {});
    EXPECT_EQ(t.describe(), "builtin chatml");
    conversation c;
    c.messages = {{"system", "S", "", {}, "", ""}, {"user", "U", "", {}, "", ""}};
    auto r = t.render(c);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    c.messages.push_back({"tool", "x", "", {}, "id", ""});
    EXPECT_EQ(t.render(c).error().code(), error_code::invalid_argument);
    c.messages.pop_back();
    c.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    EXPECT_EQ(t.render(c).error().code(), error_code::invalid_argument);
}

}  // namespace
}  // namespace skippy::chat
