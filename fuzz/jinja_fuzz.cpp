// libFuzzer target for the template interpreter (src/jinja).
//
// Input: template source, optionally followed by a NUL byte and a JSON object to render
// it with (otherwise a fixed conversation with tools, tool calls and results). Beyond
// "no crash, no hang, no sanitizer report", the API's promises are checked:
//   - a failed parse is invalid_data or unsupported, positioned ("line L, column C: ");
//   - rendering is deterministic (twice the same result);
//   - a render's output fits max_output_bytes; a failed render is invalid_argument
//     (raise_exception), runtime or unsupported.
// Limits are small so that each input runs in milliseconds.
#include "jinja/jinja.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

#define FUZZ_CHECK(cond)                                                                              \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            std::fprintf(stderr, "jinja_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                             \
        }                                                                                             \
    } while (0)

const char * k_default_context = R"({
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Zürich? 🌦"},
    {"role": "assistant", "content": "", "reasoning_content": "call the tool", "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "<think>\nok\n</think>\n\nSunny, 21.5 °C."},
    {"role": "user", "content": ""}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Forecast.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Zürich", "Oslo"]},
      "days": {"type": "array", "items": {"type": "integer"}}}, "required": ["city"]}}}],
  "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>",
  "builtin_tools": ["browser", "python"], "reasoning_effort": "low"
})";

bool starts_with(const std::string & s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace skippy;
    std::string_view in(reinterpret_cast<const char *>(data), size);
    size_t nul = in.find('\0');
    std::string_view source = in.substr(0, nul);

    static const nlohmann::ordered_json default_context = nlohmann::ordered_json::parse(k_default_context);
    nlohmann::ordered_json context = default_context;
    if (nul != std::string_view::npos) {
        auto j = nlohmann::ordered_json::parse(in.substr(nul + 1), nullptr, false);
        if (j.is_object()) context = std::move(j);
    }

    jinja::parse_options po;
    po.lim.max_source_bytes = 1 << 16;
    auto t = jinja::compiled_template::parse(source, po);
    if (!t.is_ok()) {
        error_code c = t.error().code();
        FUZZ_CHECK(c == error_code::invalid_data || c == error_code::unsupported);
        FUZZ_CHECK(starts_with(t.error().message(), "line ") || starts_with(t.error().message(), "template of "));
        return 0;
    }

    jinja::render_options ro;
    ro.lim.max_output_bytes = 1 << 16;
    ro.lim.max_items = 1 << 12;
    ro.lim.max_loop_iterations = 1 << 12;
    ro.lim.max_call_depth = 16;
    ro.lim.max_work = 1 << 20;
    ro.local_time = [] {
        std::tm tm{};
        tm.tm_year = 125;
        tm.tm_mon = 2;
        tm.tm_mday = 14;
        tm.tm_wday = 5;
        tm.tm_yday = 72;
        return tm;
    };
    auto first = t->render(context, ro);
    auto second = t->render(context, ro);
    FUZZ_CHECK(first.is_ok() == second.is_ok());
    if (first.is_ok()) {
        FUZZ_CHECK(*first == *second);
        FUZZ_CHECK(first->size() <= ro.lim.max_output_bytes);
    } else {
        error_code c = first.error().code();
        FUZZ_CHECK(c == error_code::invalid_argument || c == error_code::runtime || c == error_code::unsupported);
        FUZZ_CHECK(c == second.error().code() && first.error().message() == second.error().message());
    }
    return 0;
}
