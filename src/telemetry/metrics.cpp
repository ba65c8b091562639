#include "telemetry/metrics.h"

#include <array>
#include <cassert>
#include <charconv>
#include <cmath>

namespace skippy::telemetry {
namespace {

constexpr std::string_view k_no_labels[] = {""};  // never read: spans below take 0 of it
constexpr std::string_view k_version[] = {"version"};
constexpr std::string_view k_endpoint_code[] = {"endpoint", "code"};
constexpr std::string_view k_endpoint_finish[] = {"endpoint", "finish_reason"};
constexpr std::string_view k_reason[] = {"reason"};
constexpr std::string_view k_stage_tier[] = {"stage", "tier"};
constexpr std::string_view k_stage[] = {"stage"};

// Upper bounds in seconds. Time to first token spans a cached 1-token prefill on a
// small model (~1 ms) to a long prompt through a slow chain (a minute).
constexpr double k_ttft_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
constexpr double k_tpot_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
constexpr double k_duration_buckets[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
constexpr double k_queue_buckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60};
constexpr double k_step_lanes_buckets[] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256};
constexpr double k_step_tokens_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
constexpr double k_step_wait_buckets[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

constexpr std::span<const std::string_view> none() { return std::span<const std::string_view>(k_no_labels, 0); }
constexpr std::span<const double> no_buckets() { return {}; }

using mt = metric_type;

// The one table of metric names (RocksDB habit). Same order as the enum.
constexpr std::array<metric_info, static_cast<size_t>(metric::count)> k_metrics = {{
    {"skippy_build_info", mt::gauge, "info", "Always 1; the label carries the skippy version.", k_version, no_buckets()},
    {"skippy_http_requests_total", mt::counter, "requests",
     "HTTP requests answered, by endpoint and status code.", k_endpoint_code, no_buckets()},
    {"skippy_generation_requests_total", mt::counter, "requests",
     "Generation requests that ran on a lane, by endpoint and how they finished (stop, length, cancelled, error).",
     k_endpoint_finish, no_buckets()},
    {"skippy_prompt_tokens_total", mt::counter, "tokens", "Prompt tokens of generation requests that ran on a lane.",
     none(), no_buckets()},
    {"skippy_cached_prompt_tokens_total", mt::counter, "tokens",
     "Prompt tokens restored from the prefix cache instead of computed.", none(), no_buckets()},
    {"skippy_generated_tokens_total", mt::counter, "tokens", "Tokens generated (completion tokens).", none(),
     no_buckets()},
    {"skippy_time_to_first_token_seconds", mt::histogram, "seconds",
     "From the request's arrival (queue wait included) to its first generated token.", none(), k_ttft_buckets},
    {"skippy_time_per_output_token_seconds", mt::histogram, "seconds",
     "Time between consecutive generated tokens of a request.", none(), k_tpot_buckets},
    {"skippy_request_duration_seconds", mt::histogram, "seconds",
     "From a generation request's arrival to its last token (queue wait included).", none(), k_duration_buckets},
    {"skippy_queue_wait_seconds", mt::histogram, "seconds", "Time a request waited for a free lane.", none(),
     k_queue_buckets},
    {"skippy_queue_rejections_total", mt::counter, "requests",
     "Requests that never got a lane: full (429), timeout (503), shutdown (503), disconnected (client left).",
     k_reason, no_buckets()},
    {"skippy_queue_waiting_requests", mt::gauge, "requests", "Requests waiting for a lane now.", none(), no_buckets()},
    {"skippy_queue_waiting_peak_requests", mt::gauge, "requests",
     "Most requests waiting for a lane at one time since the server started.", none(), no_buckets()},
    {"skippy_queue_capacity_requests", mt::gauge, "requests", "Most requests that may wait for a lane (--queue).",
     none(), no_buckets()},
    {"skippy_lanes", mt::gauge, "lanes", "Lanes (concurrent generations) configured.", none(), no_buckets()},
    {"skippy_lanes_busy", mt::gauge, "lanes", "Lanes running a request now.", none(), no_buckets()},
    {"skippy_lanes_busy_peak", mt::gauge, "lanes", "Most lanes running a request at one time since the server started.",
     none(), no_buckets()},
    {"skippy_cache_hits_total", mt::counter, "lookups", "Prefix cache lookups the tier served, by stage and tier.",
     k_stage_tier, no_buckets()},
    {"skippy_cache_misses_total", mt::counter, "lookups",
     "Prefix cache lookups that reached the tier and that it did not serve, by stage and tier.",
     k_stage_tier, no_buckets()},
    {"skippy_cache_evictions_total", mt::counter, "entries", "Prefix cache entries evicted, by stage and tier.",
     k_stage_tier, no_buckets()},
    {"skippy_cache_bytes", mt::gauge, "bytes", "Bytes held by the prefix cache, by stage and tier.", k_stage_tier,
     no_buckets()},
    {"skippy_cache_entries", mt::gauge, "entries", "Entries held by the prefix cache, by stage and tier.",
     k_stage_tier, no_buckets()},
    {"skippy_kv_pool_blocks", mt::gauge, "blocks", "KV blocks in the stage's pool.", k_stage, no_buckets()},
    {"skippy_kv_pool_used_blocks", mt::gauge, "blocks", "KV blocks in use (lanes and cached prefixes).", k_stage,
     no_buckets()},
    {"skippy_kv_pool_bytes", mt::gauge, "bytes", "Bytes the stage's KV pool reserves.", k_stage, no_buckets()},
    {"skippy_kv_pool_used_bytes", mt::gauge, "bytes", "Bytes of the KV blocks in use.", k_stage, no_buckets()},
    {"skippy_stage_step_lanes", mt::histogram, "lanes", "Lanes in each step the stage ran as one batch.", k_stage,
     k_step_lanes_buckets},
    {"skippy_stage_step_tokens", mt::histogram, "tokens", "Tokens (decode tokens and prompt chunks) in each step the stage ran.",
     k_stage, k_step_tokens_buckets},
    {"skippy_stage_step_queue_wait_seconds", mt::histogram, "seconds",
     "Time a lane's work waited for the step that ran it (stage 0: from being handed to the scheduler; later stages: from its frame's arrival).",
     k_stage, k_step_wait_buckets},
}};

constexpr bool table_is_well_formed() {
    for (const auto & m : k_metrics) {
        if (m.name.substr(0, 7) != "skippy_") return false;
        const bool total = m.name.size() > 6 && m.name.substr(m.name.size() - 6) == "_total";
        if ((m.type == mt::counter) != total) return false;  // Prometheus naming: counters, and only they, end in _total
        if ((m.type == mt::histogram) != !m.buckets.empty()) return false;
        for (size_t i = 1; i < m.buckets.size(); ++i) {
            if (!(m.buckets[i - 1] < m.buckets[i])) return false;
        }
    }
    return true;
}
static_assert(table_is_well_formed(), "metric table: names, types and buckets must agree");

size_t index_of(metric m) {
    assert(m != metric::count);
    return static_cast<size_t>(m);
}

std::string type_name(metric_type t) {
    switch (t) {
        case mt::counter: return "counter";
        case mt::gauge: return "gauge";
        case mt::histogram: return "histogram";
    }
    return "untyped";
}

// {a="x",b="y"} plus an optional trailing le label; "" when there are no labels at all.
std::string label_text(const metric_info & mi, const label_values & values, const std::string * le) {
    if (values.empty() && !le) return "";
    std::string out = "{";
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) out += ',';
        out += mi.labels[i];
        out += "=\"";
        out += escape_label_value(values[i]);
        out += '"';
    }
    if (le) {
        if (!values.empty()) out += ',';
        out += "le=\"";
        out += *le;
        out += '"';
    }
    out += '}';
    return out;
}

}  // namespace

