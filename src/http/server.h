// The OpenAI-compatible HTTP front end on stage 0 (DESIGN §7).
//
// Serves POST /v1/chat/completions and /v1/completions (streaming with server-sent
// events, or one JSON body), GET /v1/models, /v1/models/{id}, /health and /metrics on
// top of any pipeline_i: the in-process local_pipeline or a chain of stage processes.
// One event loop (event_loop.h) owns every client socket: it reads requests with
// deadlines and limits and answers /health, /v1/models and /metrics itself, so they
// never wait behind generations or slow clients. Generation requests go to a pool of
// worker threads; each runs on one lane of the pipeline through run_generation;
// requests beyond the lanes wait in a bounded queue (429 when full, 503 after the
// timeout). A client that goes away cancels its generation and frees its lane. Every
// error is an OpenAI error object. Details: docs/http-api.md.
#pragma once

#include "base/status.h"
#include "chat/chat.h"
#include "runtime/pipeline.h"
#include "telemetry/metrics.h"
#include "telemetry/telemetry.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace skippy::http {

struct server_options {
    std::string          host = "127.0.0.1";  // address to bind; loopback unless asked otherwise
    int32_t              port = 8080;         // 0: the system picks a free port (see http_server::port())
    int32_t              queue_capacity = 64; // requests that may wait for a lane; 0: none wait
    double               queue_timeout_s = 60;           // longest wait for a lane, then 503
    size_t               max_body_bytes = 8u << 20;      // larger request bodies get 413 (chunked ones too)
    int32_t              max_connections = 4096;         // open client connections; beyond: shed idle/slow ones, else 503
    double               idle_timeout_s = 5;             // a connection with no request in progress is closed after this
    double               head_timeout_s = 10;            // a request head must be complete this long after its first byte (408)
    double               body_timeout_s = 10;            // grace for a body, on top of its size / min_body_bytes_per_s (408)
    double               min_body_bytes_per_s = 64 << 10;  // slowest request body accepted after the grace
    std::string          model_id = "skippy";            // what /v1/models lists and responses carry
    int32_t              prefill_chunk_tokens = 512;     // prompt tokens per prefill step
    // The chat template (the model's Jinja program, or a built-in family); null: the
    // built-in plain family.
    std::shared_ptr<const chat::chat_template> chat_template;
    // API keys: when any is set, every route but /health (and CORS preflights) needs
    // "Authorization: Bearer <key>", else 401.
    std::vector<std::string> api_keys;
    std::string          cors_origin;        // "" off, "*", or one origin (docs/http-api.md)
    // TEST HOOK (serve --test-canned-output): when set, request k's completion is the
    // text test_canned_outputs[k % n] (tokenized with special tokens) instead of what
    // the model samples; the pipeline still runs prefill and decode. Lets integration
    // tests on random weights drive tool calls and reasoning. Never for real serving.
    std::vector<std::string> test_canned_outputs;
    int32_t              http_threads = 0;   // generation workers; 0: lanes + queue + 4 (a waiting request holds one)
};

class http_server {
public:
    // REQUIRES: pipeline, tok and metrics outlive the server; pipeline.n_lanes() >= 1.
    // `events` may be null (telemetry off).
    http_server(pipeline_i & pipeline, const tokenizer & tok, server_options options,
                telemetry::metrics_registry & metrics, telemetry::event_sink_ptr events);
    ~http_server();  // stops and joins
    http_server(const http_server &) = delete;
    http_server & operator=(const http_server &) = delete;

    // Binds host:port. unavailable when the address cannot be bound.
    status bind();
    // The bound port (the chosen one when options.port was 0). REQUIRES: bind() succeeded.
    int32_t port() const;
    // The connection cap in force: max_connections, or less when the process may not
    // open that many files. REQUIRES: bind() succeeded.
    int32_t max_connections() const;
    // Client connections open right now.
    int32_t n_open_connections() const;

    // Serves on the calling thread until stop(). REQUIRES: bind() succeeded.
    void run();
    // bind() and run() on a background thread (tests, and the CLI's signal handling).
    status start();

    // Stops: waiting requests get 503, running generations are cancelled, the listener
    // closes. After start(), returns once every request thread has finished (after
    // run(), run() returns then). Thread-safe, idempotent.
    // Not async-signal-safe: call it from a thread, not a signal handler.
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace skippy::http
