// skippy serve: the OpenAI-compatible HTTP server (docs/http-api.md).
#include "base/log.h"
#include "chat/chat.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "gguf/gguf.h"
#include "http/access.h"
#include "http/server.h"
#include "runtime/pipeline.h"
#include "runtime/stage.h"
#include "telemetry/metrics.h"
#include "telemetry/telemetry.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "transport/topology.h"

#include <nlohmann/json.hpp>

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

namespace skippy::cli {
namespace {

struct serve_options {
    std::string model_path;
    std::string host = "127.0.0.1";
    int32_t     port = 8080;
    int32_t     lanes = 4;
    int32_t     queue = 64;
    double      queue_timeout_s = 60;
    int64_t     max_body_bytes = 8 << 20;
    int32_t     max_connections = 4096;
    double      idle_timeout_s = 5;
    double      head_timeout_s = 10;
    double      body_timeout_s = 10;
    double      min_body_rate = 64 << 10;  // bytes per second
    int32_t     batch_size = 512;
    std::string alias;
    std::string chat_template;       // --chat-template FILE|NAME ("" : the model's own)
    std::string api_key;             // --api-key
    std::string api_key_file;        // --api-key-file
    std::string cors_origin;         // --cors-origin
    std::string test_canned_output;  // --test-canned-output (a test hook)
    runtime_flags runtime;  // -t, --ctx-size, --lanes, --kv-type, --kv-cache*, --telemetry-*, ...
    chain_choice  chain;    // --stages N | --topology T.json
};

// Whether a stage running `layers` of an `n_layer` model runs tensor `name`: the blocks
// of its layers (not a name that only looks like a block's), the embeddings when it
// starts at layer 0, the output norm and head when it ends at the last layer (as
// model_slice binds them).
bool runs_tensor(const std::string & name, layer_range layers, int32_t n_layer) {
    if (name.starts_with("blk.")) {
        const int32_t il = gguf::block_index(name);
        return il >= layers.start && il < layers.end;  // -1: below every range
    }
    if (name.rfind("token_embd", 0) == 0) return layers.start == 0;
    if (name.rfind("output", 0) == 0) return layers.end >= n_layer;
    return true;
}

// Reads every page of the weights this process runs, so that the first request does
// not pay for paging them in from disk (the file is mapped, and mapping reads nothing),
// and logs progress on stderr at every 10% of the bytes.
void page_in_weights(const gguf::file & file, layer_range layers, int32_t n_layer) {
    size_t total = 0;
    size_t n_tensors = 0;
    for (const auto & t : file.tensors()) {
        if (!runs_tensor(t.name, layers, n_layer)) continue;
        total += t.n_bytes;
        ++n_tensors;
    }
    if (total == 0) return;
    const size_t page = static_cast<size_t>(std::max(4096L, sysconf(_SC_PAGESIZE)));
    size_t done = 0;
    size_t tensors_done = 0;
    int next_decile = 1;
    uint8_t sink = 0;  // touched bytes are combined so that the reads are not optimised away
    for (const auto & t : file.tensors()) {
        if (!runs_tensor(t.name, layers, n_layer)) continue;
        for (size_t off = 0; off < t.n_bytes; off += page) sink ^= static_cast<const volatile uint8_t *>(t.data)[off];
        done += t.n_bytes;
        ++tensors_done;
        const int decile = static_cast<int>(done * 10 / total);  // a big tensor may cross several: one line
        if (decile >= next_decile) {
            SKIPPY_LOG_INFO("loading weights: %d%% (%.1f of %.1f MiB, %zu of %zu tensors)", decile * 10,
                            static_cast<double>(done) / (1 << 20), static_cast<double>(total) / (1 << 20), tensors_done, n_tensors);
            next_decile = decile + 1;
        }
    }
    asm volatile("" : : "r"(sink));
}

int run_serve(const serve_options & o) {
    // SIGINT/SIGTERM are taken by sigwait on this thread. Block them before any thread
    // starts (kernel pool, HTTP workers) so that every thread inherits the mask.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    auto chain = to_chain_options(o.runtime);  // opens the telemetry file, shared by stages and HTTP
    if (!chain.is_ok()) return fail(chain.error());
    const telemetry::event_sink_ptr events = chain->cache.sink;

    const auto t_load = std::chrono::steady_clock::now();
    std::error_code ec;
    auto model_path = resolve_model_path(o.model_path, o.chain);
    if (!model_path.is_ok()) return fail(model_path.error());
    const auto file_bytes = std::filesystem::file_size(*model_path, ec);
    SKIPPY_LOG_INFO("loading model %s (%.1f MiB)", model_path->c_str(), ec ? 0.0 : static_cast<double>(file_bytes) / (1 << 20));
    auto file = load_gguf(*model_path);
    if (!file.is_ok()) return fail(file.error());
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.is_ok()) return fail(tok.error());
    // A template that does not parse is a load-time error naming the construct.
    auto chat_template = o.chat_template.empty() ? chat::chat_template::of_model(**file, **tok)
                                                 : chat::chat_template::from_option(o.chat_template, **tok);
    if (!chat_template.is_ok()) return fail(chat_template.error());
    const std::string template_text = chat_template->describe();
    SKIPPY_LOG_INFO("tokenizer: %s, %d tokens; chat template: %s",
                    (*tok)->model() == tokenizer_model::spm ? "spm" : "bpe", (*tok)->n_vocab(), template_text.c_str());
    std::vector<std::string> api_keys;
    if (!o.api_key.empty()) api_keys.push_back(o.api_key);
    if (!o.api_key_file.empty()) {
        auto keys = http::read_api_key_file(o.api_key_file);
        if (!keys.is_ok()) return fail(keys.error());
        api_keys.insert(api_keys.end(), keys->begin(), keys->end());
    }
    std::vector<std::string> canned;
    if (!o.test_canned_output.empty()) {
        std::ifstream in(o.test_canned_output);
        const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_array() || j.empty()) {
            return fail(make_error(error_code::invalid_argument, "--test-canned-output " + o.test_canned_output +
                                                                     " must hold a non-empty JSON array of strings"));
        }
        for (const auto & t : j) {
            if (!t.is_string()) return fail(make_error(error_code::invalid_argument, "--test-canned-output: not a string"));
            canned.push_back(t.get<std::string>());
        }
        SKIPPY_LOG_WARN("TEST HOOK: completions are the %zu canned texts of %s, not the model's", canned.size(),
                        o.test_canned_output.c_str());
    }