const metric_info & info(metric m) { return k_metrics[index_of(m)]; }

bool from_stage_snapshots(metric m) {
    return static_cast<uint16_t>(m) >= static_cast<uint16_t>(metric::cache_hits) &&
           static_cast<uint16_t>(m) <= static_cast<uint16_t>(metric::step_queue_wait);
}

std::string escape_label_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string escape_help(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string format_metric_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), v);  // shortest form that reads back exactly
    return std::string(buf, res.ptr);
}

metrics_registry::metrics_registry() : families_(static_cast<size_t>(metric::count)) {}

metrics_registry::series & metrics_registry::series_of(metric m, const label_values & labels) {
    const metric_info & mi = info(m);
    assert(labels.size() == mi.labels.size() && "label values must match the metric's label names");
    (void)mi;
    family & f = families_[index_of(m)];
    auto it = f.find(labels);
    if (it == f.end()) {
        it = f.emplace(labels, series{}).first;
        it->second.bucket_counts.assign(info(m).buckets.size(), 0);
    }
    return it->second;
}

void metrics_registry::add(metric m, double v, const label_values & labels) {
    assert(info(m).type == mt::counter && v >= 0);
    std::lock_guard<std::mutex> lock(mutex_);
    series_of(m, labels).value += v;
}

void metrics_registry::set(metric m, double v, const label_values & labels) {
    assert(info(m).type == mt::gauge);
    std::lock_guard<std::mutex> lock(mutex_);
    series_of(m, labels).value = v;
}

