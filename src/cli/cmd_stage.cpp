// skippy serve-stage: run stage I >= 1 of a topology; skippy split-plan: print a
// topology for a model, its stages balanced by multiply-adds per token or by bytes of
// weights (model/split_plan.h).
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "http/metrics_server.h"
#include "model/split_plan.h"
#include "telemetry/metrics.h"
#include "transport/chain.h"
#include "transport/stage_server.h"

#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <cstdio>

namespace skippy::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

struct serve_stage_options {
    std::string   topology_path;
    int32_t       stage_index = 1;
    int32_t       metrics_port = 0;  // 0: no metrics endpoint
    runtime_flags runtime;
};

int run_serve_stage(const serve_stage_options & o) {
    // Before anything can announce readiness: a signal from then on stops cleanly.
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    auto topo = transport::topology::load(o.topology_path);
    if (!topo.is_ok()) return fail(topo.error());
    if (o.stage_index < 1 || o.stage_index >= topo->n_stages()) {
        return fail(make_error(error_code::invalid_argument, "--stage must be in [1, " + std::to_string(topo->n_stages() - 1) +
                                                                 "]; stage 0 runs inside generate or serve"));
    }
    auto file = load_gguf(topo->model_path);
    if (!file.is_ok()) return fail(file.error());
    auto hp = model_hparams::from_gguf(**file);
    if (!hp.is_ok()) return fail(hp.error());
    status valid = topo->validate(hp->n_layer);
    if (!valid.is_ok()) return fail(valid);

    const auto & spec = topo->stages[static_cast<size_t>(o.stage_index)];
    auto chain = to_chain_options(o.runtime);
    if (!chain.is_ok()) return fail(chain.error());
    if (status auth = transport::check_stage_auth(*topo, chain->link.stage_key, chain->link.tls != nullptr); !auth.is_ok()) return fail(auth);
    auto st = stage::load(*file, transport::stage_options_for(to_stage_options(o.runtime), spec.layers, chain->cache));
    if (!st.is_ok()) return fail(st.error());
    auto cache = transport::stage_cache_host::create(**st, **file, o.stage_index, chain->cache);
    if (!cache.is_ok()) return fail(cache.error());
    auto listener = transport::tcp_listener::listen(spec.address);
    if (!listener.is_ok()) return fail(listener.error());
    SKIPPY_LOG_INFO("stage %d of %d: layers [%d, %d) of %s, listening on %s, %d lanes, %d threads, ctx %d, stage links %s",
                    o.stage_index, topo->n_stages(), spec.layers.start, spec.layers.end, topo->model_path.c_str(),
                    spec.address.to_string().c_str(), (*st)->n_lanes(), (*st)->n_threads(), (*st)->ctx_size(),
                    transport::stage_auth_summary(chain->link.stage_key, chain->link.tls != nullptr).c_str());
    transport::stage_server server(std::move(st).value(), std::move(cache).value(), o.stage_index, *topo, std::move(listener).value(),
                                   *chain);
    server.start();

    // This stage's own numbers (its cache tiers and KV pool), scraped here: stage 0's
    // /metrics only sees the stages inside its process.
    telemetry::metrics_registry metrics;
    metrics.add_stage_provider([&server] {
        return std::vector<telemetry::stage_snapshot>{
            server.snapshot()};
    });
    http::metrics_server metrics_endpoint(metrics, telemetry::render_scope::stages_only);
    if (o.metrics_port != 0) {
        if (status started = metrics_endpoint.start(spec.address.host, o.metrics_port); !started.is_ok()) {
            server.stop();
            return fail(started);
        }
        SKIPPY_LOG_INFO("stage %d: metrics on http://%s:%d/metrics", o.stage_index, spec.address.host.c_str(),
                        metrics_endpoint.port());
    }

    while (!g_stop) pause();
    SKIPPY_LOG_INFO("stage %d: stopping", o.stage_index);
    metrics_endpoint.stop();
    server.stop();
    return 0;
}

struct split_plan_options {
    std::string model_path;
    int32_t     stages = 2;
    int32_t     base_port = 7100;
    std::string host = "127.0.0.1";
    std::string balance = "compute";
};

int run_split_plan(const split_plan_options & o) {
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    auto hp = model_hparams::from_gguf(**file);
    if (!hp.is_ok()) return fail(hp.error());
    // The plan goes to stdout and may be saved anywhere, while a relative `model` is
    // resolved against the topology file's folder: only an absolute path survives.
    std::error_code ec;
    const std::string model_path = std::filesystem::absolute(o.model_path, ec).lexically_normal().string();
    if (ec) return fail(make_error(error_code::invalid_argument, "cannot resolve " + o.model_path + ": " + ec.message()));
    auto topo = transport::even_split(model_path, hp->n_layer, o.stages, o.host, static_cast<uint16_t>(o.base_port));
    if (!topo.is_ok()) return fail(topo.error());
    const split_balance balance = o.balance == "compute" ? split_balance::compute : split_balance::weight_bytes;
    auto split = plan_layer_split(**file, hp->n_layer, o.stages, balance);
    if (!split.is_ok()) return fail(split.error());
    for (size_t i = 0; i < topo->stages.size(); ++i) topo->stages[i].layers = split->stages[i];
    // The topology parser ignores keys it does not know: the plan says how it was cut.
    nlohmann::json j = nlohmann::json::parse(topo->to_json());
    j["split"] = split->by_compute ? "compute" : split->by_bytes ? "weight_bytes" : "layers";
    j["stage_weight_bytes"] = split->stage_bytes;
    j["stage_multiply_adds_per_token"] = split->stage_multiply_adds;
    std::printf("%s\n", j.dump().c_str());
    return 0;
}

}  // namespace

void add_stage_commands(CLI::App & app, command_runner & run) {
    auto s = std::make_shared<serve_stage_options>();
    CLI::App * serve = app.add_subcommand("serve-stage", "Run stage I >= 1 of a topology (stage 0 runs in generate or serve)");
    serve->add_option("--topology", s->topology_path, "Topology file")->required()->check(CLI::ExistingFile);
    add_number(serve, "--stage", s->stage_index, "Index of the stage to run", 1, 63)->required();
    add_number(serve, "--metrics-port", s->metrics_port,
               "Serve GET /metrics for this stage on this port, on the host of the stage's endpoint (0: off)", 0, 65535)
        ->capture_default_str();
    add_runtime_flags(serve, s->runtime, 1);
    serve->callback([&run, s] { run = [s] { return run_serve_stage(*s); }; });

    auto p = std::make_shared<split_plan_options>();
    CLI::App * plan = app.add_subcommand("split-plan", "Print a topology for a model, stages balanced by compute (or weight bytes)");
    plan->add_option("-m,--model", p->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    add_number(plan, "--stages", p->stages, "Number of stages", 1, 64)->required();
    add_number(plan, "--base-port", p->base_port, "Port of stage 0; stage i listens on base + i", 1, 65535)->capture_default_str();
    plan->add_option("--host", p->host, "Host of every endpoint")->capture_default_str();
    plan->add_option("--balance", p->balance,
                     "What the stages balance: compute (multiply-adds per token, what bounds steps of several lanes) or bytes "
                     "(weight bytes, what each stage holds and a single lane's decode step reads)")
        ->check(CLI::IsMember({"bytes", "compute"}))
        ->capture_default_str();
    plan->callback([&run, p] { run = [p] { return run_split_plan(*p); }; });
}

}  // namespace skippy::cli
