// The grammar of a tool-call answer, for tool_choice required / named: the text the
// output parser reads as calls, with each call's arguments generated from its schema.
#include "chat/chat.h"

#include "grammar/grammar.h"

namespace skippy::chat {
namespace {

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// `gbnf` with every rule name prefixed, so that several converted schemas can live in
// one grammar. Literals, character classes, repetition counts and comments are copied.
std::string prefix_rules(std::string_view gbnf, const std::string & prefix) {
    std::string out;
    out.reserve(gbnf.size() * 5 / 4);
    size_t i = 0;
    auto copy_quoted = [&](char close) {
        out += gbnf[i++];
        while (i < gbnf.size() && gbnf[i] != close) {
            if (gbnf[i] == '\\' && i + 1 < gbnf.size()) out += gbnf[i++];
            out += gbnf[i++];
        }
        if (i < gbnf.size()) out += gbnf[i++];
    };
    while (i < gbnf.size()) {
        const char c = gbnf[i];
        if (c == '"') {
            copy_quoted('"');
        } else if (c == '[') {
            copy_quoted(']');
        } else if (c == '{') {
            copy_quoted('}');
        } else if (c == '#') {
            while (i < gbnf.size() && gbnf[i] != '\n') out += gbnf[i++];
        } else if (is_name_char(c)) {
            out += prefix;
            while (i < gbnf.size() && is_name_char(gbnf[i])) out += gbnf[i++];
        } else {
            out += gbnf[i++];
        }
    }
    return out;
}

// A GBNF string literal of `text` (which holds no control characters).
std::string literal(std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

}  // namespace

result<std::string> tool_call_grammar(tool_format format, const conversation & conv) {
    if (format == tool_format::none) return make_error(error_code::invalid_argument, "the chat template has no tool-call format");
    std::string rules;
    std::vector<std::string> alternatives;
    for (size_t i = 0; i < conv.tools.size(); ++i) {
        const ojson & fn = conv.tools[i].contains("function") ? conv.tools[i]["function"] : conv.tools[i];
        if (!fn.contains("name") || !fn["name"].is_string()) {
            return make_error(error_code::invalid_argument, "tools[" + std::to_string(i) + "] has no function name");
        }
        const std::string name = fn["name"].get<std::string>();
        if (conv.choice.mode == tool_choice_mode::named && name != conv.choice.name) continue;
        const ojson schema = fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"]
                                                                                        : ojson{{"type", "object"}};
        grammar::json_schema_options so;
        so.strict = false;
        auto gbnf = grammar::gbnf_from_json_schema(schema, so);
        if (!gbnf.is_ok()) {
            return make_error(gbnf.error().code(), "tool '" + name + "' parameters: " + gbnf.error().message());
        }
        const std::string prefix = "tool" + std::to_string(i) + "-";
        rules += prefix_rules(*gbnf, prefix);
        const std::string args = prefix + "root";
        std::string call;
        switch (format) {
            case tool_format::hermes:
                call = literal("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ") + " " + args + " " +
                       literal("}\n</tool_call>");
                break;
            case tool_format::llama3:
                call = literal("{\"name\": \"" + name + "\", \"parameters\": ") + " " + args + " " + literal("}");
                break;
            case tool_format::harmony:
                call = literal("<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>") + " " + args;
                break;
            case tool_format::none: break;
        }
        alternatives.push_back("(" + call + ")");
    }
    if (alternatives.empty()) {
        return make_error(error_code::invalid_argument, conv.choice.mode == tool_choice_mode::named
                                                            ? "tool_choice names '" + conv.choice.name + "', which is not in tools"
                                                            : std::string("there are no tools to call"));
    }
    std::string call_rule = "tool-call ::= ";
    for (size_t i = 0; i < alternatives.size(); ++i) call_rule += (i ? " | " : "") + alternatives[i];
    std::string root;
    const bool many = conv.parallel_tool_calls && format != tool_format::harmony;
    switch (format) {
        case tool_format::hermes: root = many ? "root ::= tool-call (\"\\n\" tool-call)*" : "root ::= tool-call"; break;
        case tool_format::llama3: root = many ? "root ::= tool-call (\"; \" tool-call)*" : "root ::= tool-call"; break;
        case tool_format::harmony:
            // gpt-oss thinks in the analysis channel first; that message stays possible.
            root = "root ::= analysis? tool-call\n"
                   "analysis ::= \"<|channel|>analysis<|message|>\" [^<]* \"<|end|><|start|>assistant\"";
            break;
        case tool_format::none: break;
    }
    return root + "\n" + call_rule + "\n" + rules;
}

}  // namespace skippy::chat
