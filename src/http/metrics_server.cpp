#include "http/metrics_server.h"

#include "http/api.h"
#include "http/event_loop.h"

#include <csignal>
#include <mutex>
#include <thread>

#ifndef SKIPPY_VERSION
#define SKIPPY_VERSION "unknown"
#endif

namespace skippy::http {

struct metrics_server::impl {
    telemetry::metrics_registry & metrics;
    telemetry::render_scope       scope;
    std::unique_ptr<event_loop>   loop;
    std::thread                   thread;
    std::mutex                    stop_mutex;

    impl(telemetry::metrics_registry & m, telemetry::render_scope s) : metrics(m), scope(s) {
        metrics.set(telemetry::metric::build_info, 1, {SKIPPY_VERSION});
    }

    // On the loop thread: a scrape renders in well under a millisecond.
    void route(const http_request & req, response_channel & ch) {
        const bool get = req.method == "GET" || req.method == "HEAD";
        if (req.path == "/metrics" && get) {
            http_response r;
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r.body = metrics.render_prometheus(scope);
            return ch.respond(std::move(r));
        }
        if (req.path == "/metrics") {
            http_response r = error_response(405, "Method " + req.method + " is not allowed on /metrics (use GET)");
            r.headers.emplace_back("Allow", "GET");
            return ch.respond(std::move(r));
        }
        ch.respond(error_response(404, "Only GET /metrics is served here"));
    }
};

metrics_server::metrics_server(telemetry::metrics_registry & metrics, telemetry::render_scope scope)
    : impl_(std::make_unique<impl>(metrics, scope)) {}

metrics_server::~metrics_server() { stop(); }

status metrics_server::start(const std::string & host, int32_t port) {
    // A scraper that goes away mid-response must give EPIPE, not kill the process.
    std::signal(SIGPIPE, SIG_IGN);
    impl & m = *impl_;
    loop_options o;
    o.host = host;
    o.port = port;
    o.max_connections = 256;  // scrapers are few; a flood of them must not use up the stage's descriptors
    o.limits.max_body_bytes = 64 << 10;
    m.loop = std::make_unique<event_loop>(o, [&m](http_request req, channel_ptr ch) { m.route(req, *ch); });
    if (status st = m.loop->bind(); !st.is_ok()) {
        m.loop.reset();
        return make_error(error_code::unavailable, "cannot serve metrics: " + st.message());
    }
    m.thread = std::thread([&m] { m.loop->run(); });
    return status::ok();
}

int32_t metrics_server::port() const { return impl_->loop ? impl_->loop->port() : -1; }

void metrics_server::stop() {
    impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.stop_mutex);
    if (m.loop) m.loop->stop();
    if (m.thread.joinable()) m.thread.join();
}

}  // namespace skippy::http
