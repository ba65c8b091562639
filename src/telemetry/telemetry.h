// Structured decision events, counters and histograms, Prometheus text exposition.
//
// Events are what a stage decided and why (cache lookups and records, DESIGN §6):
// written as JSON lines, one per event:
//   {"ts_us": N, "event": NAME, "stage": I, "attrs": {...}}
// Metrics are process-wide counters, gauges and histograms with labels, rendered in
// the Prometheus text format for /metrics (names under skippy_, see docs/metrics.md and
// telemetry/metrics.h).
#pragma once

#include "base/status.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace skippy::telemetry {

using attr_value = std::variant<int64_t, double, bool, std::string>;

enum class event_level { summary = 1, debug = 2 };

struct event {
    std::string                                      name;   // e.g. "stage.binary_kv_lookup_decision"
    int32_t                                          stage = 0;
    event_level                                      level = event_level::summary;
    std::vector<std::pair<std::string, attr_value>>  attrs;  // e.g. {"skippy.kv.decision", "restore_hit"}

    event & attr(std::string key, attr_value v) { attrs.emplace_back(std::move(key), std::move(v)); return *this; }
};

// Receives events. Implementations must be thread-safe: stages emit from many threads.
class event_sink_i {
public:
    virtual ~event_sink_i() = default;
    virtual void emit(const event & e) = 0;
};

using event_sink_ptr = std::shared_ptr<event_sink_i>;

// Emits `e` when there is a sink (a null sink means telemetry is off).
inline void emit(const event_sink_ptr & sink, const event & e) {
    if (sink) sink->emit(e);
}

// What a sink keeps: off nothing, summary the summary events, debug every event.
enum class telemetry_level { off = 0, summary = 1, debug = 2 };

// "off" | "summary" | "debug"; anything else is invalid_argument.
result<telemetry_level> parse_telemetry_level(std::string_view name);
std::string_view telemetry_level_name(telemetry_level level);

// Microseconds since the Unix epoch (the ts_us of an event emitted now).
int64_t now_unix_us();

// One event as one JSON object, without a newline:
//   {"ts_us":N,"event":NAME,"stage":I,"attrs":{KEY:VALUE,...}}
// Attribute values keep their JSON type (integer, number, boolean, string); a later
// attribute with the same key replaces an earlier one; invalid UTF-8 in strings becomes
// U+FFFD; non-finite doubles become null.
std::string format_event_json(const event & e, int64_t ts_us);

// Writes each kept event as one JSON line. Thread-safe: lines never interleave.
class json_lines_sink final : public event_sink_i {
public:
    using line_writer = std::function<void(std::string_view line_with_newline)>;

    // Keeps events at or below `level` and hands each line to `write` (under a lock).
    json_lines_sink(line_writer write, telemetry_level level);

    // Appends to the file at `path` (created if missing); io error when it cannot be
    // opened. Lines are flushed as they are written, so the file can be tailed.
    static result<std::shared_ptr<json_lines_sink>> open_file(const std::string & path, telemetry_level level);

    telemetry_level level() const { return level_; }
    bool keeps(event_level level) const { return static_cast<int>(level) <= static_cast<int>(level_); }

    void emit(const event & e) override;

private:
    line_writer     write_;
    telemetry_level level_;
    std::mutex      mutex_;
};

}  // namespace skippy::telemetry