    // The stages this process runs: all of them with --stages N, stage 0 with --topology
    // (the others run in serve-stage processes).
    int32_t n_stages = o.chain.stages;
    layer_range own_layers{0, std::numeric_limits<int32_t>::max()};
    int32_t n_layer = 0;  // whole model in this process: every tensor runs here
    if (!o.chain.topology_path.empty()) {
        auto topo = transport::topology::load(o.chain.topology_path);
        if (!topo.is_ok()) return fail(topo.error());
        if (topo->n_stages() < 1) return fail(make_error(error_code::invalid_argument, o.chain.topology_path + " has no stages"));
        n_stages = topo->n_stages();
        own_layers = topo->stages.front().layers;
        n_layer = topo->stages.back().layers.end;  // the stages tile [0, n_layer)
    }
    page_in_weights(**file, own_layers, n_layer);

    const stage_options so_log = to_stage_options(o.runtime);
    SKIPPY_LOG_INFO("allocating KV pools and the prefix cache: %d stage(s)%s, %d lanes, %s KV, %d threads, prefix cache %s",
                    n_stages, o.chain.topology_path.empty() ? " in this process" : " (stage 0 in this process)", so_log.n_lanes,
                    o.runtime.kv_type.c_str(), so_log.n_threads, o.runtime.kv_cache.c_str());
    auto made = make_pipeline(*file, o.chain, o.runtime, *chain);
    if (!made.is_ok()) return fail(made.error());
    transport::chain_pipeline & pipeline = **made;
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    SKIPPY_LOG_INFO("model loaded in %.2f s: context %d tokens per lane, vocabulary %d", load_s, pipeline.ctx_size(),
                    pipeline.n_vocab());

    telemetry::metrics_registry metrics;
    metrics.add_stage_provider([&pipeline] { return pipeline.stage_snapshots(); });

