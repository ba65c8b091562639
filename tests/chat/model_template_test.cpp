// The template layer's prompts (conversation → context → Jinja) against python3-jinja2
// rendering the same context, for the templates of the shared vocabularies (Qwen3,
// gpt-oss, Llama 3.0) and the Llama 3.1-style tool template fixture of tests/jinja.
#include "chat/chat.h"
#include "common/test_data.h"
#include "gguf/gguf.h"
#include "jinja/oracle.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

namespace skippy::chat {
namespace {

using jinja::testing::jinja_case;

const ojson weather_tools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Local time", "parameters": {"type": "object", "properties": {}}}}
])");

message msg(std::string role, std::string content) {
    message m;
    m.role = std::move(role);
    m.content = std::move(content);
    return m;
}

message call_msg(std::string name, std::string args, std::string reasoning = "") {
    message m;
    m.role = "assistant";
    m.reasoning_content = std::move(reasoning);
    m.tool_calls.push_back({"call_1", std::move(name), std::move(args)});
    return m;
}

message tool_msg(std::string content) {
    message m;
    m.role = "tool";
    m.content = std::move(content);
    m.tool_call_id = "call_1";
    return m;
}

std::tm fixed_now() {
    std::tm t{};
    t.tm_year = 2025 - 1900;
    t.tm_mon = 2;
    t.tm_mday = 14;
    t.tm_hour = 15;
    t.tm_min = 9;
    t.tm_sec = 26;
    return t;
}

// Conversations with tools, tool results, system prompts and several turns.
std::vector<std::pair<std::string, conversation>> conversations(bool tools_ok) {
    std::vector<std::pair<std::string, conversation>> out;
    auto add = [&](std::string name, std::vector<message> messages, bool with_tools, ojson kwargs = ojson::object()) {
        if (with_tools && !tools_ok) return;
        conversation c;
        c.messages = std::move(messages);
        if (with_tools) c.tools = weather_tools;
        c.template_kwargs = std::move(kwargs);
        c.local_time = fixed_now;
        out.emplace_back(std::move(name), std::move(c));
    };
    add("system_multi_turn", {msg("system", "Be terse."), msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "2+2?")}, false);
    add("user_only", {msg("user", "Just one question")}, false);
    add("tools_offered", {msg("system", "You help with weather."), msg("user", "Weather in Paris?")}, true);
    add("tool_call_and_result",
        {msg("user", "Weather in Paris?"), call_msg("get_weather", "{\"city\": \"Paris\"}"), tool_msg("{\"temp_c\": 21}")}, true);
    add("tool_loop_final_answer",
        {msg("system", "S"), msg("user", "Weather in Paris?"), call_msg("get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"),
         tool_msg("21 C, sunny"), msg("assistant", "It is 21 C and sunny."), msg("user", "And the time?")},
        true);
    add("reasoning_in_call", {msg("user", "Weather in Oslo?"), call_msg("get_weather", "{\"city\": \"Oslo\"}", "Use the tool."),
                              tool_msg("cold")},
        true);
    add("thinking_off", {msg("user", "Quick: 1+1?")}, false, ojson{{"enable_thinking", false}});
    add("reasoning_effort", {msg("user", "Think hard: 3*7?")}, false, ojson{{"reasoning_effort", "high"}});
    return out;
}

struct named_template {
    std::string name, source, bos, eos;
    bool        tools = true;
};

std::optional<named_template> from_vocab(const std::string & name, const std::string & path) {
    auto file = gguf::file::open(path);
    EXPECT_TRUE(file.is_ok());
    if (!file.is_ok()) return std::nullopt;
    auto tok = tokenizer::from_gguf(**file);
    EXPECT_TRUE(tok.is_ok());
    if (!tok.is_ok()) return std::nullopt;
    auto source = (*file)->get_string("tokenizer.chat_template");
    EXPECT_TRUE(source.has_value());
    if (!source) return std::nullopt;
    const chat_special_texts sp = chat_special_texts_of(**tok);
    return named_template{name, *source, sp.bos, sp.eos, detect_tool_format(*source) != tool_format::none};
}

TEST(chat_model_templates, prompts_equal_jinja2_for_tool_conversations) {
    std::vector<named_template> templates;
    for (const char * name : {"qwen3", "gptoss", "llama3"}) {
        SKIPPY_REQUIRE_TEST_FILE(path, std::string("vocab/ggml-vocab-") + name + ".gguf");
        auto t = from_vocab(name, path);
        ASSERT_TRUE(t.has_value());
        templates.push_back(*t);
        if (std::string(name) == "llama3") {
            // Llama 3.0 has no tools; the 3.1-style fixture has them (same specials).
            templates.push_back({"llama31_tools", jinja::testing::read_file(jinja::testing::test_dir() + "/templates/llama31_tools.jinja"),
                                 t->bos, t->eos, true});
        }
    }
    std::vector<jinja_case> cases;
    std::vector<std::string> ours;
    for (const named_template & nt : templates) {
        auto t = chat_template::from_jinja(nt.source, nt.bos, nt.eos);
        ASSERT_TRUE(t.is_ok()) << nt.name << ": " << t.error().to_string();
        if (nt.name == "qwen3") {
            EXPECT_EQ(t->tools(), tool_format::hermes);
        } else if (nt.name == "gptoss") {
            EXPECT_EQ(t->tools(), tool_format::harmony);
        } else if (nt.name == "llama31_tools") {
            EXPECT_EQ(t->tools(), tool_format::llama3);
        }
        for (auto & [name, conv] : conversations(nt.tools)) {
            auto r = t->render(conv);
            ASSERT_TRUE(r.is_ok()) << nt.name << "/" << name << ": " << r.error().to_string();
            jinja_case c;
            c.name = nt.name + "/" + name;
            c.source = nt.source;
            c.context = t->context(conv);
            cases.push_back(std::move(c));
            ours.push_back(r->text);
        }
    }
    SKIPPY_REQUIRE_ORACLE(theirs, cases);
    ASSERT_EQ(theirs.size(), cases.size());
    size_t same = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_TRUE(theirs[i].ok) << cases[i].name << ": " << theirs[i].message;
        EXPECT_EQ(ours[i], theirs[i].output) << cases[i].name;
        same += theirs[i].ok && ours[i] == theirs[i].output;
    }
    std::printf("chat template layer: %zu of %zu prompts identical to jinja2\n", same, cases.size());
}

}  // namespace
}  // namespace skippy::chat