void metrics_registry::observe(metric m, double v, const label_values & labels) {
    const metric_info & mi = info(m);
    assert(mi.type == mt::histogram);
    std::lock_guard<std::mutex> lock(mutex_);
    series & s = series_of(m, labels);
    s.sum += v;
    s.count += 1;
    for (size_t i = 0; i < mi.buckets.size(); ++i) {
        if (v <= mi.buckets[i]) {
            s.bucket_counts[i] += 1;
            break;
        }
    }
}

void metrics_registry::add_stage_provider(stage_snapshot_provider provider) {
    std::lock_guard<std::mutex> lock(mutex_);
    providers_.push_back(std::move(provider));
}

std::optional<double> metrics_registry::value(metric m, const label_values & labels) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const family & f = families_[index_of(m)];
    auto it = f.find(labels);
    if (it == f.end()) return std::nullopt;
    return info(m).type == mt::histogram ? static_cast<double>(it->second.count) : it->second.value;
}

void metrics_registry::merge_snapshots(const std::vector<stage_snapshot> & snaps, std::vector<family> & families) {
    auto put = [&](metric m, const label_values & labels, double v) {
        series s;
        s.value = v;
        families[index_of(m)][labels] = s;
    };
    auto put_histogram = [&](metric m, const label_values & labels, const histogram_snapshot & h) {
        series s;
        s.bucket_counts = h.bucket_counts;
        s.bucket_counts.resize(info(m).buckets.size(), 0);
        s.sum = h.sum;
        s.count = h.count;
        families[index_of(m)][labels] = s;
    };
    for (const stage_snapshot & snap : snaps) {
        const std::string stage = std::to_string(snap.stage);
        for (const cache_tier_snapshot & t : snap.cache_tiers) {
            const label_values lv = {stage, t.tier};
            put(metric::cache_hits, lv, static_cast<double>(t.hits));
            put(metric::cache_misses, lv, static_cast<double>(t.misses));
            put(metric::cache_evictions, lv, static_cast<double>(t.evictions));
            put(metric::cache_bytes, lv, static_cast<double>(t.bytes));
            put(metric::cache_entries, lv, static_cast<double>(t.entries));
        }
        if (snap.kv_pool) {
            const kv_pool_snapshot & kv = *snap.kv_pool;
            put(metric::kv_pool_blocks, {stage}, static_cast<double>(kv.blocks));
            put(metric::kv_pool_used_blocks, {stage}, static_cast<double>(kv.used_blocks));
            put(metric::kv_pool_bytes, {stage}, static_cast<double>(kv.blocks * kv.block_bytes));
            put(metric::kv_pool_used_bytes, {stage}, static_cast<double>(kv.used_blocks * kv.block_bytes));
        }
        if (snap.steps) {
            put_histogram(metric::step_lanes, {stage}, snap.steps->lanes);
            put_histogram(metric::step_tokens, {stage}, snap.steps->tokens);
            put_histogram(metric::step_queue_wait, {stage}, snap.steps->queue_wait);
        }
    }
}

