// A Jinja2 interpreter for the chat templates models ship in their GGUF files
// (tokenizer.chat_template), rendering byte for byte what Hugging Face transformers
// renders: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// the loop controls extension ({% break %}, {% continue %}), a `tojson` that does not
// escape HTML (json.dumps with ensure_ascii=False, indent, separators, sort_keys), and
// the globals raise_exception(msg) and strftime_now(fmt).
//
// The supported subset (statements, expressions, filters, tests, methods) and the
// known differences from jinja2 are specified in docs/chat-templates.md ("Jinja
// templates"). Anything outside the subset fails to parse with an error that names it.
//
// A template is file input: parsing and rendering are bounded (source size, nesting,
// output size, loop iterations, call depth, total work) and never crash or hang.
//
// Thread safety: a compiled_template is immutable after parse; any number of threads may
// render it at once.
#pragma once

#include "base/status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace skippy::jinja {

namespace detail { struct program; }

// Bounds on parse and render. Exceeding one is an error, never a crash.
struct limits {
    size_t   max_source_bytes = 1 << 20;      // template source size (parse)
    int      max_nesting = 100;               // nested blocks, brackets and operators (parse)
    size_t   max_output_bytes = 16 << 20;     // the rendered text, and any one string built on the way
    size_t   max_items = 1 << 20;             // elements of any one list or dict built
    uint64_t max_loop_iterations = 1 << 20;   // for-loop iterations over the whole render
    int      max_call_depth = 64;             // nested macro calls
    uint64_t max_work = uint64_t(1) << 28;    // evaluation steps + bytes and items built, per render
};

// Lexer settings of the environment. The defaults are Hugging Face's.
struct parse_options {
    bool   trim_blocks = true;    // drop the first newline after a block tag or comment
    bool   lstrip_blocks = true;  // drop spaces and tabs before a block tag or comment on its line
    limits lim;
};

struct render_options {
    limits lim;
    // strftime_now's clock: the local broken-down time to format. Empty: the system
    // clock in the local time zone (what transformers does). Tests inject a fixed time.
    std::function<std::tm()> local_time;
};

class compiled_template {
public:
    // Parses a template.
    // Errors (the message starts with "line L, column C: " and names the construct):
    //   invalid_data — a syntax error, an unknown tag, filter or test;
    //   unsupported  — valid Jinja2 outside our subset ({% extends %}, {% call %}, the
    //                  groupby filter ...), or a template larger than max_source_bytes.
    static result<compiled_template> parse(std::string_view source, const parse_options & opts = {});

    // Renders with the variables of `context` (a JSON object: messages, tools,
    // add_generation_prompt, bos_token, eos_token, enable_thinking ...). JSON objects
    // become dicts in their key order, arrays lists, integers int, other numbers float.
    // REQUIRES: context is an object (else invalid_argument).
    // Errors:
    //   invalid_argument — the template called raise_exception(msg); the message is msg;
    //   runtime          — a render error jinja2 would raise too (an undefined value
    //                      used, a type error, a bad filter argument ...), or a limit of
    //                      render_options::lim exceeded; prefixed with "line L, column C: ".
    result<std::string> render(const nlohmann::ordered_json & context, const render_options & opts = {}) const;

private:
    explicit compiled_template(std::shared_ptr<const detail::program> p) : program_(std::move(p)) {}
    std::shared_ptr<const detail::program> program_;
};

}  // namespace skippy::jinja
