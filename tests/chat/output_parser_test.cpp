// The model's output read as reasoning, content and tool calls: canned outputs of each
// format, good and malformed, whole and split into every pair of pieces.
#include "chat/chat.h"

#include <gtest/gtest.h>

namespace skippy::chat {
namespace {

output_format hermes_format() {
    output_format f;
    f.tools = tool_format::hermes;
    f.reasoning = reasoning_format::think_tags;
    f.tool_names = {"get_weather", "get_time"};
    return f;
}

output_format llama3_format() {
    output_format f;
    f.tools = tool_format::llama3;
    f.tool_names = {"get_weather"};
    return f;
}

output_format harmony_format() {
    output_format f;
    f.tools = tool_format::harmony;
    f.reasoning = reasoning_format::harmony;
    f.tool_names = {"get_weather"};
    return f;
}

// The text streamed in two pieces split at every byte must read the same as whole.
void expect_split_invariant(const output_format & f, const std::string & text) {
    const parsed_output whole = parse_output(f, text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        output_parser p(f);
        parsed_output got;
        for (output_delta d : {p.push(text.substr(0, cut)), p.push(text.substr(cut)), p.finish()}) {
            got.content += d.content;
            got.reasoning_content += d.reasoning;
            for (auto & c : d.tool_calls) got.tool_calls.push_back({c.id, c.name, c.arguments});
        }
        ASSERT_EQ(got.content, whole.content) << "cut at " << cut;
        ASSERT_EQ(got.reasoning_content, whole.reasoning_content) << "cut at " << cut;
        ASSERT_EQ(got.tool_calls.size(), whole.tool_calls.size()) << "cut at " << cut;
        for (size_t i = 0; i < got.tool_calls.size(); ++i) {
            EXPECT_EQ(got.tool_calls[i].name, whole.tool_calls[i].name);
            EXPECT_EQ(got.tool_calls[i].arguments, whole.tool_calls[i].arguments);
        }
    }
}

TEST(chat_output, hermes_reasoning_then_tool_call) {
    const std::string text =
        "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>";
    const parsed_output out = parse_output(hermes_format(), text);
    EXPECT_EQ(out.reasoning_content, "The user wants the weather.");
    EXPECT_EQ(out.content, "");
    ASSERT_EQ(out.tool_calls.size(), 1u);
    EXPECT_EQ(out.tool_calls[0].name, "get_weather");
    EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
    EXPECT_EQ(out.tool_calls[0].id.rfind("call_", 0), 0u);
    expect_split_invariant(hermes_format(), text);
}

TEST(chat_output, hermes_parallel_calls_and_text_before) {
    const std::string text =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    const parsed_output out = parse_output(hermes_format(), text);
    EXPECT_EQ(out.content, "Let me check.\n");
    ASSERT_EQ(out.tool_calls.size(), 2u);
    EXPECT_EQ(out.tool_calls[1].name, "get_time");
    EXPECT_EQ(out.tool_calls[1].arguments, "{}");
    EXPECT_NE(out.tool_calls[0].id, out.tool_calls[1].id);
    expect_split_invariant(hermes_format(), text);

    output_format one = hermes_format();
    one.parallel_tool_calls = false;
    EXPECT_EQ(parse_output(one, text).tool_calls.size(), 1u);
}

TEST(chat_output, hermes_malformed_calls_are_text) {
    for (const std::string & text : {
             std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"),  // bad JSON
             std::string("<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>"),  // unknown tool
             std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}"),  // never closed
             std::string("<tool_call>\n[1, 2]\n</tool_call>"),
         }) {
        const parsed_output out = parse_output(hermes_format(), text);
        EXPECT_TRUE(out.tool_calls.empty()) << text;
        EXPECT_EQ(out.content, text);
        expect_split_invariant(hermes_format(), text);
    }
}

TEST(chat_output, think_block_opened_by_the_prompt) {
    output_format f = hermes_format();
    f.starts_in_reasoning = true;
    const parsed_output out = parse_output(f, "Hmm, 2 + 2.\n</think>\n\n4");
    EXPECT_EQ(out.reasoning_content, "Hmm, 2 + 2.");
    EXPECT_EQ(out.content, "4");
    // Cut off while thinking: what it thought is reasoning, nothing is content.
    const parsed_output cut = parse_output(f, "Still thinking  \n");
    EXPECT_EQ(cut.reasoning_content, "Still thinking");
    EXPECT_EQ(cut.content, "");
}

TEST(chat_output, plain_text_passes_through_untouched) {
    const std::string text = "A <b>tag</b>, a < sign, <think of it> and <tool_ok>.";
    const parsed_output out = parse_output(hermes_format(), text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.tool_calls.empty());
    expect_split_invariant(hermes_format(), text);
    output_format none;
    EXPECT_EQ(parse_output(none, "<tool_call>{}</tool_call><think>x</think>").content,
              "<tool_call>{}</tool_call><think>x</think>");
}

TEST(chat_output, llama3_json_call) {
    const std::string text = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\", \"days\": 2}}";
    const parsed_output out = parse_output(llama3_format(), text);
    ASSERT_EQ(out.tool_calls.size(), 1u);
    EXPECT_EQ(out.tool_calls[0].name, "get_weather");
    EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Lima\",\"days\":2}");
    EXPECT_EQ(out.content, "");
    expect_split_invariant(llama3_format(), text);
    const parsed_output tagged = parse_output(llama3_format(), "<|python_tag|>" + text);
    EXPECT_EQ(tagged.tool_calls.size(), 1u);
}

