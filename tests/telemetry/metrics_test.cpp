#include "telemetry/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

namespace skippy::telemetry {
namespace {

bool has_line(const std::string & text, const std::string & line) {
    return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

std::vector<metric> all_metrics() {
    std::vector<metric> out;
    for (int i = 0; i < static_cast<int>(metric::count); ++i) out.push_back(static_cast<metric>(i));
    return out;
}

TEST(MetricTable, NamesAreUniqueAndUnderSkippy) {
    std::set<std::string_view> names;
    for (metric m : all_metrics()) {
        const metric_info & mi = info(m);
        EXPECT_TRUE(names.insert(mi.name).second) << mi.name;
        EXPECT_EQ(mi.name.substr(0, 7), "skippy_");
        EXPECT_FALSE(mi.help.empty()) << mi.name;
        EXPECT_FALSE(mi.unit.empty()) << mi.name;
    }
}

TEST(MetricTable, DocsListEveryMetric) {
    std::ifstream f(std::string(SKIPPY_SOURCE_DIR) + "/docs/metrics.md");
    ASSERT_TRUE(f) << "docs/metrics.md missing";
    // The rows of the metrics table: lines "| `skippy_...` | type | ...".
    std::vector<std::string> doc_names;
    std::vector<std::string> doc_types;
    const std::regex row(R"(^\| `(skippy_[a-z0-9_]+)` \| ([a-z]+) \|)");
    std::string line;
    while (std::getline(f, line)) {
        std::smatch m;
        if (std::regex_search(line, m, row)) {
            doc_names.push_back(m[1]);
            doc_types.push_back(m[2]);
        }
    }
    // Code -> docs and docs -> code, in the same order, with the same type.
    const std::vector<metric> code = all_metrics();
    for (size_t i = 0; i < std::max(code.size(), doc_names.size()); ++i) {
        const std::string in_code = i < code.size() ? std::string(info(code[i]).name) : "(none)";
        const std::string in_docs = i < doc_names.size() ? doc_names[i] : "(none)";
        EXPECT_EQ(in_docs, in_code) << "row " << i << " of the table in docs/metrics.md";
        if (i < code.size() && i < doc_types.size()) {
            const metric_type t = info(code[i]).type;
            const char * type = t == metric_type::counter ? "counter" : t == metric_type::gauge ? "gauge" : "histogram";
            EXPECT_EQ(doc_types[i], type) << in_code;
        }
    }
}

TEST(MetricsRegistry, CountersAddAndGaugesSet) {
    metrics_registry r;
    r.add(metric::prompt_tokens, 5);
    r.add(metric::prompt_tokens, 7);
    r.set(metric::lanes_busy, 3);
    r.set(metric::lanes_busy, 1);
    r.add(metric::http_requests, 1, {"health", "200"});
    r.add(metric::http_requests, 2, {"health", "200"});
    EXPECT_EQ(r.value(metric::prompt_tokens), 12);
    EXPECT_EQ(r.value(metric::lanes_busy), 1);
    EXPECT_EQ(r.value(metric::http_requests, {"health", "200"}), 3);
    EXPECT_FALSE(r.value(metric::http_requests, {"health", "404"}).has_value());

    const std::string text = r.render_prometheus();
    EXPECT_TRUE(has_line(text, "skippy_prompt_tokens_total 12")) << text;
    EXPECT_TRUE(has_line(text, "skippy_lanes_busy 1"));
    EXPECT_TRUE(has_line(text, "skippy_http_requests_total{endpoint=\"health\",code=\"200\"} 3"));
    EXPECT_TRUE(has_line(text, "# TYPE skippy_prompt_tokens_total counter"));
    EXPECT_TRUE(has_line(text, "# TYPE skippy_lanes_busy gauge"));
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeWithInfSumAndCount) {
    metrics_registry r;
    // Buckets of skippy_queue_wait_seconds: 0.001, 0.005, 0.01, ...
    r.observe(metric::queue_wait, 0.0005);
    r.observe(metric::queue_wait, 0.001);  // on a bound: counts in that bucket (le)
    r.observe(metric::queue_wait, 0.007);
    r.observe(metric::queue_wait, 1000);   // above every bound: only +Inf
    const std::string text = r.render_prometheus();
    EXPECT_TRUE(has_line(text, "# TYPE skippy_queue_wait_seconds histogram"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_bucket{le=\"0.001\"} 2")) << text;
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_bucket{le=\"0.005\"} 2"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_bucket{le=\"0.01\"} 3"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_bucket{le=\"60\"} 3"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_bucket{le=\"+Inf\"} 4"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_count 4"));
    EXPECT_TRUE(has_line(text, "skippy_queue_wait_seconds_sum " + format_metric_value(0.0005 + 0.001 + 0.007 + 1000.0)));
    EXPECT_EQ(r.value(metric::queue_wait), 4);
}

TEST(MetricsRegistry, EveryFamilyHasHelpAndTypeEvenWithoutSamples) {
    metrics_registry r;
    const std::string text = r.render_prometheus();
    for (metric m : all_metrics()) {
        EXPECT_NE(text.find("# HELP " + std::string(info(m).name) + " "), std::string::npos) << info(m).name;
        EXPECT_NE(text.find("# TYPE " + std::string(info(m).name) + " "), std::string::npos) << info(m).name;
    }
    // Unlabelled counters and gauges start at 0; labelled families have no series yet.
    EXPECT_TRUE(has_line(text, "skippy_generated_tokens_total 0"));
    EXPECT_EQ(text.find("skippy_cache_hits_total{"), std::string::npos);
}

TEST(MetricsRegistry, EverySampleLineFollowsTheTextFormat) {
    metrics_registry r;
    r.add(metric::http_requests, 1, {"odd \"name\"\\with\nnewline", "200"});
    r.observe(metric::time_to_first_token, 0.02);
    r.set(metric::build_info, 1, {"0.1.0"});
    const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*",?)*\})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$)");
    std::istringstream in(r.render_prometheus());
    std::string line;
    int n_samples = 0;
    while (std::getline(in, line)) {
        if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
        EXPECT_TRUE(std::regex_match(line, sample)) << "bad sample line: " << line;
        ++n_samples;
    }
    EXPECT_GT(n_samples, 20);
}

TEST(MetricsRegistry, LabelValuesAndHelpAreEscaped) {
    EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    EXPECT_EQ(escape_help("x\\y\nz\""), "x\\\\y\\nz\"");
}

TEST(MetricsRegistry, ValuesFormatAsPrometheusReadsThem) {
    EXPECT_EQ(format_metric_value(0), "0");
    EXPECT_EQ(format_metric_value(42), "42");
    EXPECT_EQ(format_metric_value(-3), "-3");
    EXPECT_EQ(format_metric_value(0.25), "0.25");
    EXPECT_EQ(format_metric_value(1e300), "1e+300");
    EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
    EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
    EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
}

TEST(MetricsRegistry, StagesOnlyRenderCarriesBuildInfoAndStageFamilies) {
    metrics_registry r;
    r.set(metric::build_info, 1, {"v"});
    r.add(metric::prompt_tokens, 3);
    r.add_stage_provider([] {
        stage_snapshot s;
        s.stage = 2;
        s.cache_tiers.push_back({"resident", 1, 2, 0, 0, 0});
        s.kv_pool = kv_pool_snapshot{8, 1, 16};
        return std::vector<stage_snapshot>{s};
    });
    const std::string text = r.render_prometheus(render_scope::stages_only);
    EXPECT_TRUE(has_line(text, "skippy_build_info{version=\"v\"} 1")) << text;
    EXPECT_TRUE(has_line(text, "skippy_cache_misses_total{stage=\"2\",tier=\"resident\"} 2"));
    EXPECT_TRUE(has_line(text, "skippy_kv_pool_blocks{stage=\"2\"} 8"));
    EXPECT_EQ(text.find("skippy_prompt_tokens_total"), std::string::npos) << "a front-end family in a stage render";
    EXPECT_EQ(text.find("skippy_lanes"), std::string::npos);
    for (metric m : all_metrics()) {
        const bool expected = m == metric::build_info || from_stage_snapshots(m);
        EXPECT_EQ(text.find("# TYPE " + std::string(info(m).name) + " ") != std::string::npos, expected) << info(m).name;
    }
}

TEST(MetricsRegistry, StageSnapshotsArePulledAtEachRender) {
    metrics_registry r;
    int64_t hits = 1;
    r.add_stage_provider([&] {
        stage_snapshot s0;
        s0.stage = 0;
        s0.cache_tiers.push_back({"resident", hits, 2, 3, 4096, 5});
        s0.kv_pool = kv_pool_snapshot{100, 25, 1024};
        stage_snapshot s1;
        s1.stage = 1;
        s1.cache_tiers.push_back({"exact_state", 7, 0, 0, 10, 1});
        return std::vector<stage_snapshot>{s0, s1};
    });
    std::string text = r.render_prometheus();
    EXPECT_TRUE(has_line(text, "skippy_cache_hits_total{stage=\"0\",tier=\"resident\"} 1")) << text;
    EXPECT_TRUE(has_line(text, "skippy_cache_misses_total{stage=\"0\",tier=\"resident\"} 2"));
    EXPECT_TRUE(has_line(text, "skippy_cache_evictions_total{stage=\"0\",tier=\"resident\"} 3"));
    EXPECT_TRUE(has_line(text, "skippy_cache_bytes{stage=\"0\",tier=\"resident\"} 4096"));
    EXPECT_TRUE(has_line(text, "skippy_cache_entries{stage=\"0\",tier=\"resident\"} 5"));
    EXPECT_TRUE(has_line(text, "skippy_cache_hits_total{stage=\"1\",tier=\"exact_state\"} 7"));
    EXPECT_TRUE(has_line(text, "skippy_kv_pool_blocks{stage=\"0\"} 100"));
    EXPECT_TRUE(has_line(text, "skippy_kv_pool_used_blocks{stage=\"0\"} 25"));
    EXPECT_TRUE(has_line(text, "skippy_kv_pool_bytes{stage=\"0\"} 102400"));
    EXPECT_TRUE(has_line(text, "skippy_kv_pool_used_bytes{stage=\"0\"} 25600"));
    hits = 9;
    text = r.render_prometheus();
    EXPECT_TRUE(has_line(text, "skippy_cache_hits_total{stage=\"0\",tier=\"resident\"} 9"));
}

}  // namespace
}  // namespace skippy::telemetry
