// Reading the model's output: reasoning, content and tool calls, piece by piece.
//
// One state machine serves streaming and whole responses. Text is appended to `buf`;
// each step either finds a marker in it or releases what can no longer become one
// (a tail that is a prefix of a marker stays held). Formats: docs/chat-templates.md.
#include "chat/chat.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <random>

namespace skippy::chat {
namespace {

constexpr std::string_view think_open = "<think>";
constexpr std::string_view think_close = "</think>";
constexpr std::string_view hermes_open = "<tool_call>";
constexpr std::string_view hermes_close = "</tool_call>";
constexpr std::string_view python_tag = "<|python_tag|>";
constexpr std::string_view h_channel = "<|channel|>";
constexpr std::string_view h_message = "<|message|>";
constexpr std::string_view h_end = "<|end|>";
constexpr std::string_view h_return = "<|return|>";
constexpr std::string_view h_call = "<|call|>";
// A harmony header longer than this without <|message|> is not a header.
constexpr size_t max_harmony_header_bytes = 512;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// Length of the longest tail of `buf` that is a proper prefix of one of `markers`.
size_t held_tail(std::string_view buf, std::initializer_list<std::string_view> markers) {
    size_t best = 0;
    for (std::string_view m : markers) {
        for (size_t k = std::min(m.size() - 1, buf.size()); k > best; --k) {
            if (buf.substr(buf.size() - k) == m.substr(0, k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

struct found {
    size_t           pos = std::string::npos;
    std::string_view marker;
};

found first_of(std::string_view buf, std::initializer_list<std::string_view> markers) {
    found f;
    for (std::string_view m : markers) {
        const size_t p = buf.find(m);
        if (p < f.pos) f = {p, m};
    }
    return f;
}

std::string new_call_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += alphabet[rng() % (sizeof(alphabet) - 1)];
    return id;
}

}  // namespace

struct output_parser::state {
    enum class mode { start, content, think, hermes_call, llama3_json, h_header, h_body, raw };

    output_format fmt;
    mode          m = mode::start;
    std::string   buf;
    int32_t       n_calls = 0;
    bool          skip_content_ws = false;    // after </think> or a tool call
    bool          skip_reasoning_ws = false;  // after <think>
    // harmony: the message being read
    std::string   h_header_text;
    std::string   h_channel_name;
    std::string   h_recipient;

    explicit state(output_format f) : fmt(std::move(f)) {}

    void content(output_delta & d, std::string_view s) {
        if (skip_content_ws) {
            while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
            if (s.empty()) return;
            skip_content_ws = false;
        }
        d.content.append(s);
    }
    void reasoning(output_delta & d, std::string_view s) {
        if (skip_reasoning_ws) {
            while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
            if (s.empty()) return;
            skip_reasoning_ws = false;
        }
        d.reasoning.append(s);
    }

    bool known_tool(const std::string & name) const {
        return std::find(fmt.tool_names.begin(), fmt.tool_names.end(), name) != fmt.tool_names.end();
    }

    // A call the model wrote: true when it is one (a known function, JSON object arguments).
    bool add_call(output_delta & d, const std::string & name, const ojson & arguments) {
        if (!known_tool(name) || !arguments.is_object()) return false;
        if (n_calls > 0 && !fmt.parallel_tool_calls) return true;  // consumed, not answered
        tool_call_delta c;
        c.index = n_calls++;
        c.id = new_call_id();
        c.name = name;
        c.arguments = arguments.dump(-1, ' ', false, ojson::error_handler_t::replace);
        d.tool_calls.push_back(std::move(c));
        skip_content_ws = true;
        return true;
    }

    // {"name": …, "arguments" | "parameters": {…}}
    bool add_json_call(output_delta & d, const ojson & j) {
        if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
        const char * key = j.contains("arguments") ? "arguments" : "parameters";
        if (!j.contains(key)) return false;
        ojson args = j[key];
        if (args.is_string()) args = ojson::parse(args.get<std::string>(), nullptr, false);
        return add_call(d, j["name"].get<std::string>(), args);
    }

    // Text after the template's generation prompt: decide the first mode.
    bool step_start(output_delta &, bool at_end) {
        if (fmt.reasoning == reasoning_format::harmony) {
            m = mode::h_header;
            return true;
        }
        if (fmt.starts_in_reasoning) {
            m = mode::think;
            skip_reasoning_ws = true;
            return true;
        }
        if (fmt.tools == tool_format::llama3) {
            const size_t b = buf.find_first_not_of(" \t\r\n");
            if (b == std::string::npos) {
                if (at_end) m = mode::content;
                return at_end;
            }
            const std::string_view rest = std::string_view(buf).substr(b);
            if (rest.front() == '{' || rest.substr(0, python_tag.size()) == python_tag) {
                m = mode::llama3_json;
                return true;
            }
            if (!at_end && python_tag.substr(0, rest.size()) == rest) return false;  // maybe the tag
        }
        m = mode::content;
        return true;
    }

    bool step_content(output_delta & d, bool at_end) {
        const bool think = fmt.reasoning == reasoning_format::think_tags;
        const bool hermes = fmt.tools == tool_format::hermes;
        std::initializer_list<std::string_view> both = {think_open, hermes_open};
        std::initializer_list<std::string_view> only_think = {think_open};
        std::initializer_list<std::string_view> only_hermes = {hermes_open};
        std::initializer_list<std::string_view> none = {};
        const auto & markers = think && hermes ? both : think ? only_think : hermes ? only_hermes : none;
        const found f = first_of(buf, markers);
        if (f.pos != std::string::npos) {
            content(d, std::string_view(buf).substr(0, f.pos));
            buf.erase(0, f.pos + f.marker.size());
            if (f.marker == think_open) {
                m = mode::think;
                skip_reasoning_ws = true;
            } else {
                m = mode::hermes_call;
            }
            return true;
        }
        const size_t hold = at_end ? 0 : held_tail(buf, markers);
        content(d, std::string_view(buf).substr(0, buf.size() - hold));
        buf.erase(0, buf.size() - hold);
        return false;
    }

    bool step_think(output_delta & d, bool at_end) {
        const size_t p = buf.find(think_close);
        if (p != std::string::npos) {
            reasoning(d, std::string_view(buf).substr(0, p));
            // Whitespace before </think> is layout, not reasoning (it was held, so it
            // is all in this delta).
            while (!d.reasoning.empty() && is_space(d.reasoning.back())) d.reasoning.pop_back();
            buf.erase(0, p + think_close.size());
            m = mode::content;
            skip_content_ws = true;
            return true;
        }
        // Hold a possible </think> and trailing whitespace (dropped if </think> follows).
        size_t keep = at_end ? buf.size() : buf.size() - held_tail(buf, {think_close});
        while (keep > 0 && is_space(buf[keep - 1])) --keep;
        reasoning(d, std::string_view(buf).substr(0, keep));
        buf.erase(0, at_end ? buf.size() : keep);
        return false;
    }

    bool step_hermes_call(output_delta & d, bool at_end) {
        const size_t p = buf.find(hermes_close);
        if (p == std::string::npos) {
            if (at_end) {  // never closed: what the model wrote, as text
                content(d, hermes_open);
                content(d, buf);
                buf.clear();
            }
            return false;
        }
        const std::string body(buf, 0, p);
        const ojson j = ojson::parse(trim(body), nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !add_json_call(d, j)) {
            content(d, hermes_open);
            content(d, body);
            content(d, hermes_close);
        }
        buf.erase(0, p + hermes_close.size());
        m = mode::content;
        return true;
    }

    // Llama 3.x: the whole answer is one call, or several separated by ';' or newlines.
    bool step_llama3_json(output_delta & d, bool at_end) {
        if (!at_end) return false;
        std::string_view text = trim(buf);
        if (text.substr(0, python_tag.size()) == python_tag) text = trim(text.substr(python_tag.size()));
        std::vector<ojson> calls;
        bool ok = !text.empty();
        while (ok && !text.empty()) {
            // One object: the shortest balanced {...} prefix (strings skipped).
            int depth = 0;
            bool in_string = false, escaped = false;
            size_t end = std::string_view::npos;
            for (size_t i = 0; i < text.size(); ++i) {
                const char c = text[i];
                if (in_string) {
                    if (escaped) escaped = false;
                    else if (c == '\\') escaped = true;
                    else if (c == '"') in_string = false;
                } else if (c == '"') {
                    in_string = true;
                } else if (c == '{') {
                    ++depth;
                } else if (c == '}' && --depth == 0) {
                    end = i + 1;
                    break;
                }
            }
            if (text.front() != '{' || end == std::string_view::npos) {
                ok = false;
                break;
            }
            ojson j = ojson::parse(text.substr(0, end), nullptr, false);
            if (j.is_discarded()) {
                ok = false;
                break;
            }
            calls.push_back(std::move(j));
            text = text.substr(end);
            while (!text.empty() && (is_space(text.front()) || text.front() == ';')) text.remove_prefix(1);
        }
        output_delta trial;
        for (const ojson & j : calls) ok = ok && add_json_call(trial, j);
        if (ok) {
            for (auto & c : trial.tool_calls) d.tool_calls.push_back(std::move(c));
        } else {
            n_calls = 0;
            content(d, buf);
        }
        buf.clear();
        return false;
    }

    // harmony: [<|start|>assistant][ to=R]<|channel|>C[ to=R][ <|constrain|>T]<|message|>
    bool step_h_header(output_delta & d, bool at_end) {
        const size_t p = buf.find(h_message);
        if (p == std::string::npos) {
            if (at_end || buf.size() > max_harmony_header_bytes) {
                if (!trim(buf).empty()) not_harmony(d, std::move(buf));
                buf.clear();
            }
            return false;
        }
        h_header_text = buf.substr(0, p);
        buf.erase(0, p + h_message.size());
        const size_t c = h_header_text.find(h_channel);
        if (c == std::string::npos) {
            not_harmony(d, h_header_text + std::string(h_message) + buf);
            buf.clear();
            return false;
        }
        size_t e = c + h_channel.size();
        while (e < h_header_text.size() && std::isalpha(static_cast<unsigned char>(h_header_text[e]))) ++e;
        h_channel_name = h_header_text.substr(c + h_channel.size(), e - c - h_channel.size());
        h_recipient.clear();
        const size_t to = h_header_text.find("to=");
        if (to != std::string::npos) {
            size_t r = to + 3;
            while (r < h_header_text.size() && !is_space(h_header_text[r]) && h_header_text[r] != '<') ++r;
            h_recipient = h_header_text.substr(to + 3, r - to - 3);
        }
        m = mode::h_body;
        return true;
    }

    // Not harmony after all: this and everything after it is plain text.
    void not_harmony(output_delta & d, const std::string & raw) {
        content(d, raw);
        m = mode::raw;
    }

    bool h_is_call() const { return h_recipient.rfind("functions.", 0) == 0 && fmt.tools == tool_format::harmony; }

    bool step_h_body(output_delta & d, bool at_end) {
        const found f = first_of(buf, {h_end, h_return, h_call});
        const bool closed = f.pos != std::string::npos;
        if (h_is_call()) {
            if (!closed && !at_end) return false;
            const std::string body = closed ? buf.substr(0, f.pos) : buf;
            const ojson args = ojson::parse(trim(body), nullptr, false);
            if (args.is_discarded() || !add_call(d, h_recipient.substr(10), args)) {
                content(d, h_header_text);
                content(d, h_message);
                content(d, body);
                if (closed) content(d, f.marker);
            }
            buf.erase(0, closed ? f.pos + f.marker.size() : buf.size());
            m = mode::h_header;
            return closed;
        }
        const bool is_reasoning = h_channel_name == "analysis";
        const size_t upto = closed ? f.pos : at_end ? buf.size() : buf.size() - held_tail(buf, {h_end, h_return, h_call});
        const std::string_view piece = std::string_view(buf).substr(0, upto);
        if (is_reasoning) reasoning(d, piece);
        else content(d, piece);
        buf.erase(0, closed ? f.pos + f.marker.size() : upto);
        if (closed) m = mode::h_header;
        return closed;
    }

    output_delta run(bool at_end) {
        output_delta d;
        for (;;) {
            bool again = false;
            switch (m) {
                case mode::start: again = step_start(d, at_end); break;
                case mode::content: again = step_content(d, at_end); break;
                case mode::think: again = step_think(d, at_end); break;
                case mode::hermes_call: again = step_hermes_call(d, at_end); break;
                case mode::llama3_json: again = step_llama3_json(d, at_end); break;
                case mode::h_header: again = step_h_header(d, at_end); break;
                case mode::h_body: again = step_h_body(d, at_end); break;
                case mode::raw:
                    content(d, buf);
                    buf.clear();
                    break;
            }
            if (!again) break;
        }
        return d;
    }
};

output_parser::output_parser(output_format format) : s_(std::make_unique<state>(std::move(format))) {}
output_parser::~output_parser() = default;
output_parser::output_parser(output_parser &&) noexcept = default;
output_parser & output_parser::operator=(output_parser &&) noexcept = default;

output_delta output_parser::push(std::string_view text) {
    s_->buf.append(text);
    return s_->run(false);
}

output_delta output_parser::finish() { return s_->run(true); }

int32_t output_parser::n_tool_calls() const { return s_->n_calls; }

parsed_output parse_output(const output_format & format, std::string_view text) {
    output_parser p(format);
    parsed_output out;
    auto take = [&](output_delta d) {
        out.content += d.content;
        out.reasoning_content += d.reasoning;
        for (auto & c : d.tool_calls) out.tool_calls.push_back({std::move(c.id), std::move(c.name), std::move(c.arguments)});
    };
    take(p.push(text));
    take(p.finish());
    return out;
}

}  // namespace skippy::chat
