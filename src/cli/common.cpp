#include "cli/common.h"

#include "base/log.h"
#include "cache/redis_client.h"
#include "kernels/kernels.h"
#include "protocol/protocol.h"
#include "runtime/stage.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace skippy::cli {

result<std::shared_ptr<const gguf::file>> load_gguf(const std::string & path) {
    SKIPPY_LOG_DEBUG("loading %s", path.c_str());
    auto f = gguf::file::open(path);
    if (!f.is_ok()) return f.error();
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

int fail(const status & st) {
    std::fprintf(stderr, "skippy: error: %s\n", st.to_string().c_str());
    return 1;
}

namespace {

template <class T>
CLI::Validator integer_validator(T lo, T hi) {
    const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return CLI::Validator(
        [lo, hi, range](std::string & text) -> std::string {
            T v = 0;
            const char * end = text.data() + text.size();
            auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
            if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
                return text + " is not an integer in " + range;
            }
            text = std::to_string(v);  // CLI11 converts with base 0: "010" would be octal
            return std::string();
        },
        "INT in " + range);
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) { return integer_validator<int64_t>(lo, hi); }
CLI::Validator unsigned_in(uint64_t lo, uint64_t hi) { return integer_validator<uint64_t>(lo, hi); }

CLI::Validator real_in(double lo, double hi, bool single_precision) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "[%g, %g]", lo, hi);
    const std::string range = buf;
    return CLI::Validator(
        [lo, hi, range, single_precision](std::string & text) -> std::string {
            const char * end = text.data() + text.size();
            double v = 0;
            std::from_chars_result r{};
            if (single_precision) {
                float f = 0;
                r = std::from_chars(text.data(), end, f);  // out of float's range: an error, not 0 or inf
                v = f;
            } else {
                r = std::from_chars(text.data(), end, v);
            }
            if (text.empty() || r.ec != std::errc() || r.ptr != end || !std::isfinite(v) || v < lo || v > hi) {
                return text + " is not a number in " + range;
            }
            return std::string();
        },
        "FLOAT in " + range);
}

namespace {
// The --kernels value of the command line (one command runs per process).
std::string & kernels_choice() {
    static std::string choice;
    return choice;
}
}  // namespace

void add_kernels_flag(CLI::App * cmd) {
    cmd->add_option("--kernels", kernels_choice(),
                    "Kernel path: scalar, avx2, avx512, amx or auto (default: the fastest this CPU supports; all give "
                    "the same bits)")
        ->check(CLI::IsMember({"scalar", "avx2", "avx512", "amx", "auto"}));
}

status apply_kernels_flag() {
    if (kernels_choice().empty()) return status::ok();
    status st = kernels::select_implementation(kernels_choice());
    if (!st) return st.with_context("--kernels");
    SKIPPY_LOG_INFO("kernel path %s (forced by --kernels)", kernels::active_implementation());
    return status::ok();
}

