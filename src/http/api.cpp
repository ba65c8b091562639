#include "http/api.h"

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

namespace skippy::http {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Model output may hold invalid UTF-8 before sanitizing; never let dump() throw on it.
std::string dump(const ojson & j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson null_or(const std::string & s) { return s.empty() ? ojson(nullptr) : ojson(s); }

api_error bad(std::string message, std::string param, std::string code = "invalid_value") {
    api_error e;
    e.http_status = 400;
    e.message = std::move(message);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
}

api_error bad_type(const std::string & param, const char * expected) {
    return bad("'" + param + "' must be " + expected, param, "invalid_type");
}

api_error unsupported(std::string message, std::string param) {
    return bad(std::move(message), std::move(param), "unsupported_parameter");
}

// Field readers: absent and null both mean "not given" (OpenAI's optional fields accept
// null). Each returns an error for a wrong type or a value out of range.
const json * field(const json & obj, const char * key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<api_error> read_number(const json & obj, const char * key, double lo, double hi, bool lo_open,
                                     std::optional<double> & out) {
    const json * v = field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return bad_type(key, "a number");
    const double d = v->get<double>();
    if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo)) {
        char range[96];
        std::snprintf(range, sizeof(range), "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return bad("'" + std::string(key) + "' must be in " + range, key);
    }
    out = d;
    return std::nullopt;
}

std::optional<api_error> read_int(const json & obj, const char * key, int64_t lo, int64_t hi,
                                  std::optional<int64_t> & out) {
    const json * v = field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) return bad_type(key, "an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return bad("'" + std::string(key) + "' is out of range", key);
    }
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) {
        return bad("'" + std::string(key) + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", key);
    }
    out = i;
    return std::nullopt;
}

std::optional<api_error> read_bool(const json & obj, const char * key, std::optional<bool> & out) {
    const json * v = field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return bad_type(key, "a boolean");
    out = v->get<bool>();
    return std::nullopt;
}

std::optional<api_error> read_string(const json & obj, const char * key, std::optional<std::string> & out) {
    const json * v = field(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) return bad_type(key, "a string");
    out = v->get<std::string>();
    return std::nullopt;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts
// (joined with "\n"); null only for an assistant message (read as "").
std::optional<api_error> read_content(const json & msg, const std::string & role, const std::string & param,
                                      std::string & out) {
    auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        if (role == "assistant") {
            out.clear();
            return std::nullopt;
        }
        return bad("'" + param + ".content' is required", param + ".content");
    }
    if (it->is_string()) {
        out = it->get<std::string>();
        return std::nullopt;
    }
    if (!it->is_array()) return bad_type(param + ".content", "a string or an array of text parts");
    out.clear();
    bool first = true;
    for (size_t i = 0; i < it->size(); ++i) {
        const json & part = (*it)[i];
        const std::string pp = param + ".content[" + std::to_string(i) + "]";
        if (!part.is_object()) return bad_type(pp, "an object");
        auto type = part.find("type");
        if (type == part.end() || !type->is_string()) return bad_type(pp + ".type", "a string");
        if (*type != "text") {
            return unsupported("content parts of type '" + type->get<std::string>() + "' are not supported (text only)",
                               pp + ".type");
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) return bad_type(pp + ".text", "a string");
        if (!first) out += "\n";
        out += text->get<std::string>();
        first = false;
    }
    return std::nullopt;
}

// OpenAI's rule for function names; they also become literals in tool-call grammars.
bool valid_function_name(const std::string & name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::optional<api_error> read_tool_calls(const json & calls, const std::string & param, std::vector<chat::tool_call> & out) {
    if (!calls.is_array()) return bad_type(param, "an array");
    for (size_t i = 0; i < calls.size(); ++i) {
        const json & c = calls[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        if (!c.is_object()) return bad_type(p, "an object");
        chat::tool_call tc;
        if (const json * id = field(c, "id")) {
            if (!id->is_string()) return bad_type(p + ".id", "a string");
            tc.id = id->get<std::string>();
        }
        const json * fn = field(c, "function");
        if (!fn || !fn->is_object()) return bad_type(p + ".function", "an object");
        const json * name = field(*fn, "name");
        if (!name || !name->is_string()) return bad_type(p + ".function.name", "a string");
        tc.name = name->get<std::string>();
        if (const json * args = field(*fn, "arguments")) {
            // A JSON string as OpenAI sends it; an object is taken too (some clients send one).
            if (args->is_string()) tc.arguments = args->get<std::string>();
            else if (args->is_object()) tc.arguments = args->dump();
            else return bad_type(p + ".function.arguments", "a string of JSON");
        } else {
            tc.arguments = "{}";
        }
        out.push_back(std::move(tc));
    }
    return std::nullopt;
}

std::optional<api_error> read_messages(const json & body, std::vector<chat::message> & out) {
    const json * v = field(body, "messages");
    if (!v) return bad("'messages' is required", "messages", "missing_required_parameter");
    if (!v->is_array()) return bad_type("messages", "an array");
    if (v->empty()) return bad("'messages' must hold at least one message", "messages");
    for (size_t i = 0; i < v->size(); ++i) {
        const json & m = (*v)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return bad_type(param, "an object");
        auto role_it = m.find("role");
        if (role_it == m.end() || !role_it->is_string()) return bad_type(param + ".role", "a string");
        std::string role = role_it->get<std::string>();
        if (role == "developer") role = "system";  // OpenAI's newer name for the system role
        if (role == "function") {
            return unsupported("role 'function' (the deprecated function-calling API) is not supported; use tools",
                               param + ".role");
        }
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
            return bad("role '" + role + "' is not one of system, developer, user, assistant, tool", param + ".role");
        }
        chat::message cm;
        cm.role = role;
        if (role == "assistant") {
            if (const json * calls = field(m, "tool_calls")) {
                if (auto e = read_tool_calls(*calls, param + ".tool_calls", cm.tool_calls)) return e;
            }
            if (const json * r = field(m, "reasoning_content")) {
                if (!r->is_string()) return bad_type(param + ".reasoning_content", "a string");
                cm.reasoning_content = r->get<std::string>();
            }
        }
        if (role == "tool") {
            if (const json * id = field(m, "tool_call_id")) {
                if (!id->is_string()) return bad_type(param + ".tool_call_id", "a string");
                cm.tool_call_id = id->get<std::string>();
            }
            if (const json * n = field(m, "name")) {
                if (!n->is_string()) return bad_type(param + ".name", "a string");
                cm.name = n->get<std::string>();
            }
        }
        if (auto e = read_content(m, role, param, cm.content)) return e;
        out.push_back(std::move(cm));
    }
    return std::nullopt;
}

// tools, tool_choice, parallel_tool_calls and chat_template_kwargs.
std::optional<api_error> read_tools(const json & body, std::string_view raw_body, completion_request & out) {
    if (const json * t = field(body, "tools")) {
        if (!t->is_array()) return bad_type("tools", "an array of tool objects");
        if (t->size() > 128) return bad("at most 128 tools are allowed (got " + std::to_string(t->size()) + ")", "tools");
        std::set<std::string> names;
        for (size_t i = 0; i < t->size(); ++i) {
            const json & tool = (*t)[i];
            const std::string p = "tools[" + std::to_string(i) + "]";
            if (!tool.is_object()) return bad_type(p, "an object");
            const json * type = field(tool, "type");
            if (!type || !type->is_string() || *type != "function") {
                return bad("'" + p + ".type' must be \"function\"", p + ".type");
            }
            const json * fn = field(tool, "function");
            if (!fn || !fn->is_object()) return bad_type(p + ".function", "an object");
            const json * name = field(*fn, "name");
            if (!name || !name->is_string()) return bad_type(p + ".function.name", "a string");
            if (!valid_function_name(name->get<std::string>())) {
                return bad("'" + p + ".function.name' must be 1 to 64 letters, digits, '_' or '-'", p + ".function.name");
            }
            if (!names.insert(name->get<std::string>()).second) {
                return bad("two tools are named '" + name->get<std::string>() + "'", p + ".function.name");
            }
            if (const json * d = field(*fn, "description"); d && !d->is_string()) return bad_type(p + ".function.description", "a string");
            if (const json * ps = field(*fn, "parameters"); ps && !ps->is_object()) {
                return bad_type(p + ".function.parameters", "a JSON schema object");
            }
            if (const json * st = field(*fn, "strict"); st && !st->is_boolean()) return bad_type(p + ".function.strict", "a boolean");
        }
        // The client's key order (json sorts keys): templates write tools as JSON text,
        // and transformers keeps the order the client sent.
        const chat::ojson ordered = chat::ojson::parse(raw_body, nullptr, /*allow_exceptions=*/false);
        out.tools = ordered.is_object() && ordered.contains("tools") ? ordered["tools"] : chat::ojson::parse(t->dump());
    }
    if (const json * c = field(body, "tool_choice")) {
        chat::tool_choice & tc = out.tool_choice;
        if (c->is_string()) {
            const std::string mode = c->get<std::string>();
            if (mode == "auto") tc.mode = chat::tool_choice_mode::automatic;
            else if (mode == "none") tc.mode = chat::tool_choice_mode::none;
            else if (mode == "required") tc.mode = chat::tool_choice_mode::required;
            else return bad("'tool_choice' must be \"auto\", \"none\", \"required\" or a named function", "tool_choice");
        } else if (c->is_object()) {
            const json * fn = field(*c, "function");
            const json * name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
            if (!name || !name->is_string()) return bad_type("tool_choice.function.name", "a string");
            tc.mode = chat::tool_choice_mode::named;
            tc.name = name->get<std::string>();
        } else {
            return bad_type("tool_choice", "a string or an object");
        }
        const bool has_tools = !out.tools.empty();
        if ((tc.mode == chat::tool_choice_mode::required || tc.mode == chat::tool_choice_mode::named) && !has_tools) {
            return bad("'tool_choice' asks for a tool call but 'tools' is empty", "tool_choice");
        }
        if (tc.mode == chat::tool_choice_mode::named) {
            bool found = false;
            for (const auto & t : out.tools) found = found || t["function"]["name"] == tc.name;
            if (!found) return bad("'tool_choice' names '" + tc.name + "', which is not in 'tools'", "tool_choice");
        }
    }
    std::optional<bool> parallel;
    if (auto e = read_bool(body, "parallel_tool_calls", parallel)) return e;
    out.parallel_tool_calls = parallel.value_or(true);
    if (const json * k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) return bad_type("chat_template_kwargs", "an object");
        const chat::ojson ordered = chat::ojson::parse(raw_body, nullptr, /*allow_exceptions=*/false);
        out.template_kwargs = ordered.is_object() && ordered.contains("chat_template_kwargs") ? ordered["chat_template_kwargs"]
                                                                                               : chat::ojson::parse(k->dump());
    }
    return std::nullopt;
}

std::optional<api_error> read_token_ids(const json & arr, const std::string & param, const request_limits & limits,
                                        std::vector<int32_t> & out) {
    for (size_t i = 0; i < arr.size(); ++i) {
        const json & t = arr[i];
        if (!t.is_number_integer()) return bad_type(param + "[" + std::to_string(i) + "]", "an integer token id");
        const bool negative = t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0;
        if (negative || t.get<uint64_t>() >= static_cast<uint64_t>(limits.n_vocab)) {
            return bad("token id " + t.dump() + " is outside the vocabulary [0, " + std::to_string(limits.n_vocab) + ")",
                       param + "[" + std::to_string(i) + "]");
        }
        out.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return std::nullopt;
}

// A prompt: a string, an array of token ids, or a one-element array holding either.
std::optional<api_error> read_prompt(const json & body, const request_limits & limits, completion_request & out) {
    const json * v = field(body, "prompt");
    if (!v) return bad("'prompt' is required", "prompt", "missing_required_parameter");
    if (v->is_string()) {
        out.prompt_text = v->get<std::string>();
        return std::nullopt;
    }
    if (!v->is_array()) return bad_type("prompt", "a string or an array of token ids");
    if (v->empty()) return bad("'prompt' must not be an empty array", "prompt");
    const json & first = (*v)[0];
    if (first.is_number_integer()) {
        out.prompt_is_tokens = true;
        return read_token_ids(*v, "prompt", limits, out.prompt_tokens);
    }
    if (v->size() > 1) {
        return unsupported("a batch of prompts is not supported: send one prompt (a string or an array of token ids)",
                           "prompt");
    }
    if (first.is_string()) {
        out.prompt_text = first.get<std::string>();
        return std::nullopt;
    }
    if (first.is_array() && !first.empty()) {
        out.prompt_is_tokens = true;
        return read_token_ids(first, "prompt[0]", limits, out.prompt_tokens);
    }
    return bad_type("prompt", "a string or an array of token ids");
}

std::optional<api_error> read_stop(const json & body, const request_limits & limits, std::vector<std::string> & out) {
    const json * v = field(body, "stop");
    if (!v) return std::nullopt;
    auto add = [&](const json & s, const std::string & param) -> std::optional<api_error> {
        if (!s.is_string()) return bad_type(param, "a string");
        std::string text = s.get<std::string>();
        if (text.empty()) return bad("stop strings must not be empty", param);
        if (text.size() > limits.max_stop_bytes) {
            return bad("stop strings are limited to " + std::to_string(limits.max_stop_bytes) + " bytes", param);
        }
        out.push_back(std::move(text));
        return std::nullopt;
    };
    if (v->is_string()) return add(*v, "stop");
    if (!v->is_array()) return bad_type("stop", "a string or an array of strings");
    if (v->size() > limits.max_stop_strings) {
        return bad("at most " + std::to_string(limits.max_stop_strings) + " stop strings are allowed", "stop");
    }
    for (size_t i = 0; i < v->size(); ++i) {
        if (auto e = add((*v)[i], "stop[" + std::to_string(i) + "]")) return e;
    }
    return std::nullopt;
}

// A canonical decimal token id: "0", or digits without a leading zero, sign or space.
bool canonical_token_key(const std::string & key) {
    if (key.empty() || key.size() > 10) return false;
    if (key.size() > 1 && key[0] == '0') return false;
    return std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<api_error> read_logit_bias(const json & body, const request_limits & limits, sampling_config & s) {
    const json * v = field(body, "logit_bias");
    if (!v) return std::nullopt;
    if (!v->is_object()) return bad_type("logit_bias", "an object mapping token ids to numbers");
    if (v->size() > limits.max_logit_bias) {
        return bad("logit_bias has " + std::to_string(v->size()) + " entries; at most " +
                       std::to_string(limits.max_logit_bias) + " are allowed",
                   "logit_bias");
    }
    const auto max_bias = static_cast<double>(sampling_bounds::max_abs_logit_bias);
    for (auto it = v->begin(); it != v->end(); ++it) {
        const std::string & key = it.key();
        // Canonical keys only: " 5", "+5" and "05" would all be token 5, and their biases
        // would add up past the documented range.
        if (!canonical_token_key(key)) {
            return bad("logit_bias key '" + key + "' is not a token id (decimal digits without sign, spaces or leading zeros)",
                       "logit_bias");
        }
        const long long id = std::strtoll(key.c_str(), nullptr, 10);
        if (id >= limits.n_vocab) {
            return bad("logit_bias key '" + key + "' is not a token id in [0, " + std::to_string(limits.n_vocab) + ")",
                       "logit_bias");
        }
        if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -max_bias ||
            it->get<double>() > max_bias) {
            return bad("logit_bias values must be numbers in [-100, 100] (key '" + key + "')", "logit_bias");
        }
        s.logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
    }
    return std::nullopt;
}

// Parses a body, noting the first key that appears twice in the logit_bias object (a
// JSON parser keeps only one of them, silently).
json parse_body(std::string_view body, std::string & duplicate_bias_key) {
    bool in_bias = false;
    std::string last_top_key;
    std::set<std::string> seen;
    json::parser_callback_t note = [&](int depth, json::parse_event_t event, json & parsed) {
        if (event == json::parse_event_t::key && depth == 1) {
            last_top_key = parsed.get<std::string>();
        } else if (event == json::parse_event_t::object_start && depth == 1 && last_top_key == "logit_bias") {
            in_bias = true;
            seen.clear();
        } else if (event == json::parse_event_t::object_end && depth == 1) {
            in_bias = false;
        } else if (in_bias && event == json::parse_event_t::key && depth == 2) {
            const std::string key = parsed.get<std::string>();
            if (!seen.insert(key).second && duplicate_bias_key.empty()) duplicate_bias_key = key;
        }
        return true;
    };
    return json::parse(body, note, /*allow_exceptions=*/false);
}

// Chat: logprobs (boolean) and top_logprobs (0..20, only with logprobs: true);
// completions: logprobs (0..20, llama-server's bound rather than OpenAI's 5).
std::optional<api_error> read_logprobs(const json & body, endpoint kind, completion_request & out) {
    constexpr int64_t max_top = sampling_bounds::max_logprobs;
    std::optional<int64_t> n;
    if (kind == endpoint::chat_completions) {
        std::optional<bool> on;
        if (auto e = read_bool(body, "logprobs", on)) return e;
        if (auto e = read_int(body, "top_logprobs", 0, max_top, n)) return e;
        if (n && *n > 0 && !on.value_or(false)) return bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
        if (!on.value_or(false)) return std::nullopt;
        out.top_logprobs = static_cast<int32_t>(n.value_or(0));
    } else {
        if (const json * l = field(body, "logprobs"); l && l->is_boolean()) return bad_type("logprobs", "an integer");
        if (auto e = read_int(body, "logprobs", 0, max_top, n)) return e;
        if (!n) return std::nullopt;
        out.top_logprobs = static_cast<int32_t>(*n);
    }
    out.sampling.n_logprobs = std::max<int32_t>(out.top_logprobs, 1);
    return std::nullopt;
}

// Options we do not implement: accepted only at their "off" value.
std::optional<api_error> refuse_unsupported(const json & body, endpoint kind) {
    if (const json * n = field(body, "n")) {
        if (!n->is_number_integer() || n->get<int64_t>() != 1) return unsupported("only n = 1 is supported", "n");
    }
    if (const json * b = field(body, "best_of")) {
        if (!b->is_number_integer() || b->get<int64_t>() != 1) return unsupported("only best_of = 1 is supported", "best_of");
    }
    if (const json * e = field(body, "echo")) {
        if (!e->is_boolean()) return bad_type("echo", "a boolean");
        if (e->get<bool>()) return unsupported("echo is not supported", "echo");
    }
    if (const json * s = field(body, "suffix")) {
        if (!s->is_string() || !s->get<std::string>().empty()) return unsupported("suffix is not supported", "suffix");
    }
    if (const json * t = field(body, "functions")) {
        if (!t->is_array() || !t->empty()) return unsupported("'functions' (deprecated) is not supported; use tools", "functions");
    }
    if (kind == endpoint::completions && field(body, "tools")) {
        return unsupported("tools need /v1/chat/completions", "tools");
    }
    return std::nullopt;
}

// A grammar the final stage will compile, compiled here once so that a bad one is the
// client's 400 (naming `param`, with the grammar module's message), not a failed
// generation.
std::optional<api_error> check_grammar(const std::string & gbnf, const std::string & param) {
    if (gbnf.size() > sampling_bounds::max_grammar_bytes) {
        return bad("'" + param + "' is limited to " + std::to_string(sampling_bounds::max_grammar_bytes) +
                       " bytes of GBNF (it has " + std::to_string(gbnf.size()) + ")",
                   param);
    }
    auto g = grammar::compile(gbnf);
    if (!g.is_ok()) return bad("'" + param + "': " + g.error().message(), param);
    return std::nullopt;
}

// response_format and grammar (llama-server's field): at most one constraint on the
// output, as GBNF in sampling.grammar.
std::optional<api_error> read_constraint(const json & body, std::string_view raw_body, completion_request & out) {
    std::string & gbnf = out.sampling.grammar;
    std::string   param;
    if (const json * g = field(body, "grammar")) {
        if (!g->is_string()) return bad_type("grammar", "a string (GBNF)");
        gbnf = g->get<std::string>();
        param = "grammar";
    }
    if (const json * r = field(body, "response_format")) {
        if (!r->is_object()) return bad_type("response_format", "an object");
        const json * type = field(*r, "type");
        if (!type || !type->is_string()) return bad_type("response_format.type", "\"text\", \"json_object\" or \"json_schema\"");
        const std::string t = type->get<std::string>();
        if (t != "text" && !gbnf.empty()) {
            return bad("give either 'grammar' or a 'response_format' other than text, not both", "response_format");
        }
        if (t == "json_object") {
            gbnf = grammar::gbnf_json_object();
            param = "response_format";
        } else if (t == "json_schema") {
            const json * js = field(*r, "json_schema");
            if (!js || !js->is_object()) return bad_type("response_format.json_schema", "an object");
            if (const json * n = field(*js, "name"); n && !n->is_string()) return bad_type("response_format.json_schema.name", "a string");
            std::optional<bool> strict;
            if (auto e = read_bool(*js, "strict", strict)) {
                e->param = "response_format.json_schema.strict";
                return e;
            }
            const json * schema = field(*js, "schema");
            if (!schema) return bad("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
            if (!schema->is_object() && !schema->is_boolean()) {
                return bad_type("response_format.json_schema.schema", "a JSON schema object");
            }
            // The client's key order: properties come out in the schema's order.
            const chat::ojson ordered = chat::ojson::parse(raw_body, nullptr, /*allow_exceptions=*/false);
            chat::ojson sch = chat::ojson::parse(schema->dump());
            if (ordered.is_object() && ordered.contains("response_format") && ordered["response_format"].is_object() &&
                ordered["response_format"].contains("json_schema") && ordered["response_format"]["json_schema"].is_object() &&
                ordered["response_format"]["json_schema"].contains("schema")) {
                sch = ordered["response_format"]["json_schema"]["schema"];
            }
            grammar::json_schema_options o;
            o.strict = strict.value_or(false);
            auto converted = grammar::gbnf_from_json_schema(sch, o);
            if (!converted.is_ok()) {
                return bad("'response_format.json_schema.schema': " + converted.error().message(), "response_format.json_schema.schema");
            }
            gbnf = std::move(converted).value();
            param = "response_format.json_schema.schema";
        } else if (t != "text") {
            return bad("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"", "response_format.type");
        }
    }
    if (!gbnf.empty()) return check_grammar(gbnf, param);
    return std::nullopt;
}

const char * object_name(endpoint kind, bool chunk) {
    if (kind == endpoint::completions) return "text_completion";
    return chunk ? "chat.completion.chunk" : "chat.completion";
}

ojson usage_json(const usage_numbers & u) {
    ojson j;
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    j["prompt_tokens_details"] = ojson{{"cached_tokens", u.cached_tokens}};
    j["skippy"] = ojson{{"kv_hit_stage_mask", u.kv_hit_stage_mask}, {"kv_record_stage_mask", u.kv_record_stage_mask}};
    return j;
}

ojson head_json(const response_meta & meta, bool chunk) {
    ojson j;
    j["id"] = meta.id;
    j["object"] = object_name(meta.kind, chunk);
    j["created"] = meta.created;
    j["model"] = meta.model;
    j["system_fingerprint"] = meta.system_fingerprint;
    return j;
}

ojson tool_calls_json(const std::vector<chat::tool_call> & calls) {
    ojson out = ojson::array();
    for (const chat::tool_call & c : calls) {
        out.push_back(ojson{{"id", c.id}, {"type", "function"}, {"function", ojson{{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

}  // namespace

std::string error_body(const api_error & e) {
    ojson err;
    err["message"] = e.message;
    err["type"] = e.type;
    err["param"] = null_or(e.param);
    err["code"] = null_or(e.code);
    ojson j;
    j["error"] = std::move(err);
    return dump(j);
}

api_error error_for_status(int http_status, std::string message) {
    api_error e;
    e.http_status = http_status;
    e.message = std::move(message);
    switch (http_status) {
        case 400: e.type = "invalid_request_error"; break;
        case 404: e.type = "invalid_request_error"; e.code = "not_found"; break;
        case 405: e.type = "invalid_request_error"; e.code = "method_not_allowed"; break;
        case 413: e.type = "invalid_request_error"; e.code = "request_too_large"; break;
        case 429: e.type = "rate_limit_error"; e.code = "queue_full"; break;
        case 503: e.type = "server_error"; e.code = "service_unavailable"; break;
        case 504: e.type = "server_error"; e.code = "stage_timeout"; break;
        default: e.type = http_status >= 500 ? "server_error" : "invalid_request_error"; break;
    }
    return e;
}

api_error error_for_pipeline_failure(const status & failure) {
    // A gateway's answer for an upstream that did not answer in time: the client may
    // retry (the lane is re-dialed); other failures are plain server errors.
    return error_for_status(failure.code() == error_code::timed_out ? 504 : 500, failure.message());
}

std::optional<api_error> parse_request(std::string_view body, endpoint kind, const request_limits & limits,
                                       completion_request & out) {
    out = completion_request{};
    out.kind = kind;
    std::string duplicate_bias_key;
    json j = parse_body(body, duplicate_bias_key);
    if (j.is_discarded()) {
        return bad("the request body is not valid JSON", "", "invalid_json");
    }
    if (!j.is_object()) return bad("the request body must be a JSON object", "", "invalid_json");

    std::optional<std::string> model;
    if (auto e = read_string(j, "model", model)) return e;
    out.model = model.value_or("");

    if (kind == endpoint::chat_completions) {
        if (auto e = read_messages(j, out.messages)) return e;
        if (auto e = read_tools(j, body, out)) return e;
    } else {
        if (auto e = read_prompt(j, limits, out)) return e;
    }
    if (auto e = refuse_unsupported(j, kind)) return e;
    if (auto e = read_constraint(j, body, out)) return e;
    if (auto e = read_logprobs(j, kind, out)) return e;

    std::optional<int64_t> max_tokens, max_completion_tokens, top_k;
    if (auto e = read_int(j, "max_tokens", 0, limits.ctx_size, max_tokens)) return e;
    if (kind == endpoint::chat_completions) {
        if (auto e = read_int(j, "max_completion_tokens", 0, limits.ctx_size, max_completion_tokens)) return e;
    }
    if (max_completion_tokens) out.max_tokens = static_cast<int32_t>(*max_completion_tokens);
    else if (max_tokens) out.max_tokens = static_cast<int32_t>(*max_tokens);
    else if (kind == endpoint::completions) out.max_tokens = 16;  // OpenAI's default for completions

    sampling_config & s = out.sampling;
    std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
    using b = sampling_bounds;
    if (auto e = read_number(j, "temperature", 0, b::max_temperature, false, temperature)) return e;
    if (auto e = read_number(j, "top_p", 0, 1, true, top_p)) return e;
    if (auto e = read_int(j, "top_k", 0, b::max_top_k, top_k)) return e;
    if (auto e = read_number(j, "min_p", 0, 1, false, min_p)) return e;
    if (auto e = read_number(j, "presence_penalty", -b::max_abs_penalty, b::max_abs_penalty, false, presence)) return e;
    if (auto e = read_number(j, "frequency_penalty", -b::max_abs_penalty, b::max_abs_penalty, false, frequency)) return e;
    const char * rep_key = field(j, "repetition_penalty") ? "repetition_penalty" : "repeat_penalty";
    if (auto e = read_number(j, rep_key, b::min_repeat_penalty, b::max_repeat_penalty, false, repetition)) return e;
    if (const json * sv = field(j, "seed")) {
        if (!sv->is_number_integer()) return bad_type("seed", "an integer");
        s.seed = sv->is_number_unsigned() ? sv->get<uint64_t>() : static_cast<uint64_t>(sv->get<int64_t>());
        out.seed_given = true;
    }
    if (temperature) s.temperature = static_cast<float>(*temperature);
    if (top_p) s.top_p = static_cast<float>(*top_p);
    if (top_k) s.top_k = static_cast<int32_t>(*top_k);
    if (min_p) s.min_p = static_cast<float>(*min_p);
    if (presence) s.presence_penalty = static_cast<float>(*presence);
    if (frequency) s.frequency_penalty = static_cast<float>(*frequency);
    if (repetition) s.repeat_penalty = static_cast<float>(*repetition);
    if (!duplicate_bias_key.empty()) {
        return bad("logit_bias key '" + duplicate_bias_key + "' appears more than once", "logit_bias");
    }
    if (auto e = read_logit_bias(j, limits, s)) return e;

    if (auto e = read_stop(j, limits, out.stop)) return e;

    std::optional<bool> stream;
    if (auto e = read_bool(j, "stream", stream)) return e;
    out.stream = stream.value_or(false);
    if (const json * so = field(j, "stream_options")) {
        if (!so->is_object()) return bad_type("stream_options", "an object");
        std::optional<bool> include_usage;
        if (auto e = read_bool(*so, "include_usage", include_usage)) {
            e->param = "stream_options.include_usage";
            return e;
        }
        out.include_usage = out.stream && include_usage.value_or(false);
    }

    std::optional<std::string> cache_key;
    if (auto e = read_string(j, "prompt_cache_key", cache_key)) return e;
    if (cache_key && cache_key->size() > limits.max_cache_key_bytes) {
        return bad("'prompt_cache_key' is limited to " + std::to_string(limits.max_cache_key_bytes) + " bytes (it has " +
                       std::to_string(cache_key->size()) + ")",
                   "prompt_cache_key", "string_above_max_length");
    }
    out.cache_key = cache_key.value_or("");

    // The check every stage makes (nothing here may pass it on that a stage refuses).
    const status st = s.validate(limits.n_vocab);
    if (!st.is_ok()) return bad(st.message(), "");
    return std::nullopt;
}

std::string make_response_id(endpoint kind) {
    // A random process prefix and a counter: unique within the process, unguessable
    // enough to not collide across restarts in logs.
    static const uint64_t prefix = [] {
        std::random_device rd;
        return (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }();
    static std::atomic<uint64_t> counter{0};
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s-%016llx%08llx", kind == endpoint::chat_completions ? "chatcmpl" : "cmpl",
                  static_cast<unsigned long long>(prefix), static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffffffu));
    return buf;
}

namespace {

ojson byte_values(const std::string & piece) {
    ojson out = ojson::array();
    for (unsigned char c : piece) out.push_back(static_cast<int>(c));
    return out;
}

// OpenAI's shapes: chat {content: [{token, logprob, bytes, top_logprobs: [...]}],
// refusal}; completions {tokens, token_logprobs, top_logprobs: [{piece: lp}], text_offset}.
ojson logprobs_json(endpoint kind, const logprobs_out & lp) {
    if (kind == endpoint::chat_completions) {
        ojson content = ojson::array();
        for (const logprob_item & it : lp.items) {
            ojson top = ojson::array();
            for (size_t i = 0; i < it.top.size() && i < static_cast<size_t>(lp.n_top); ++i) {
                top.push_back(ojson{{"token", sanitize_utf8(it.top[i].first)}, {"logprob", it.top[i].second},
                                    {"bytes", byte_values(it.top[i].first)}});
            }
            content.push_back(ojson{{"token", sanitize_utf8(it.piece)}, {"logprob", it.logprob}, {"bytes", byte_values(it.piece)},
                                    {"top_logprobs", std::move(top)}});
        }
        return ojson{{"content", std::move(content)}, {"refusal", nullptr}};
    }
    ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    size_t offset = lp.text_offset;
    for (const logprob_item & it : lp.items) {
        tokens.push_back(sanitize_utf8(it.piece));
        values.push_back(it.logprob);
        ojson top = ojson::object();
        // Two alternatives of the same text (as shown: pieces of split characters all
        // show U+FFFD): the likelier one stands for both.
        for (size_t i = 0; i < it.top.size() && i < static_cast<size_t>(lp.n_top); ++i) {
            const std::string key = sanitize_utf8(it.top[i].first);
            if (!top.contains(key)) top[key] = it.top[i].second;
        }
        tops.push_back(std::move(top));
        offsets.push_back(offset);
        offset += it.piece.size();
    }
    return ojson{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(values)}, {"top_logprobs", std::move(tops)},
                 {"text_offset", std::move(offsets)}};
}

ojson logprobs_or_null(endpoint kind, const logprobs_out * lp) {
    if (!lp || lp->items.empty()) return nullptr;
    return logprobs_json(kind, *lp);
}

}  // namespace

std::string completion_body(const response_meta & meta, std::string_view text, std::string_view finish_reason,
                            const usage_numbers & usage, const chat::parsed_output * reply, const logprobs_out * logprobs) {
    ojson j = head_json(meta, false);
    ojson choice;
    choice["index"] = 0;
    if (meta.kind == endpoint::chat_completions && reply) {
        ojson message{{"role", "assistant"}};
        // OpenAI: content is null when the answer is only tool calls.
        message["content"] = reply->content.empty() && !reply->tool_calls.empty() ? ojson(nullptr) : ojson(reply->content);
        if (!reply->reasoning_content.empty()) message["reasoning_content"] = reply->reasoning_content;
        if (!reply->tool_calls.empty()) message["tool_calls"] = tool_calls_json(reply->tool_calls);
        choice["message"] = std::move(message);
    } else if (meta.kind == endpoint::chat_completions) {
        choice["message"] = ojson{{"role", "assistant"}, {"content", std::string(text)}};
    } else {
        choice["text"] = std::string(text);
    }
    // Asked for but nothing generated: an empty list, not null.
    choice["logprobs"] = logprobs ? logprobs_json(meta.kind, *logprobs) : ojson(nullptr);
    choice["finish_reason"] = std::string(finish_reason);
    j["choices"] = ojson::array({std::move(choice)});
    j["usage"] = usage_json(usage);
    return dump(j);
}

std::string stream_chunk(const response_meta & meta, std::string_view text, bool first, std::string_view finish_reason,
                         bool usage_null, const logprobs_out * logprobs) {
    ojson j = head_json(meta, true);
    ojson choice;
    choice["index"] = 0;
    if (meta.kind == endpoint::chat_completions) {
        ojson delta = ojson::object();
        if (first) delta["role"] = "assistant";
        if (finish_reason.empty()) delta["content"] = std::string(text);
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = std::string(text);
    }
    choice["logprobs"] = logprobs_or_null(meta.kind, logprobs);
    choice["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(std::string(finish_reason));
    j["choices"] = ojson::array({std::move(choice)});
    if (usage_null) j["usage"] = nullptr;
    return dump(j);
}

std::vector<std::string> stream_delta_chunks(const response_meta & meta, const chat::output_delta & delta, bool usage_null,
                                             const logprobs_out * logprobs) {
    std::vector<std::string> out;
    auto chunk = [&](ojson d) {
        ojson j = head_json(meta, true);
        ojson choice;
        choice["index"] = 0;
        choice["delta"] = std::move(d);
        choice["logprobs"] = out.empty() ? logprobs_or_null(meta.kind, logprobs) : ojson(nullptr);
        choice["finish_reason"] = nullptr;
        j["choices"] = ojson::array({std::move(choice)});
        if (usage_null) j["usage"] = nullptr;
        out.push_back(dump(j));
    };
    if (!delta.reasoning.empty()) chunk(ojson{{"reasoning_content", delta.reasoning}});
    if (!delta.content.empty()) chunk(ojson{{"content", delta.content}});
    for (const chat::tool_call_delta & c : delta.tool_calls) {
        // As OpenAI streams a call: index, id, type and name first, then the arguments.
        chunk(ojson{{"tool_calls", ojson::array({ojson{{"index", c.index},
                                                       {"id", c.id},
                                                       {"type", "function"},
                                                       {"function", ojson{{"name", c.name}, {"arguments", ""}}}}})}});
        chunk(ojson{{"tool_calls", ojson::array({ojson{{"index", c.index}, {"function", ojson{{"arguments", c.arguments}}}}})}});
    }
    return out;
}

std::string stream_usage_chunk(const response_meta & meta, const usage_numbers & usage) {
    ojson j = head_json(meta, true);
    j["choices"] = ojson::array();
    j["usage"] = usage_json(usage);
    return dump(j);
}

std::string sse_event(std::string_view payload) {
    std::string out;
    out.reserve(payload.size() + 8);
    out += "data: ";
    out += payload;
    out += "\n\n";
    return out;
}

std::string model_body(const std::string & model_id, int64_t created) {
    ojson j;
    j["id"] = model_id;
    j["object"] = "model";
    j["created"] = created;
    j["owned_by"] = "skippy";
    return dump(j);
}

std::string models_body(const std::string & model_id, int64_t created) {
    ojson j;
    j["object"] = "list";
    j["data"] = ojson::array({ojson::parse(model_body(model_id, created))});
    return dump(j);
}

}  // namespace skippy::http
