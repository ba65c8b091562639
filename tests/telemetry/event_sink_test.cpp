#include "telemetry/telemetry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <thread>

namespace skippy::telemetry {
namespace {

event make_event(std::string name, event_level level = event_level::summary) {
    event e;
    e.name = std::move(name);
    e.level = level;
    return e;
}

TEST(TelemetryLevel, ParsesTheThreeNamesAndRefusesOthers) {
    EXPECT_EQ(*parse_telemetry_level("off"), telemetry_level::off);
    EXPECT_EQ(*parse_telemetry_level("summary"), telemetry_level::summary);
    EXPECT_EQ(*parse_telemetry_level("debug"), telemetry_level::debug);
    auto bad = parse_telemetry_level("verbose");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.error().code(), error_code::invalid_argument);
    EXPECT_EQ(telemetry_level_name(telemetry_level::debug), "debug");
}

TEST(EventJson, HasTheDocumentedShapeAndKeepsAttributeTypes) {
    event e = make_event("stage.binary_kv_lookup_decision");
    e.stage = 2;
    e.attr("skippy.kv.decision", std::string("restore_hit"))
        .attr("skippy.kv.tokens", int64_t{48})
        .attr("skippy.kv.ms", 1.5)
        .attr("skippy.kv.full", true);
    const auto j = nlohmann::json::parse(format_event_json(e, 1234567));
    EXPECT_EQ(j["ts_us"], 1234567);
    EXPECT_EQ(j["event"], "stage.binary_kv_lookup_decision");
    EXPECT_EQ(j["stage"], 2);
    EXPECT_EQ(j["attrs"]["skippy.kv.decision"], "restore_hit");
    EXPECT_TRUE(j["attrs"]["skippy.kv.tokens"].is_number_integer());
    EXPECT_EQ(j["attrs"]["skippy.kv.tokens"], 48);
    EXPECT_DOUBLE_EQ(j["attrs"]["skippy.kv.ms"].get<double>(), 1.5);
    EXPECT_EQ(j["attrs"]["skippy.kv.full"], true);
}

TEST(EventJson, InvalidUtf8AndNonFiniteNumbersStillGiveValidJson) {
    event e = make_event("x");
    e.attr("text", std::string("ab\xff\xfe"));
    e.attr("nan", std::nan(""));
    const std::string line = format_event_json(e, 0);
    const auto j = nlohmann::json::parse(line);  // throws on invalid JSON / UTF-8
    EXPECT_EQ(j["attrs"]["text"], "ab\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_TRUE(j["attrs"]["nan"].is_null());
}

TEST(JsonLinesSink, KeepsOnlyEventsAtOrBelowItsLevel) {
    std::vector<std::string> lines;
    json_lines_sink summary([&](std::string_view l) { lines.emplace_back(l); }, telemetry_level::summary);
    summary.emit(make_event("kept", event_level::summary));
    summary.emit(make_event("dropped", event_level::debug));
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(lines[0])["event"], "kept");
    EXPECT_EQ(lines[0].back(), '\n');

    lines.clear();
    json_lines_sink off([&](std::string_view l) { lines.emplace_back(l); }, telemetry_level::off);
    off.emit(make_event("a", event_level::summary));
    EXPECT_TRUE(lines.empty());

    json_lines_sink debug([&](std::string_view l) { lines.emplace_back(l); }, telemetry_level::debug);
    debug.emit(make_event("a", event_level::summary));
    debug.emit(make_event("b", event_level::debug));
    EXPECT_EQ(lines.size(), 2u);
}

TEST(JsonLinesSink, LinesFromManyThreadsNeverInterleave) {
    std::string all;  // the writer runs under the sink's lock
    auto sink = std::make_shared<json_lines_sink>([&](std::string_view l) { all.append(l); }, telemetry_level::debug);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 200; ++i) {
                event e = make_event("thread." + std::to_string(t));
                e.attr("i", int64_t{i});
                emit(sink, e);
            }
        });
    }
    for (auto & th : threads) th.join();
    size_t n = 0, start = 0;
    while (start < all.size()) {
        const size_t end = all.find('\n', start);
        ASSERT_NE(end, std::string::npos);
        EXPECT_TRUE(nlohmann::json::accept(all.substr(start, end - start)));
        ++n;
        start = end + 1;
    }
    EXPECT_EQ(n, 800u);
}

TEST(JsonLinesSink, FileSinkAppendsAndAnUnwritablePathIsAnIoError) {
    const std::string path = ::testing::TempDir() + "skippy_events_test.jsonl";
    std::remove(path.c_str());
    {
        auto sink = json_lines_sink::open_file(path, telemetry_level::summary);
        ASSERT_TRUE(sink.is_ok()) << sink.error().to_string();
        (*sink)->emit(make_event("one"));
    }
    {
        auto sink = json_lines_sink::open_file(path, telemetry_level::summary);
        ASSERT_TRUE(sink.is_ok());
        (*sink)->emit(make_event("two"));
    }
    std::FILE * f = std::fopen(path.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    const size_t n = std::fread(buf, 1, sizeof(buf), f);
    std::fclose(f);
    const std::string text(buf, n);
    EXPECT_NE(text.find("\"one\""), std::string::npos);
    EXPECT_NE(text.find("\"two\""), std::string::npos);
    std::remove(path.c_str());

    auto bad = json_lines_sink::open_file("/nonexistent-dir/x/events.jsonl", telemetry_level::summary);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.error().code(), error_code::io);
}

}  // namespace
}  // namespace skippy::telemetry