    http::server_options so;
    so.host = o.host;
    so.port = o.port;
    so.queue_capacity = o.queue;
    so.queue_timeout_s = o.queue_timeout_s;
    so.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
    so.max_connections = o.max_connections;
    so.idle_timeout_s = o.idle_timeout_s;
    so.head_timeout_s = o.head_timeout_s;
    so.body_timeout_s = o.body_timeout_s;
    so.min_body_bytes_per_s = o.min_body_rate;
    so.model_id = !o.alias.empty() ? o.alias : std::filesystem::path(*model_path).stem().string();
    so.prefill_chunk_tokens = o.batch_size;
    so.chat_template = std::make_shared<const chat::chat_template>(std::move(chat_template).value());
    so.api_keys = std::move(api_keys);
    so.cors_origin = o.cors_origin;
    so.test_canned_outputs = std::move(canned);
    http::http_server server(pipeline, **tok, so, metrics, events);
    if (status st = server.start(); !st.is_ok()) return fail(st);
    if (o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1" && so.api_keys.empty()) {
        SKIPPY_LOG_WARN("listening on %s, not loopback: anyone who can reach it can use the server (no authentication)",
                        o.host.c_str());
    }
    // The resolved configuration. Tests read the port from this line (--port 0 picks a
    // free one) and check the rest.
    const std::string topology_text = o.chain.topology_path.empty() ? "" : " from " + o.chain.topology_path;
    SKIPPY_LOG_INFO("listening on http://%s:%d (model %s, stages %d%s, lanes %d, ctx %d, kv %s, threads %d, batch %d, "
                    "queue %d, queue timeout %g s, max body %lld bytes, max connections %d, head timeout %g s, "
                    "body timeout %g s + %g bytes/s, idle timeout %g s, prefix cache %s, chat template %s, telemetry %s%s%s, "
                    "stage links %s)",
                    o.host.c_str(), server.port(), so.model_id.c_str(), pipeline.n_stages(), topology_text.c_str(),
                    pipeline.n_lanes(), pipeline.ctx_size(), o.runtime.kv_type.c_str(), resolve_threads(o.runtime.threads),
                    o.batch_size, o.queue, o.queue_timeout_s, static_cast<long long>(o.max_body_bytes),
                    server.max_connections(), o.head_timeout_s, o.body_timeout_s, o.min_body_rate, o.idle_timeout_s,
                    o.runtime.kv_cache.c_str(),
                    template_text.c_str(), events ? o.runtime.telemetry_level.c_str() : "off",
                    events ? " -> " : "", events ? o.runtime.telemetry_file.c_str() : "",
                    transport::stage_auth_summary(chain->link.stage_key, chain->link.tls != nullptr).c_str());

    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    SKIPPY_LOG_INFO("%s: shutting down (cancelling running requests)", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
    SKIPPY_LOG_INFO("stopped");
    return 0;
}

}  // namespace

void add_serve_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<serve_options>();
    CLI::App * cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
    cmd->add_option("-m,--model", o->model_path, "GGUF model file (default with --topology: the topology's model)")
        ->check(CLI::ExistingFile);
    add_chain_flags(cmd, o->chain);
    cmd->add_option("--host", o->host, "Address to listen on (loopback by default)")->capture_default_str();
    add_number(cmd, "--port", o->port, "Port to listen on (0: pick a free port, printed on the startup line)", 0, 65535)
        ->capture_default_str();
    add_number(cmd, "--queue", o->queue, "Requests that may wait for a lane (more get 429)", 0, 4096)->capture_default_str();
    add_number(cmd, "--queue-timeout-s", o->queue_timeout_s, "Longest wait for a lane in seconds (then 503)", 0.0, 86400.0)
        ->capture_default_str();
    add_number(cmd, "--max-body-bytes", o->max_body_bytes, "Largest request body in bytes (more get 413)", int64_t(1024),
               int64_t(1) << 32)
        ->capture_default_str();
    add_number(cmd, "--max-connections", o->max_connections,
               "Open client connections at most; beyond, idle then slow ones are closed, else the new one gets 503", 1,
               1 << 20)
        ->capture_default_str();
    add_number(cmd, "--idle-timeout-s", o->idle_timeout_s, "Close a connection with no request in progress after this",
               0.01, 86400.0)
        ->capture_default_str();
    add_number(cmd, "--head-timeout-s", o->head_timeout_s,
               "A request head must be complete this long after its first byte (else 408)", 0.01, 86400.0)
        ->capture_default_str();
    add_number(cmd, "--body-timeout-s", o->body_timeout_s,
               "Grace for a request body, on top of its size / --min-body-rate (else 408)", 0.01, 86400.0)
        ->capture_default_str();
    add_number(cmd, "--min-body-rate", o->min_body_rate, "Slowest request body accepted after the grace, bytes/s", 1.0,
               1e12)
        ->capture_default_str();
    add_number(cmd, "-b,--batch-size", o->batch_size, "Prompt tokens per prefill chunk", 1, 1 << 16)->capture_default_str();
    cmd->add_option("--alias", o->alias, "Model id in the API (default: the file name without .gguf)");
    cmd->add_option("--chat-template", o->chat_template,
                    "Chat template: a built-in name (plain, chatml, llama2, llama3, mistral, zephyr, gemma) or a Jinja "
                    "file (default: the model's tokenizer.chat_template)");
    cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on every route but /health");
    cmd->add_option("--api-key-file", o->api_key_file, "Like --api-key, with the keys of this file (one per line)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--cors-origin", o->cors_origin, "Allow browser calls from this origin ('*': any); default: no CORS");
    cmd->add_option("--test-canned-output", o->test_canned_output,
                    "TEST HOOK: a JSON array of texts; request k's completion is text k mod n instead of the model's")
        ->check(CLI::ExistingFile);
    add_runtime_flags(cmd, o->runtime, 4);
    cmd->callback([&run, o] {
        if (o->model_path.empty() && o->chain.topology_path.empty()) throw CLI::RequiredError("--model (or --topology)");
        run = [o] { return run_serve(*o); };
    });
}

}  // namespace skippy::cli