std::string metrics_registry::render_prometheus(render_scope scope) const {
    std::vector<family> families;
    std::vector<stage_snapshot_provider> providers;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        families = families_;
        providers = providers_;
    }
    // Providers run outside the lock: they may take their own locks (a stage's pool).
    std::vector<stage_snapshot> snaps;
    for (const auto & p : providers) {
        std::vector<stage_snapshot> s = p();
        snaps.insert(snaps.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
    }
    merge_snapshots(snaps, families);

    std::string out;
    out.reserve(8192);
    for (size_t i = 0; i < k_metrics.size(); ++i) {
        const metric_info & mi = k_metrics[i];
        const auto m = static_cast<metric>(i);
        if (scope == render_scope::stages_only && m != metric::build_info && !from_stage_snapshots(m)) continue;
        family & f = families[i];
        if (f.empty() && mi.labels.empty()) {
            series zero;
            zero.bucket_counts.assign(mi.buckets.size(), 0);
            f.emplace(label_values{}, zero);
        }
        out += "# HELP ";
        out += mi.name;
        out += ' ';
        out += escape_help(mi.help);
        out += "\n# TYPE ";
        out += mi.name;
        out += ' ';
        out += type_name(mi.type);
        out += '\n';
        for (const auto & [labels, s] : f) {
            if (mi.type != mt::histogram) {
                out += mi.name;
                out += label_text(mi, labels, nullptr);
                out += ' ';
                out += format_metric_value(s.value);
                out += '\n';
                continue;
            }
            uint64_t cumulative = 0;
            for (size_t b = 0; b <= mi.buckets.size(); ++b) {
                const bool inf = b == mi.buckets.size();
                cumulative += inf ? 0 : s.bucket_counts[b];
                const std::string le = inf ? "+Inf" : format_metric_value(mi.buckets[b]);
                out += mi.name;
                out += "_bucket";
                out += label_text(mi, labels, &le);
                out += ' ';
                out += std::to_string(inf ? s.count : cumulative);
                out += '\n';
            }
            out += mi.name;
            out += "_sum";
            out += label_text(mi, labels, nullptr);
            out += ' ';
            out += format_metric_value(s.sum);
            out += '\n';
            out += mi.name;
            out += "_count";
            out += label_text(mi, labels, nullptr);
            out += ' ';
            out += std::to_string(s.count);
            out += '\n';
        }
    }
    return out;
}

namespace {

void observe_into(histogram_snapshot & h, std::span<const double> buckets, double v) {
    h.sum += v;
    h.count += 1;
    for (size_t i = 0; i < buckets.size(); ++i) {
        if (v <= buckets[i]) {
            h.bucket_counts[i] += 1;
            break;
        }
    }
}

}  // namespace

step_recorder::step_recorder() {
    steps_.lanes.bucket_counts.assign(info(metric::step_lanes).buckets.size(), 0);
    steps_.tokens.bucket_counts.assign(info(metric::step_tokens).buckets.size(), 0);
    steps_.queue_wait.bucket_counts.assign(info(metric::step_queue_wait).buckets.size(), 0);
}

void step_recorder::observe(int64_t n_lanes, int64_t n_tokens, std::span<const double> queue_wait_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe_into(steps_.lanes, info(metric::step_lanes).buckets, static_cast<double>(n_lanes));
    observe_into(steps_.tokens, info(metric::step_tokens).buckets, static_cast<double>(n_tokens));
    for (double w : queue_wait_s) observe_into(steps_.queue_wait, info(metric::step_queue_wait).buckets, w);
}

step_snapshot step_recorder::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return steps_;
}

}  // namespace skippy::telemetry
