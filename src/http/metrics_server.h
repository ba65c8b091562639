// A small HTTP endpoint that serves only GET /metrics (Prometheus text format) from a
// metrics registry: what `skippy serve-stage --metrics-port` runs, so that a stage
// process reports its own cache tiers and KV pool (docs/metrics.md). The full
// OpenAI-compatible front end (server.h) serves /metrics itself.
#pragma once

#include "base/status.h"
#include "telemetry/metrics.h"

#include <cstdint>
#include <memory>
#include <string>

namespace skippy::http {

class metrics_server {
public:
    // REQUIRES: `metrics` outlives the server. `scope` chooses the families rendered.
    metrics_server(telemetry::metrics_registry & metrics, telemetry::render_scope scope);
    ~metrics_server();  // stops and joins
    metrics_server(const metrics_server &) = delete;
    metrics_server & operator=(const metrics_server &) = delete;

    // Binds host:port (port 0: a free one, see port()) and serves on a background
    // thread. unavailable when the address cannot be bound.
    status start(const std::string & host, int32_t port);
    // The bound port. REQUIRES: start() succeeded.
    int32_t port() const;
    // Closes the listener and joins. Thread-safe, idempotent; not async-signal-safe.
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace skippy::http
