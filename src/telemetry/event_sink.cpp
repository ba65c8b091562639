#include "telemetry/telemetry.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

namespace skippy::telemetry {

result<telemetry_level> parse_telemetry_level(std::string_view name) {
    if (name == "off") return telemetry_level::off;
    if (name == "summary") return telemetry_level::summary;
    if (name == "debug") return telemetry_level::debug;
    return make_error(error_code::invalid_argument,
                      "telemetry level '" + std::string(name) + "' is not one of off, summary, debug");
}

std::string_view telemetry_level_name(telemetry_level level) {
    switch (level) {
        case telemetry_level::off: return "off";
        case telemetry_level::summary: return "summary";
        case telemetry_level::debug: return "debug";
    }
    return "off";
}

int64_t now_unix_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string format_event_json(const event & e, int64_t ts_us) {
    nlohmann::ordered_json attrs = nlohmann::ordered_json::object();
    for (const auto & attr : e.attrs) {
        // Named references, not a structured binding: clang before 16 refuses to
        // capture a structured binding in a lambda.
        const std::string & key = attr.first;
        const attr_value & value = attr.second;
        std::visit(
            [&](const auto & v) {
                using T = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<T, double>) {
                    attrs[key] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
                } else {
                    attrs[key] = v;
                }
            },
            value);
    }
    nlohmann::ordered_json j;
    j["ts_us"] = ts_us;
    j["event"] = e.name;
    j["stage"] = e.stage;
    j["attrs"] = std::move(attrs);
    // replace: a string attribute built from model output may hold invalid UTF-8.
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

json_lines_sink::json_lines_sink(line_writer write, telemetry_level level) : write_(std::move(write)), level_(level) {}

result<std::shared_ptr<json_lines_sink>> json_lines_sink::open_file(const std::string & path, telemetry_level level) {
    std::FILE * f = std::fopen(path.c_str(), "a");
    if (!f) return make_error(error_code::io, "cannot open telemetry file '" + path + "' for appending");
    // The writer owns the FILE; it closes when the last copy of the function goes.
    std::shared_ptr<std::FILE> file(f, [](std::FILE * p) { std::fclose(p); });
    auto write = [file](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), file.get());
        std::fflush(file.get());
    };
    return std::make_shared<json_lines_sink>(std::move(write), level);
}

void json_lines_sink::emit(const event & e) {
    if (!keeps(e.level)) return;
    std::string line = format_event_json(e, now_unix_us());
    line.push_back('\n');
    std::lock_guard<std::mutex> lock(mutex_);
    write_(line);
}

}  // namespace skippy::telemetry
