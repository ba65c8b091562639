#include "http/metrics_server.h"

#include "http/api.h"

#include <httplib.h>

#include <chrono>
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
    httplib::Server               svr;
    std::thread                   thread;
    std::mutex                    stop_mutex;
    int32_t                       bound_port = -1;

    impl(telemetry::metrics_registry & m, telemetry::render_scope s) : metrics(m), scope(s) {
        metrics.set(telemetry::metric::build_info, 1, {SKIPPY_VERSION});
        // Scrapes are rare and quick: a couple of workers is plenty.
        svr.new_task_queue = [] { return new httplib::ThreadPool(2); };
        svr.Get("/metrics", [this](const httplib::Request &, httplib::Response & res) {
            res.set_content(metrics.render_prometheus(scope), "text/plain; version=0.0.4; charset=utf-8");
        });
        svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request & req, httplib::Response & res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            api_error e;
            if (res.status == 404 && req.path == "/metrics") {
                res.status = 405;  // httplib reports a known path with another method as 404
                res.set_header("Allow", "GET");
                e = error_for_status(405, "Method " + req.method + " is not allowed on /metrics (use GET)");
            } else {
                e = error_for_status(res.status, "Only GET /metrics is served here");
            }
            res.set_content(error_body(e), "application/json");
            return httplib::Server::HandlerResponse::Handled;
        }));
    }
};

metrics_server::metrics_server(telemetry::metrics_registry & metrics, telemetry::render_scope scope)
    : impl_(std::make_unique<impl>(metrics, scope)) {}

metrics_server::~metrics_server() { stop(); }

status metrics_server::start(const std::string & host, int32_t port) {
    // A scraper that goes away mid-response must give EPIPE, not kill the process.
    std::signal(SIGPIPE, SIG_IGN);
    impl & m = *impl_;
    m.bound_port = port == 0 ? m.svr.bind_to_any_port(host) : (m.svr.bind_to_port(host, port) ? port : -1);
    if (m.bound_port <= 0) {
        m.bound_port = -1;
        return make_error(error_code::unavailable, "cannot serve metrics on " + host + ":" + std::to_string(port) +
                                                       " (address in use, or not an address of this machine?)");
    }
    m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
    // stop() only takes effect once the listener runs; wait so that it cannot be lost.
    for (int i = 0; i < 5000 && !m.svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!m.svr.is_running()) return make_error(error_code::unavailable, "the metrics listener did not start");
    return status::ok();
}

int32_t metrics_server::port() const { return impl_->bound_port; }

void metrics_server::stop() {
    impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.stop_mutex);
    m.svr.stop();
    if (m.thread.joinable()) m.thread.join();
}

}  // namespace skippy::http
