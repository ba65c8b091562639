#include "jinja/jinja.h"

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/py_text.h"
#include "jinja/renderer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace skippy::jinja {

namespace detail {

std::string program::where(uint32_t pos) const {
    auto it = std::upper_bound(line_starts.begin(), line_starts.end(), static_cast<size_t>(pos));
    size_t line = static_cast<size_t>(it - line_starts.begin());  // 1-based
    size_t start = line_starts[line - 1];
    size_t column = text::length(std::string_view(source).substr(start, std::min<size_t>(pos, source.size()) - start)) + 1;
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace detail

result<compiled_template> compiled_template::parse(std::string_view source, const parse_options & opts) {
    if (source.size() > opts.lim.max_source_bytes) {
        return make_error(error_code::unsupported, "template of " + std::to_string(source.size()) +
                                                       " bytes exceeds max_source_bytes");
    }
    auto prog = std::make_shared<detail::program>();
    prog->source = detail::normalize_source(source);
    prog->line_starts.push_back(0);
    for (size_t i = 0; i < prog->source.size(); ++i)
        if (prog->source[i] == '\n') prog->line_starts.push_back(i + 1);
    SKIPPY_ASSIGN_OR_RETURN(auto tokens, detail::lex(*prog, opts));
    SKIPPY_TRY(detail::parse_program(*prog, std::move(tokens), opts));
    return compiled_template(std::move(prog));
}

result<std::string> compiled_template::render(const nlohmann::ordered_json & context, const render_options & opts) const {
    if (!context.is_object()) return make_error(error_code::invalid_argument, "the render context must be a JSON object");
    detail::renderer r(*program_, opts);
    return r.run(context);
}

}  // namespace skippy::jinja