int32_t resolve_threads(int32_t flag) { return flag > 0 ? flag : physical_core_count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void add_runtime_flags(CLI::App * cmd, runtime_flags & f, int32_t default_lanes) {
    f.lanes = default_lanes;
    add_kernels_flag(cmd);
    add_number(cmd, "-t,--threads", f.threads, "Threads per stage (default: physical cores)", 1, 1024);
    add_number(cmd, "-c,--ctx-size", f.ctx_size, "Context size in tokens per lane (default: the model's, at most 4096)", 1, 1 << 24);
    add_number(cmd, "--lanes", f.lanes, "Concurrent sessions (lanes) per stage", 1, 1024)->capture_default_str();
    cmd->add_option("--kv-type", f.kv_type, "KV cache element type")->check(CLI::IsMember({"f16", "f32"}))->capture_default_str();
    cmd->add_flag("--no-huge-pages", f.no_huge_pages,
                  "Leave the weights on the file mapping instead of copying this stage's layers and head to memory on "
                  "transparent huge pages (faster decode; not shared with other processes mapping the file)");
    cmd->add_option("--stage-key-file", f.stage_key_file,
                    "File holding the key every stage of the chain shares: stage links prove it and MAC every frame "
                    "(required when a stage is not on loopback; default: none)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--stage-tls", f.stage_tls,
                    "CERT,KEY,CA (PEM files): stage links run over TLS 1.3; every stage shows a certificate signed by CA and "
                    "checks the other's against it (all stages of a chain need it; default: plain TCP)")
        ->check(CLI::Validator(
            [](const std::string & text) -> std::string {
                auto files = transport::parse_tls_files(text);
                if (!files.is_ok()) return files.error().message();
                for (const std::string * path : {&files->cert_path, &files->key_path, &files->ca_path}) {
                    if (!std::filesystem::is_regular_file(*path)) return "no such file: " + *path;
                }
                return {};
            },
            "CERT,KEY,CA", "TLS files"));
    add_number(cmd, "--wire-delay-ms", f.wire_delay_ms, "Delay added before every frame written to a stage link (simulates a slow link)",
               0, 60000);
    add_number(cmd, "--stage-step-timeout-ms", f.stage_step_timeout_ms,
               "Base of a stage's deadline to answer work sent to it, per hop, in ms; the deadline adds "
               "--stage-step-ms-per-token for every token of the work (a stuck stage fails its requests with timed_out)",
               1, 3600000)->capture_default_str();
    add_number(cmd, "--stage-step-ms-per-token", f.stage_step_ms_per_token,
               "Slowest pace per token a stage may run at before it counts as stuck, in ms, per hop", 0, 600000)->capture_default_str();
    add_number(cmd, "--stage-heartbeat-ms", f.stage_heartbeat_ms,
               "An idle stage link (a batch link, an idle lane's link) sends a heartbeat after this many ms of quiet; "
               "one unanswered within --stage-step-timeout-ms closes the link (0: no heartbeats)", 0, 3600000)
        ->capture_default_str();
    cmd->add_option("--kv-cache", f.kv_cache, "Prefix cache: off, record (fill only) or lookup-record")
        ->check(CLI::IsMember({"off", "record", "lookup-record"}))->capture_default_str();
    add_number(cmd, "--kv-cache-min-tokens", f.kv_cache_min_tokens, "Prefixes shorter than this are neither recorded nor restored", 1,
               int64_t(1) << 30)->capture_default_str();
    add_number(cmd, "--kv-cache-max-entries", f.kv_cache_max_entries, "Most resident (in-pool) cache entries per stage; 0 turns that tier off",
               0, int64_t(1) << 30)->capture_default_str();
    add_number(cmd, "--kv-cache-exact-max-bytes", f.kv_cache_exact_max_bytes,
               "Host-memory bytes for serialized KV pages (exact-state tier) per stage; 0 turns it off", 0, int64_t(1) << 50)
        ->capture_default_str();
    add_number(cmd, "--kv-cache-resident-tokens", f.kv_cache_resident_tokens,
               "KV pool positions kept for cached prefixes beyond the lanes' contexts (default: one more context per lane)", 0,
               int64_t(1) << 34);
    cmd->add_option("--kv-cache-demote", f.kv_cache_demote,
                    "Export resident entries evicted for room into the exact-state tier (when that tier lacks them)")
        ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
    cmd->add_option("--kv-cache-key", f.kv_cache_key, "Cache namespace for requests that name none (tenants never share entries)")
        ->check(CLI::Validator(
            [](const std::string & key) -> std::string {
                // The key travels to every stage in ConfigureGeneration.
                const uint32_t max_bytes = protocol::protocol_limits{}.max_cache_key_bytes;
                if (key.size() <= max_bytes) return {};
                return "at most " + std::to_string(max_bytes) + " bytes (it has " + std::to_string(key.size()) + ")";
            },
            "KEY", "cache key length"));
    cmd->add_option("--kv-cache-disk", f.kv_cache_disk,
                    "Directory for cached KV pages that survive restarts (each stage uses DIR/stage-N, owned by one process)");
    add_number(cmd, "--kv-cache-disk-max-bytes", f.kv_cache_disk_max_bytes,
               "Bytes of page files per stage under --kv-cache-disk (0: 10 GiB or 10% of the filesystem, whichever is smaller)", 0,
               int64_t(1) << 50)->capture_default_str();
    cmd->add_option("--kv-cache-redis", f.kv_cache_redis, "Redis server shared by stage replicas, redis://host[:port][/db]")
        ->check(CLI::Validator(
            [](const std::string & url) -> std::string {
                auto u = cache::parse_redis_url(url);
                return u.is_ok() ? std::string() : u.error().message();
            },
            "URL", "Redis URL"));
    add_number(cmd, "--kv-cache-redis-timeout-ms", f.kv_cache_redis_timeout_ms,
               "Longest wait for the Redis server to connect or answer a command, in ms (then: a cache miss)", 1, 60000)
        ->capture_default_str();
    add_number(cmd, "--kv-cache-checkpoint-tokens", f.kv_cache_checkpoint_tokens,
               "Stages with recurrent layers (qwen35): snapshot the recurrent state every this many prompt tokens, so a "
               "prefix restores at the last multiple it shares (0: only at the prompt's and the answer's ends)",
               0, int64_t{1} << 24)
        ->capture_default_str();
    cmd->add_option("--telemetry-file", f.telemetry_file, "Append decision events as JSON lines to this file");
    cmd->add_option("--telemetry-level", f.telemetry_level, "Events to write: off, summary or debug")
        ->check(CLI::IsMember({"off", "summary", "debug"}))->capture_default_str();
}

stage_options to_stage_options(const runtime_flags & f) {
    stage_options so;
    so.n_threads = resolve_threads(f.threads);
    so.ctx_size = f.ctx_size;
    so.n_lanes = f.lanes;
    so.kv_type = f.kv_type == "f32" ? kv_dtype::f32 : kv_dtype::f16;
    so.huge_pages = !f.no_huge_pages;
    return so;
}

result<transport::chain_options> to_chain_options(const runtime_flags & f) {
    transport::chain_options c;
    if (!f.stage_key_file.empty()) {
        SKIPPY_ASSIGN_OR_RETURN(c.link.stage_key, transport::load_stage_key(f.stage_key_file));
    }
    if (!f.stage_tls.empty()) {
        SKIPPY_ASSIGN_OR_RETURN(const transport::tls_files files, transport::parse_tls_files(f.stage_tls));
        SKIPPY_ASSIGN_OR_RETURN(c.link.tls, transport::tls_context::load(files));
    }
    c.link.wire_delay_ms = f.wire_delay_ms;
    c.link.liveness.step_base = std::chrono::milliseconds(f.stage_step_timeout_ms);
    c.link.liveness.step_per_token = std::chrono::milliseconds(f.stage_step_ms_per_token);
    c.link.liveness.heartbeat_interval = std::chrono::milliseconds(f.stage_heartbeat_ms);
    cache::stage_cache_config & cc = c.cache.config;
    cc.mode = f.kv_cache == "off" ? cache::cache_mode::off : f.kv_cache == "record" ? cache::cache_mode::record
                                                                                     : cache::cache_mode::lookup_record;
    cc.min_tokens = f.kv_cache_min_tokens;
    cc.max_entries = f.kv_cache_max_entries;
    cc.exact_max_bytes = f.kv_cache_exact_max_bytes;
    cc.demote_on_evict = f.kv_cache_demote != "off";
    cc.disk_dir = f.kv_cache_disk;  // each stage's cache host picks its subdirectory
    cc.disk_max_bytes = f.kv_cache_disk_max_bytes;
    cc.redis_url = f.kv_cache_redis;
    cc.redis_timeout_ms = f.kv_cache_redis_timeout_ms;
    cc.checkpoint_tokens = f.kv_cache_checkpoint_tokens;
    SKIPPY_TRY(cc.validate());
    c.cache.default_key = f.kv_cache_key;
    c.cache.resident_tokens = f.kv_cache_resident_tokens;
    if (!f.telemetry_file.empty()) {
        SKIPPY_ASSIGN_OR_RETURN(telemetry::telemetry_level level, telemetry::parse_telemetry_level(f.telemetry_level));
        if (level != telemetry::telemetry_level::off) {
            SKIPPY_ASSIGN_OR_RETURN(auto sink, telemetry::json_lines_sink::open_file(f.telemetry_file, level));
            c.cache.sink = std::move(sink);
        }
    }
    return c;
}

void add_chain_flags(CLI::App * cmd, chain_choice & choice) {
    auto * stages = add_number(cmd, "--stages", choice.stages, "Stages in this process, connected over loopback TCP", 1, 64)
                        ->capture_default_str();
    cmd->add_option("--topology", choice.topology_path, "Topology file: run stage 0 here, the other stages are serve-stage processes")
        ->check(CLI::ExistingFile)->excludes(stages);
}

result<std::string> resolve_model_path(const std::string & model_flag, const chain_choice & choice) {
    if (choice.topology_path.empty()) {
        if (model_flag.empty()) return make_error(error_code::invalid_argument, "give a model with -m (or a --topology file)");
        return model_flag;
    }
    SKIPPY_ASSIGN_OR_RETURN(transport::topology topo, transport::topology::load(choice.topology_path));
    if (model_flag.empty()) return topo.model_path;
    // The other stages load the topology's model: stage 0 running another file would
    // chain layers of different models (garbage, or a late shape error).
    std::error_code ec_flag, ec_topo;
    const auto flag_path = std::filesystem::canonical(model_flag, ec_flag);
    const auto topo_path = std::filesystem::canonical(topo.model_path, ec_topo);
    if (ec_topo) {
        return make_error(error_code::not_found, "the model of topology " + choice.topology_path + " (" + topo.model_path +
                                                     "): " + ec_topo.message());
    }
    if (ec_flag) return make_error(error_code::not_found, "-m " + model_flag + ": " + ec_flag.message());
    if (flag_path != topo_path) {
        return make_error(error_code::invalid_argument, "-m " + model_flag + " is not the model of topology " + choice.topology_path +
                                                            " (" + topo_path.string() + "); leave out -m to use it");
    }
    return topo.model_path;
}

result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags,
                                                                 const transport::chain_options & co) {
    const stage_options so = to_stage_options(flags);
    if (!choice.topology_path.empty()) {
        SKIPPY_ASSIGN_OR_RETURN(transport::topology topo, transport::topology::load(choice.topology_path));
        SKIPPY_TRY(transport::check_stage_auth(topo, co.link.stage_key, co.link.tls != nullptr));
        SKIPPY_LOG_INFO("stage 0 of %d (topology %s), stage links %s", topo.n_stages(), choice.topology_path.c_str(),
                        transport::stage_auth_summary(co.link.stage_key, co.link.tls != nullptr).c_str());
        return transport::make_topology_chain(std::move(file), topo, so, co);
    }
    return transport::make_embedded_chain(std::move(file), choice.stages, so, co);
}

result<std::unique_ptr<transport::chain_pipeline>> make_pipeline(std::shared_ptr<const gguf::file> file,
                                                                 const chain_choice & choice, const runtime_flags & flags) {
    SKIPPY_ASSIGN_OR_RETURN(const transport::chain_options co, to_chain_options(flags));
    return make_pipeline(std::move(file), choice, flags, co);
}

}  // namespace skippy::cli
