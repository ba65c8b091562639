// The chat layer: a conversation (messages, tools, template arguments) → prompt text,
// and the model's output → content, reasoning and tool calls.
//
// Why a part of its own: both ends of a chat turn depend on the same knowledge of the
// template (which markers it writes for tool calls and reasoning), and that knowledge
// is neither HTTP (the CLI's `generate` renders chats too) nor tokenization. It sits
// above jinja, grammar and tokenizer and below http and cli.
//
// A template is either the model's own Jinja program (tokenizer.chat_template, or
// --chat-template FILE), rendered by src/jinja with the variables Hugging Face passes
// (messages, tools, add_generation_prompt, bos_token, eos_token, and the request's
// chat_template_kwargs), or one of the built-in families of tokenizer/chat_template.h
// (--chat-template NAME, files without a template). The formats of tool calls and
// reasoning are recognised from the template's text (docs/chat-templates.md).
#pragma once

#include "base/status.h"
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::chat {

using ojson = nlohmann::ordered_json;

struct tool_call {
    std::string id;         // "call_…"
    std::string name;       // function name
    std::string arguments;  // a JSON object, as text
};

struct message {
    std::string            role;               // system, user, assistant or tool
    std::string            content;
    std::string            reasoning_content;  // assistant: what it thought ("" when none)
    std::vector<tool_call> tool_calls;         // assistant
    std::string            tool_call_id;       // tool: the call this answers
    std::string            name;               // tool: the function's name ("" when not given)
};

// How a template writes tool calls, and so how the model's output is read.
enum class tool_format {
    none,     // the template knows no tools
    hermes,   // Qwen3 / Hermes: <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>
    llama3,   // Llama 3.1+: the whole answer is {"name": …, "parameters": {…}}
    harmony,  // gpt-oss: <|channel|>commentary to=functions.NAME … <|message|>{…}<|call|>
};
// How it marks reasoning.
enum class reasoning_format {
    none,
    think_tags,  // <think>…</think> before the answer (Qwen3, DeepSeek-R1)
    harmony,     // the analysis channel
};

std::string_view tool_format_name(tool_format f);          // "none", "hermes", "llama3", "harmony"
std::string_view reasoning_format_name(reasoning_format f); // "none", "think", "harmony"

enum class tool_choice_mode { automatic, none, required, named };
struct tool_choice {
    tool_choice_mode mode = tool_choice_mode::automatic;
    std::string      name;  // named: the function
};

struct conversation {
    std::vector<message> messages;
    // OpenAI tool objects ({"type": "function", "function": {"name", "description",
    // "parameters"}}), validated by the caller; empty: no tools.
    ojson       tools = ojson::array();
    tool_choice choice;
    bool        parallel_tool_calls = true;
    ojson       template_kwargs = ojson::object();  // chat_template_kwargs (an object)
    bool        add_generation_prompt = true;
    // strftime_now's clock (tests fix it); empty: the system clock, local time.
    std::function<std::tm()> local_time;
};

// What to expect from the model, for parsing its output.
struct output_format {
    tool_format              tools = tool_format::none;  // none: tool calls are not looked for
    reasoning_format         reasoning = reasoning_format::none;
    bool                     starts_in_reasoning = false;  // the prompt opened a <think> block
    bool                     parallel_tool_calls = true;   // false: calls after the first are dropped
    std::vector<std::string> tool_names;                   // a call to another name is not a call
};

struct rendered_prompt {
    std::string   text;
    output_format format;
};

class chat_template {
public:
    // A Jinja template. Errors: the parse errors of jinja::compiled_template::parse
    // (invalid_data / unsupported, naming the construct and its line and column).
    static result<chat_template> from_jinja(std::string_view source, std::string bos_token, std::string eos_token);
    // A built-in family. Tools and tool messages are refused at render (unsupported).
    static chat_template builtin(chat_template_family family, chat_special_texts special);
    // --chat-template: a built-in family name (chat_template_family_name), else a file
    // holding a Jinja template. Errors: not_found / io for the file, and from_jinja's.
    static result<chat_template> from_option(std::string_view name_or_path, const tokenizer & tok);
    // The model's own: tokenizer.chat_template when the file has one (parsed as Jinja;
    // its parse error is returned), else the built-in plain family.
    static result<chat_template> of_model(const gguf::file & file, const tokenizer & tok);

    // "jinja (tools: hermes, reasoning: think)" or "builtin chatml", for logs.
    std::string describe() const;
    bool        is_jinja() const { return jinja_ != nullptr; }
    tool_format      tools() const { return tools_; }
    reasoning_format reasoning() const { return reasoning_; }

    // The prompt of a conversation, ending with the generation prompt when asked.
    // tool_choice none: the tools are not shown to the template and no calls are parsed.
    // Errors (all the client's): invalid_argument — the template raised (its message),
    // or the request needs what the template lacks (tools on a template without a tool
    // format); runtime — the template failed while rendering (message with position).
    result<rendered_prompt> render(const conversation & conv) const;

    // The context the Jinja program sees for `conv` (tests render it with jinja2).
    ojson context(const conversation & conv) const;

private:
    chat_template() = default;
    struct jinja_program;
    std::shared_ptr<const jinja_program> jinja_;
    chat_template_family                 family_ = chat_template_family::plain;
    chat_special_texts                   special_;
    tool_format                          tools_ = tool_format::none;
    reasoning_format                     reasoning_ = reasoning_format::none;
};

// The tokens of a prompt `t` rendered: BOS as the vocabulary wants it (when a Jinja
// template wrote the BOS text itself, as Llama 3's does, it is not doubled: the text is
// dropped, as llama.cpp does), special-token text parsed (docs/chat-templates.md).
std::vector<token_id> tokenize_prompt(const tokenizer & tok, const chat_template & t, std::string_view text);

// The formats a template's text uses (checked by tell-tale substrings, in this order):
//   "<tool_call>" → hermes; "<|channel|>" with "functions." → harmony;
//   "<|start_header_id|>" with "parameters" → llama3; else none.
//   "<|channel|>" → harmony reasoning; "<think>" → think tags; else none.
tool_format      detect_tool_format(std::string_view template_text);
reasoning_format detect_reasoning_format(std::string_view template_text);

// ---------------------------------------------------------------------------------------
// Reading the model's output

// What a piece of output adds to the answer.
struct tool_call_delta {
    int32_t     index = 0;  // of the call within the answer
    std::string id;
    std::string name;
    std::string arguments;
};
struct output_delta {
    std::string                  reasoning;
    std::string                  content;
    std::vector<tool_call_delta> tool_calls;  // whole calls, in order
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Splits output text, given piece by piece as the model writes it, into reasoning,
// content and tool calls. Text that might be the start of a marker is held back until
// it is decided. A tool call the model got wrong (bad JSON, an unknown function, a
// block never closed) comes out as content, verbatim. Not thread-safe.
class output_parser {
public:
    explicit output_parser(output_format format);
    ~output_parser();
    output_parser(output_parser &&) noexcept;
    output_parser & operator=(output_parser &&) noexcept;

    output_delta push(std::string_view text);
    // The output ended: releases what was held back. Call once, last.
    output_delta finish();
    int32_t n_tool_calls() const;

private:
    struct state;
    std::unique_ptr<state> s_;
};

struct parsed_output {
    std::string            content;
    std::string            reasoning_content;
    std::vector<tool_call> tool_calls;
};
// The whole output at once (the same parser, so streaming and not agree).
parsed_output parse_output(const output_format & format, std::string_view text);

// ---------------------------------------------------------------------------------------
// Constraining the output to a tool call (for tool_choice required / named)

// A GBNF grammar (root rule `root`, src/grammar) admitting exactly the tool-call output
// of `format` for the tools of `conv` (only the named one for tool_choice named; one
// call, or several when parallel_tool_calls), each call's arguments matching its
// function's `parameters` schema (grammar::gbnf_from_json_schema, not strict: keywords
// it cannot enforce are ignored). For harmony an analysis message may come first.
// Errors: invalid_argument when there is no tool (or the named one is missing) or the
// format is none; the schema converter's errors naming the function.
result<std::string> tool_call_grammar(tool_format format, const conversation & conv);

}  // namespace skippy::chat