TEST(chat_output, llama3_text_and_malformed) {
    for (const std::string & text : {std::string("The weather is {sunny}."), std::string("{\"name\": \"get_weather\"}"),
                                   std::string("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}"),
                                   std::string("{\"name\": \"nope\", \"parameters\": {}}"),
                                   std::string("{\"name\": \"get_weather\", \"parameters\": {}} trailing words")}) {
        const parsed_output out = parse_output(llama3_format(), text);
        EXPECT_TRUE(out.tool_calls.empty()) << text;
        EXPECT_EQ(out.content, text);
        expect_split_invariant(llama3_format(), text);
    }
    EXPECT_EQ(parse_output(llama3_format(), "Hello!").content, "Hello!");
}

TEST(chat_output, harmony_analysis_then_call) {
    const std::string text =
        "<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Tokyo\"}";
    const parsed_output out = parse_output(harmony_format(), text);
    EXPECT_EQ(out.reasoning_content, "Need the weather tool.");
    EXPECT_EQ(out.content, "");
    ASSERT_EQ(out.tool_calls.size(), 1u);
    EXPECT_EQ(out.tool_calls[0].name, "get_weather");
    EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Tokyo\"}");
    expect_split_invariant(harmony_format(), text);
    // The recipient before the channel, as the template writes it in history.
    const parsed_output alt =
        parse_output(harmony_format(), " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"X\"}<|call|>");
    ASSERT_EQ(alt.tool_calls.size(), 1u);
}

TEST(chat_output, harmony_final_answer) {
    const std::string text = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4";
    const parsed_output out = parse_output(harmony_format(), text);
    EXPECT_EQ(out.reasoning_content, "Easy.");
    EXPECT_EQ(out.content, "4");
    EXPECT_TRUE(out.tool_calls.empty());
    expect_split_invariant(harmony_format(), text);
}

TEST(chat_output, harmony_malformed_is_text) {
    for (const std::string & text : {std::string("Just words, no channels."),
                                   std::string("<|channel|>commentary to=functions.get_weather<|message|>{not json"),
                                   std::string("<|channel|>commentary to=functions.other<|message|>{}")}) {
        const parsed_output out = parse_output(harmony_format(), text);
        EXPECT_TRUE(out.tool_calls.empty()) << text;
        EXPECT_FALSE(out.content.empty()) << text;
        EXPECT_NE(out.content.find(text.substr(text.size() - 4)), std::string::npos) << out.content;
        expect_split_invariant(harmony_format(), text);
    }
}

// Random texts made of marker fragments, JSON bits and text: whatever the model writes,
// the parser neither crashes nor depends on how the text is split.
TEST(chat_output, random_marker_soup_is_split_invariant) {
    const std::vector<std::string> atoms = {
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|channel|>", "<|message|>", "<|end|>", "<|start|>",
        "assistant", "analysis", "final", "commentary", " to=functions.get_weather", " to=functions.x", "<|call|>",
        "<|python_tag|>", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}",
        "{\"name\": \"get_weather\", \"parameters\": {}}", "{", "}", "\"", "\n", " ", "<", "|", "text", "\xff"};
    uint64_t state = 12345;
    auto next = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<size_t>(state >> 33);
    };
    for (const output_format & f : {hermes_format(), llama3_format(), harmony_format()}) {
        for (int round = 0; round < 150; ++round) {
            std::string text;
            const size_t n = 1 + next() % 12;
            for (size_t i = 0; i < n; ++i) text += atoms[next() % atoms.size()];
            expect_split_invariant(f, text);
        }
    }
}

}  // namespace
}  // namespace skippy::chat
