#include "chat/chat.h"

#include "base/escape.h"
#include "jinja/jinja.h"

#include <fstream>
#include <sstream>

namespace skippy::chat {

struct chat_template::jinja_program {
    jinja::compiled_template program;
    std::string              bos_token;
    std::string              eos_token;
};

namespace {

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// The arguments of a call as the template expects them: transformers passes what the
// client sent, and OpenAI clients send a JSON string. Templates that write
// `arguments | tojson` (gpt-oss) need the object, so a string holding a JSON object is
// given as that object (Qwen3 writes both forms the same way).
ojson arguments_value(const std::string & arguments) {
    ojson parsed = ojson::parse(arguments, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed;
    return arguments;
}

ojson message_json(const message & m) {
    ojson j;
    j["role"] = m.role;
    j["content"] = m.content;
    if (!m.reasoning_content.empty()) {
        // Qwen3 reads reasoning_content, gpt-oss reads thinking.
        j["reasoning_content"] = m.reasoning_content;
        j["thinking"] = m.reasoning_content;
    }
    if (!m.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const tool_call & c : m.tool_calls) {
            ojson call;
            call["id"] = c.id;
            call["type"] = "function";
            call["function"] = ojson{{"name", c.name}, {"arguments", arguments_value(c.arguments)}};
            calls.push_back(std::move(call));
        }
        j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    return j;
}

bool uses_tools(const conversation & conv) {
    return conv.choice.mode != tool_choice_mode::none && !conv.tools.empty();
}

std::vector<std::string> tool_names(const conversation & conv) {
    std::vector<std::string> names;
    for (const ojson & t : conv.tools) {
        if (t.contains("function") && t["function"].contains("name") && t["function"]["name"].is_string()) {
            names.push_back(t["function"]["name"].get<std::string>());
        }
    }
    return names;
}

// The generation prompt opened a reasoning block (templates that force thinking end
// with "<think>\n"); the output then starts inside it.
bool ends_in_open_think(std::string_view text) {
    const size_t open = text.rfind("<think>");
    if (open == std::string_view::npos) return false;
    if (contains(text.substr(open), "</think>")) return false;
    return text.find_first_not_of(" \t\r\n", open + 7) == std::string_view::npos;
}

}  // namespace

std::string_view tool_format_name(tool_format f) {
    switch (f) {
        case tool_format::none: return "none";
        case tool_format::hermes: return "hermes";
        case tool_format::llama3: return "llama3";
        case tool_format::harmony: return "harmony";
    }
    return "none";
}

std::string_view reasoning_format_name(reasoning_format f) {
    switch (f) {
        case reasoning_format::none: return "none";
        case reasoning_format::think_tags: return "think";
        case reasoning_format::harmony: return "harmony";
    }
    return "none";
}

tool_format detect_tool_format(std::string_view t) {
    if (contains(t, "<tool_call>")) return tool_format::hermes;
    if (contains(t, "<|channel|>") && contains(t, "functions.")) return tool_format::harmony;
    if (contains(t, "<|start_header_id|>") && contains(t, "parameters")) return tool_format::llama3;
    return tool_format::none;
}

reasoning_format detect_reasoning_format(std::string_view t) {
    if (contains(t, "<|channel|>")) return reasoning_format::harmony;
    if (contains(t, "<think>")) return reasoning_format::think_tags;
    return reasoning_format::none;
}

result<chat_template> chat_template::from_jinja(std::string_view source, std::string bos_token, std::string eos_token) {
    SKIPPY_ASSIGN_OR_RETURN(jinja::compiled_template program, jinja::compiled_template::parse(source));
    chat_template t;
    t.jinja_ = std::make_shared<const jinja_program>(jinja_program{std::move(program), std::move(bos_token), std::move(eos_token)});
    t.tools_ = detect_tool_format(source);
    t.reasoning_ = detect_reasoning_format(source);
    return t;
}

chat_template chat_template::builtin(chat_template_family family, chat_special_texts special) {
    chat_template t;
    t.family_ = family;
    t.special_ = std::move(special);
    return t;
}

result<chat_template> chat_template::from_option(std::string_view name_or_path, const tokenizer & tok) {
    for (auto f : {chat_template_family::plain, chat_template_family::chatml, chat_template_family::llama2,
                   chat_template_family::llama3, chat_template_family::mistral, chat_template_family::zephyr,
                   chat_template_family::gemma}) {
        if (chat_template_family_name(f) == name_or_path) return builtin(f, chat_special_texts_of(tok));
    }
    const std::string path(name_or_path);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return make_error(error_code::not_found, "--chat-template '" + escape_bytes(path) +
                                                     "' is neither a built-in template (plain, chatml, llama2, llama3, "
                                                     "mistral, zephyr, gemma) nor a readable file");
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return make_error(error_code::io, "cannot read " + escape_bytes(path));
    const chat_special_texts sp = chat_special_texts_of(tok);
    auto t = from_jinja(text.str(), sp.bos, sp.eos);
    if (!t.is_ok()) return make_error(t.error().code(), path + ": " + t.error().message());
    return t;
}

result<chat_template> chat_template::of_model(const gguf::file & file, const tokenizer & tok) {
    const auto source = file.get_string("tokenizer.chat_template");
    const chat_special_texts sp = chat_special_texts_of(tok);
    if (!source) return builtin(chat_template_family::plain, sp);
    auto t = from_jinja(*source, sp.bos, sp.eos);
    if (!t.is_ok()) {
        return make_error(t.error().code(), "the model's tokenizer.chat_template: " + t.error().message() +
                                                " (override it with --chat-template FILE|NAME)");
    }
    return t;
}

std::string chat_template::describe() const {
    if (!jinja_) return "builtin " + std::string(chat_template_family_name(family_));
    return "jinja (tools: " + std::string(tool_format_name(tools_)) +
           ", reasoning: " + std::string(reasoning_format_name(reasoning_)) + ")";
}

ojson chat_template::context(const conversation & conv) const {
    ojson ctx = ojson::object();
    ojson messages = ojson::array();
    for (const message & m : conv.messages) messages.push_back(message_json(m));
    ctx["messages"] = std::move(messages);
    // transformers passes tools=None when there are none.
    ctx["tools"] = uses_tools(conv) ? conv.tools : ojson(nullptr);
    ctx["add_generation_prompt"] = conv.add_generation_prompt;
    ctx["bos_token"] = jinja_ ? jinja_->bos_token : special_.bos;
    ctx["eos_token"] = jinja_ ? jinja_->eos_token : special_.eos;
    for (auto it = conv.template_kwargs.begin(); it != conv.template_kwargs.end(); ++it) {
        // The conversation itself is not the client's to replace through kwargs.
        if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt") continue;
        ctx[it.key()] = it.value();
    }
    return ctx;
}

result<rendered_prompt> chat_template::render(const conversation & conv) const {
    if (conv.messages.empty()) return make_error(error_code::invalid_argument, "a chat needs at least one message");
    rendered_prompt out;
    const bool tools = uses_tools(conv);
    if (!jinja_) {
        if (tools) {
            return make_error(error_code::invalid_argument,
                              "the chat template (builtin " + std::string(chat_template_family_name(family_)) +
                                  ") has no tool calls; serve with a template that has them (--chat-template FILE)");
        }
        std::vector<chat_message> plain;
        for (const message & m : conv.messages) {
            if (m.role == "tool" || !m.tool_calls.empty()) {
                return make_error(error_code::invalid_argument, "the chat template (builtin " +
                                                                    std::string(chat_template_family_name(family_)) +
                                                                    ") has no tool calls or tool results");
            }
            plain.push_back({m.role, m.content});
        }
        SKIPPY_ASSIGN_OR_RETURN(out.text, render_chat(family_, plain, special_));
        return out;
    }
    if (tools && tools_ == tool_format::none) {
        return make_error(error_code::invalid_argument,
                          "the model's chat template has no tool-call format skippy can read (docs/chat-templates.md); "
                          "serve with --chat-template FILE");
    }
    jinja::render_options ro;
    ro.local_time = conv.local_time;
    SKIPPY_ASSIGN_OR_RETURN(out.text, jinja_->program.render(context(conv), ro));
    out.format.tools = tools ? tools_ : tool_format::none;
    out.format.reasoning = reasoning_;
    out.format.starts_in_reasoning = reasoning_ == reasoning_format::think_tags && ends_in_open_think(out.text);
    out.format.parallel_tool_calls = conv.parallel_tool_calls;
    if (tools) out.format.tool_names = tool_names(conv);
    return out;
}

std::vector<token_id> tokenize_prompt(const tokenizer & tok, const chat_template & t, std::string_view text) {
    const bool add_bos = tok.add_bos_default();
    const std::string_view bos = add_bos ? tok.token_text(tok.bos()) : std::string_view();
    if (t.is_jinja() && !bos.empty() && text.substr(0, bos.size()) == bos) text.remove_prefix(bos.size());
    return tok.tokenize(text, add_bos, /*parse_special=*/true);
}

}  // namespace skippy::chat
