// Process metrics: counters, gauges and fixed-bucket histograms with label sets,
// rendered in the Prometheus text exposition format (version 0.0.4) for /metrics.
//
// Every metric skippy exports is declared once, in the `metric` enum and its parallel
// table in metrics.cpp (name, type, unit, help, label names, buckets); docs/metrics.md
// lists the same table for people. Code refers to metrics by enum, never by string.
//
// Two sources feed the registry:
//   - the front end records request numbers as they happen (add / set / observe);
//   - stages report cache and KV-pool numbers as a stage_snapshot, pulled from the
//     registered providers each time the registry renders (a scrape), so a stage keeps
//     its own counters and nothing pushes on its hot path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::telemetry {

enum class metric_type { counter, gauge, histogram };

// Known metrics. Keep in the order of the table in metrics.cpp and docs/metrics.md.
enum class metric : uint16_t {
    build_info,
    http_requests,
    generation_requests,
    prompt_tokens,
    cached_prompt_tokens,
    generated_tokens,
    time_to_first_token,
    time_per_output_token,
    request_duration,
    queue_wait,
    queue_rejections,
    queue_waiting,
    queue_waiting_peak,
    queue_capacity,
    lanes,
    lanes_busy,
    lanes_busy_peak,
    cache_hits,        // from stage snapshots
    cache_misses,      // from stage snapshots
    cache_evictions,   // from stage snapshots
    cache_bytes,       // from stage snapshots
    cache_entries,     // from stage snapshots
    kv_pool_blocks,    // from stage snapshots
    kv_pool_used_blocks,
    kv_pool_bytes,
    kv_pool_used_bytes,
    step_lanes,        // from stage snapshots
    step_tokens,       // from stage snapshots
    step_queue_wait,   // from stage snapshots
    count,
};

struct metric_info {
    std::string_view                  name;  // full Prometheus name, e.g. "skippy_prompt_tokens_total"
    metric_type                       type;
    std::string_view                  unit;  // "tokens", "seconds", "bytes", "requests", ...
    std::string_view                  help;
    std::span<const std::string_view> labels;   // label names, in the order values are passed
    std::span<const double>           buckets;  // histograms: ascending upper bounds (+Inf implied)
};

// REQUIRES: m != metric::count.
const metric_info & info(metric m);

// True for the families filled from stage snapshots (skippy_cache_*, skippy_kv_pool_*,
// skippy_stage_step_*).
bool from_stage_snapshots(metric m);

// What a render carries: every family (skippy serve), or only skippy_build_info and the
// stage-snapshot families (a stage process, skippy serve-stage --metrics-port).
enum class render_scope { all, stages_only };

// Cache numbers of one tier of one stage ("resident", "exact_state", "activation").
// Counters are cumulative since the stage started.
struct cache_tier_snapshot {
    std::string tier;
    int64_t     hits = 0;
    int64_t     misses = 0;
    int64_t     evictions = 0;
    int64_t     bytes = 0;    // bytes held now
    int64_t     entries = 0;  // entries held now
};

struct kv_pool_snapshot {
    int64_t blocks = 0;       // blocks in the pool
    int64_t used_blocks = 0;  // blocks referenced by a lane or a cache entry
    int64_t block_bytes = 0;  // bytes per block (all layers of the stage)
};

// A histogram a stage keeps itself, cumulative since it started: counts per bucket of
// the metric's table (not cumulative, without +Inf), their sum and count.
struct histogram_snapshot {
    std::vector<uint64_t> bucket_counts;
    double                sum = 0;
    uint64_t              count = 0;
};

// What a stage's lane loop did: one observation per step (lanes, tokens) and one per
// lane in a step (its queue wait).
struct step_snapshot {
    histogram_snapshot lanes;       // skippy_stage_step_lanes
    histogram_snapshot tokens;      // skippy_stage_step_tokens
    histogram_snapshot queue_wait;  // skippy_stage_step_queue_wait_seconds
};

// What one stage reports at scrape time.
struct stage_snapshot {
    int32_t                          stage = 0;
    std::vector<cache_tier_snapshot> cache_tiers;
    std::optional<kv_pool_snapshot>  kv_pool;
    std::optional<step_snapshot>     steps;
};

// Records a stage's steps into the step_* histograms' buckets. Thread-safe.
class step_recorder {
public:
    step_recorder();
    // One step of n_lanes lanes and n_tokens tokens; queue_wait_s per lane, in seconds.
    void observe(int64_t n_lanes, int64_t n_tokens, std::span<const double> queue_wait_s);
    step_snapshot snapshot() const;

private:
    mutable std::mutex mutex_;
    step_snapshot      steps_;
};

// Returns the snapshots of the stages it knows (a chain may report all its stages).
// Called from the scraping thread; must be thread-safe and quick.
using stage_snapshot_provider = std::function<std::vector<stage_snapshot>()>;

using label_values = std::vector<std::string>;

// Thread-safe. Label values must come in the order of info(m).labels, one per name
// (checked by assert: a wrong count is a bug in our code, not outside input).
class metrics_registry {
public:
    metrics_registry();

    // Counter += v. REQUIRES: a counter, v >= 0.
    void add(metric m, double v, const label_values & labels = {});
    // Gauge = v. REQUIRES: a gauge.
    void set(metric m, double v, const label_values & labels = {});
    // One histogram observation. REQUIRES: a histogram.
    void observe(metric m, double v, const label_values & labels = {});

    // Registers a provider whose snapshots are merged into every render.
    void add_stage_provider(stage_snapshot_provider provider);

    // The text exposition of every known metric: # HELP and # TYPE for each family
    // (even one without samples yet), then its samples, sorted by label values.
    // Unlabelled counters and gauges without samples render as 0.
    std::string render_prometheus(render_scope scope = render_scope::all) const;

    // For tests: a counter's or gauge's value, a histogram's observation count;
    // nullopt when that series has no sample yet.
    std::optional<double> value(metric m, const label_values & labels = {}) const;

private:
    struct series {
        double              value = 0;    // counters, gauges
        double              sum = 0;      // histograms
        uint64_t            count = 0;    // histograms
        std::vector<uint64_t> bucket_counts;  // histograms: per bucket, not cumulative
    };
    using family = std::map<label_values, series>;

    series & series_of(metric m, const label_values & labels);  // REQUIRES: mutex_ held
    static void merge_snapshots(const std::vector<stage_snapshot> & snaps, std::vector<family> & families);

    mutable std::mutex                    mutex_;
    std::vector<family>                   families_;  // indexed by metric
    std::vector<stage_snapshot_provider>  providers_;
};

// Prometheus text escaping: label values escape \, " and newline; help text \ and newline.
std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);
// A sample value as Prometheus reads it: integers without a fraction, "+Inf", "NaN".
std::string format_metric_value(double v);

}  // namespace skippy::telemetry
