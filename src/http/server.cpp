#include "http/server.h"

#include "base/log.h"
#include "http/access.h"
#include "http/api.h"
#include "grammar/grammar.h"
#include "http/event_loop.h"
#include "http/lane_pool.h"
#include "http/text_stream.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#ifndef SKIPPY_VERSION
#define SKIPPY_VERSION "unknown"
#endif

namespace skippy::http {
namespace {

using clock = std::chrono::steady_clock;
using telemetry::metric;

double seconds_between(clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

const char * endpoint_label(endpoint kind) {
    return kind == endpoint::chat_completions ? "chat_completions" : "completions";
}

// The endpoint label of a request path, for skippy_http_requests_total.
std::string path_label(const std::string & path) {
    if (path == "/v1/chat/completions") return "chat_completions";
    if (path == "/v1/completions") return "completions";
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return "models";
    if (path == "/health") return "health";
    if (path == "/metrics") return "metrics";
    if (path == "/tokenize") return "tokenize";
    if (path == "/detokenize") return "detokenize";
    return "other";
}

// Methods allowed on each known path (for 405 and its Allow header); "" when unknown.
const char * allowed_methods(const std::string & path) {
    if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/tokenize" || path == "/detokenize") {
        return "POST";
    }
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" || path == "/metrics") return "GET";
    return "";
}

http_response json_response(std::string body, int status = 200) {
    http_response r;
    r.status = status;
    r.body = std::move(body);
    return r;
}

void send_error(response_channel & ch, const api_error & e) { ch.respond(json_response(error_body(e), e.http_status)); }

// A channel that adds headers (CORS) to whatever answers the request.
class header_channel final : public response_channel {
public:
    header_channel(channel_ptr inner, header_list headers) : inner_(std::move(inner)), headers_(std::move(headers)) {}
    void respond(http_response r) override {
        add(r);
        inner_->respond(std::move(r));
    }
    void begin_stream(const http_response & head) override {
        http_response h = head;
        add(h);
        inner_->begin_stream(h);
    }
    bool write(std::string_view bytes) override { return inner_->write(bytes); }
    void end_stream() override { inner_->end_stream(); }
    void abort_stream() override { inner_->abort_stream(); }
    bool gone() const override { return inner_->gone(); }

private:
    void add(http_response & r) const { r.headers.insert(r.headers.end(), headers_.begin(), headers_.end()); }
    channel_ptr inner_;
    header_list headers_;
};

// A fingerprint of what answers: the build, the model id and the chat template.
std::string make_system_fingerprint(const server_options & o) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    auto mix = [&](std::string_view s) {
        for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull;
    };
    mix(SKIPPY_VERSION);
    mix(o.model_id);
    mix(o.chat_template ? o.chat_template->describe() : "builtin plain");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "fp_%012llx", static_cast<unsigned long long>(h & 0xffffffffffffull));
    return buf;
}

}  // namespace

// Threads for generation requests, which block while they wait for a lane and while
// they run. Tasks run in submission order. (Outside the anonymous namespace because
// http_server::impl, which has linkage, holds one; the name is this file's alone.)
namespace server_internal {

class worker_pool {
public:
    explicit worker_pool(int32_t n_threads) {
        for (int32_t i = 0; i < n_threads; ++i) threads_.emplace_back([this] { work(); });
    }
    ~worker_pool() { join(); }

    // False once join() has begun: the task will not run.
    bool submit(std::function<void()> task) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (closing_) return false;
        tasks_.push_back(std::move(task));
        cv_.notify_one();
        return true;
    }

    // Runs what is queued, then joins every thread. Idempotent.
    void join() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            closing_ = true;
            cv_.notify_all();
        }
        for (auto & t : threads_) {
            if (t.joinable()) t.join();
        }
    }

private:
    void work() {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                cv_.wait(lock, [&] { return closing_ || !tasks_.empty(); });
                if (tasks_.empty()) return;
                task = std::move(tasks_.front());
                tasks_.pop_front();
            }
            task();
        }
    }

    std::mutex                        mutex_;
    std::condition_variable           cv_;
    std::deque<std::function<void()>> tasks_;
    bool                              closing_ = false;
    std::vector<std::thread>          threads_;
};

}  // namespace server_internal

namespace {

telemetry::event named_event(std::string name) {
    telemetry::event e;
    e.name = std::move(name);
    return e;
}

// A seed for requests that give none: distinct per request, unpredictable across runs.
uint64_t fresh_seed() {
    static std::atomic<uint64_t> state{[] {
        std::random_device rd;
        return (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }()};
    uint64_t z = state.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

// One admitted generation request: everything the run needs, and its lane.
struct generation_job {
    completion_request    request;
    std::vector<token_id> prompt;
    chat::output_format   format;  // chat: how to read the output
    // tool_choice required / named: the GBNF that admits only the call(s)
    // (chat::tool_call_grammar); run() constrains sampling with it.
    std::string           tool_grammar;
    response_meta         meta;
    lane_lease            lease;
    channel_ptr           client;  // the way back; says when the client has gone
    clock::time_point     arrival;
    clock::time_point     admitted;  // got its lane
};

// How a run ended.
struct run_outcome {
    std::optional<api_error> error;       // the pipeline failed
    generation_result        gen;
    std::string              finish;      // "stop" | "length" (when no error and not cancelled)
    bool                     cancelled = false;
};

struct http_server::impl {
    pipeline_i &                  pipeline;
    const tokenizer &             tok;
    server_options                opt;
    telemetry::metrics_registry & metrics;
    telemetry::event_sink_ptr     events;
    lane_pool                     lanes;
    request_limits                limits;
    std::atomic<bool>             stopping{false};
    std::shared_ptr<const chat::chat_template> chat_template;
    cors_policy                   cors;
    std::string                   fingerprint;
    std::atomic<uint64_t>         n_canned{0};  // test hook: requests answered from test_canned_outputs
    int64_t                       created_unix_s = static_cast<int64_t>(std::time(nullptr));
    // A request holds its worker while it waits for a lane and while it runs, so every
    // lane and queue place needs one, plus a few for requests being parsed or refused.
    server_internal::worker_pool  workers;
    event_loop                    loop;
    std::thread                   thread;
    std::mutex                    stop_mutex;

    impl(pipeline_i & p, const tokenizer & t, server_options o, telemetry::metrics_registry & m,
         telemetry::event_sink_ptr e)
        : pipeline(p), tok(t), opt(std::move(o)), metrics(m), events(std::move(e)),
          lanes(p.n_lanes(), opt.queue_capacity),
          workers(opt.http_threads > 0 ? opt.http_threads : lanes.n_lanes() + lanes.queue_capacity() + 4),
          loop(loop_options_of(opt), [this](http_request req, channel_ptr ch) { route(std::move(req), std::move(ch)); },
               [this](const std::string & path, int status) {
                   metrics.add(metric::http_requests, 1, {path_label(path), std::to_string(status)});
               }) {
        chat_template = opt.chat_template ? opt.chat_template
                                          : std::make_shared<const chat::chat_template>(chat::chat_template::builtin(
                                                chat_template_family::plain, chat_special_texts_of(tok)));
        cors.allowed_origin = opt.cors_origin;
        fingerprint = make_system_fingerprint(opt);
        limits.ctx_size = pipeline.ctx_size();
        limits.n_vocab = pipeline.n_vocab();
        metrics.set(metric::build_info, 1, {SKIPPY_VERSION});
        metrics.set(metric::lanes, lanes.n_lanes());
        metrics.set(metric::queue_capacity, lanes.queue_capacity());
    }

    static loop_options loop_options_of(const server_options & o) {
        loop_options l;
        l.host = o.host;
        l.port = o.port;
        l.max_connections = o.max_connections;
        l.idle_timeout_s = o.idle_timeout_s;
        l.head_timeout_s = o.head_timeout_s;
        l.body_timeout_s = o.body_timeout_s;
        l.min_body_bytes_per_s = o.min_body_bytes_per_s;
        l.limits.max_body_bytes = o.max_body_bytes;
        return l;
    }

    void route(http_request req, channel_ptr ch);
    void handle_generation(const http_request & req, const channel_ptr & ch, endpoint kind);
    std::optional<api_error> tokenize_prompt(const completion_request & cr, std::vector<token_id> & out,
                                             chat::output_format & format, std::string & tool_grammar) const;
    void handle_tokenize(const http_request & req, response_channel & ch, bool detokenize);
    // `logprobs` (when the request asked for them) receives each generated token's.
    run_outcome run(generation_job & job, const std::function<bool(std::string_view)> & emit, logprobs_out * logprobs);
    void finish_non_streaming(generation_job & job);
    void stream(generation_job & job);
    void record(const generation_job & job, const run_outcome & out, bool stream);
};

// On the loop thread: cheap routes are answered here and now, generations go to a worker.
void http_server::impl::route(http_request req, channel_ptr ch) {
    req.path = canonical_path(req.path);
    const std::string & path = req.path;
    if (cors.enabled()) {
        if (auto pre = cors_preflight(cors, req, allowed_methods(path))) return ch->respond(std::move(*pre));
        header_list h = cors_headers(cors, req);
        if (!h.empty()) ch = std::make_shared<header_channel>(std::move(ch), std::move(h));
    }
    if (!opt.api_keys.empty() && path != "/health" && !bearer_key_matches(req.header("authorization"), opt.api_keys)) {
        api_error e = error_for_status(401, req.header("authorization") ? "Incorrect API key provided"
                                                                      : "Missing API key: send Authorization: Bearer <key>");
        e.type = "invalid_request_error";
        e.code = "invalid_api_key";
        http_response r = json_response(error_body(e), 401);
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        return ch->respond(std::move(r));
    }
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool generation = path == "/v1/chat/completions" || path == "/v1/completions";
    if ((path == "/tokenize" || path == "/detokenize") && req.method == "POST") {
        // Tokenizing a large body takes a while: not on the loop thread.
        const bool detok = path == "/detokenize";
        const bool queued = workers.submit([this, req = std::move(req), ch, detok] {
            try {
                handle_tokenize(req, *ch, detok);
            } catch (...) {
                send_error(*ch, error_for_status(500, "internal error while handling the request"));
            }
        });
        if (!queued) send_error(*ch, error_for_status(503, "The server is shutting down"));
        return;
    }
    if (generation && req.method == "POST") {
        if (stopping) return send_error(*ch, error_for_status(503, "The server is shutting down"));
        const endpoint kind = path == "/v1/chat/completions" ? endpoint::chat_completions : endpoint::completions;
        const bool queued = workers.submit([this, req = std::move(req), ch, kind] {
            try {
                handle_generation(req, ch, kind);
            } catch (const std::exception & ex) {  // an exception must not end the worker
                SKIPPY_LOG_ERROR("request failed: %s", ex.what());
                send_error(*ch, error_for_status(500, "internal error while handling the request"));
                ch->abort_stream();
            } catch (...) {
                send_error(*ch, error_for_status(500, "internal error while handling the request"));
                ch->abort_stream();
            }
        });
        if (!queued) send_error(*ch, error_for_status(503, "The server is shutting down"));
        return;
    }
    if (get && path == "/v1/models") return ch->respond(json_response(models_body(opt.model_id, created_unix_s)));
    if (get && path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
        const std::string id = path.substr(11);
        if (id != opt.model_id) {
            api_error e = error_for_status(404, "The model '" + id + "' does not exist");
            e.param = "model";
            e.code = "model_not_found";
            return send_error(*ch, e);
        }
        return ch->respond(json_response(model_body(opt.model_id, created_unix_s)));
    }
    if (get && path == "/health") {
        if (stopping) return send_error(*ch, error_for_status(503, "the server is shutting down"));
        return ch->respond(json_response("{\"status\":\"ok\"}"));
    }
    if (get && path == "/metrics") {
        metrics.set(metric::lanes_busy, lanes.n_busy());
        metrics.set(metric::queue_waiting, lanes.n_waiting());
        metrics.set(metric::lanes_busy_peak, lanes.peak_busy());
        metrics.set(metric::queue_waiting_peak, lanes.peak_waiting());
        http_response r = json_response(metrics.render_prometheus());
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        return ch->respond(std::move(r));
    }
    if (*allowed_methods(path) != '\0') {
        api_error e = error_for_status(405, "Method " + req.method + " is not allowed on " + path + " (use " +
                                                allowed_methods(path) + ")");
        http_response r = json_response(error_body(e), 405);
        r.headers.emplace_back("Allow", allowed_methods(path));
        return ch->respond(std::move(r));
    }
    send_error(*ch, error_for_status(404, "Unknown route: " + req.method + " " + path));
}

std::optional<api_error> http_server::impl::tokenize_prompt(const completion_request & cr, std::vector<token_id> & out,
                                                            chat::output_format & format, std::string & tool_grammar) const {
    if (cr.kind == endpoint::chat_completions) {
        chat::conversation conv;
        conv.messages = cr.messages;
        conv.tools = cr.tools;
        conv.choice = cr.tool_choice;
        conv.parallel_tool_calls = cr.parallel_tool_calls;
        conv.template_kwargs = cr.template_kwargs;
        auto rendered = chat_template->render(conv);
        if (!rendered.is_ok()) {
            // The template raised, failed, or lacks what the request needs: the request's doing.
            api_error e = error_for_status(400, rendered.error().message());
            e.param = cr.tools.empty() ? "messages" : "tools";
            e.code = rendered.error().code() == error_code::invalid_argument ? "invalid_value" : "template_error";
            return e;
        }
        format = rendered->format;
        const auto mode = cr.tool_choice.mode;
        if (mode == chat::tool_choice_mode::required || mode == chat::tool_choice_mode::named) {
            // The grammar that forces the call; a schema it cannot read is the client's error.
            auto g = chat::tool_call_grammar(format.tools, conv);
            if (!g.is_ok()) {
                api_error e = error_for_status(400, g.error().message());
                e.param = "tools";
                e.code = "invalid_value";
                return e;
            }
            tool_grammar = std::move(g).value();
            if (!cr.sampling.grammar.empty()) {
                api_error e = error_for_status(400, "a forced tool call ('tool_choice') cannot be combined with "
                                                    "'response_format' or 'grammar'");
                e.param = "tool_choice";
                e.code = "invalid_value";
                return e;
            }
            // Checked here, so that a schema the grammar engine refuses is the client's 400.
            if (auto compiled = grammar::compile(tool_grammar); !compiled.is_ok()) {
                api_error e = error_for_status(400, "'tools': " + compiled.error().message());
                e.param = "tools";
                e.code = "invalid_value";
                return e;
            }
        }
        out = chat::tokenize_prompt(tok, *chat_template, rendered->text);
    } else if (cr.prompt_is_tokens) {
        out = cr.prompt_tokens;
    } else {
        // parse_special as llama.cpp's server does: a raw prompt may spell its own template.
        out = tok.tokenize(cr.prompt_text, tok.add_bos_default(), /*parse_special=*/true);
    }
    if (out.empty()) {
        api_error e = error_for_status(400, "the prompt is empty (no tokens)");
        e.param = cr.kind == endpoint::chat_completions ? "messages" : "prompt";
        return e;
    }
    if (static_cast<int64_t>(out.size()) > limits.ctx_size) {
        api_error e = error_for_status(400, "This model's maximum context length is " + std::to_string(limits.ctx_size) +
                                                " tokens; the prompt has " + std::to_string(out.size()) + " tokens");
        e.param = cr.kind == endpoint::chat_completions ? "messages" : "prompt";
        e.code = "context_length_exceeded";
        return e;
    }
    return std::nullopt;
}

void http_server::impl::handle_generation(const http_request & req, const channel_ptr & ch, endpoint kind) {
    auto job = std::make_shared<generation_job>();
    job->arrival = clock::now();
    if (auto e = parse_request(req.body, kind, limits, job->request)) return send_error(*ch, *e);
    if (auto e = tokenize_prompt(job->request, job->prompt, job->format, job->tool_grammar)) return send_error(*ch, *e);
    job->meta.kind = kind;
    job->meta.id = make_response_id(kind);
    job->meta.created = static_cast<int64_t>(std::time(nullptr));
    job->meta.model = opt.model_id;
    job->meta.system_fingerprint = fingerprint;
    job->client = ch;

    const auto timeout = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(opt.queue_timeout_s));
    acquire_result acq = lanes.acquire(timeout, [&] { return stopping.load() || ch->gone(); });
    if (acq.outcome == acquire_outcome::cancelled && stopping) acq.outcome = acquire_outcome::shutting_down;
    metrics.observe(metric::queue_wait, acq.waited_s);
    if (acq.outcome != acquire_outcome::acquired) {
        metrics.add(metric::queue_rejections, 1, {acquire_outcome_name(acq.outcome)});
        telemetry::emit(events, named_event("http.queue_rejected")
                                    .attr("skippy.http.endpoint", std::string(endpoint_label(kind)))
                                    .attr("skippy.http.reason", std::string(acquire_outcome_name(acq.outcome)))
                                    .attr("skippy.http.waited_ms", acq.waited_s * 1e3));
        switch (acq.outcome) {
            case acquire_outcome::queue_full:
                return send_error(*ch, error_for_status(429, "The server is busy: every lane is in use and the queue of " +
                                                                 std::to_string(lanes.queue_capacity()) +
                                                                 " waiting requests is full; retry later"));
            case acquire_outcome::timed_out: {
                api_error e = error_for_status(503, "No lane became free within the queue timeout; retry later");
                e.code = "queue_timeout";
                return send_error(*ch, e);
            }
            case acquire_outcome::shutting_down:
                return send_error(*ch, error_for_status(503, "The server is shutting down"));
            default:  // the client left while waiting: nobody reads this
                return send_error(*ch, error_for_status(503, "The client went away"));
        }
    }
    job->lease = std::move(acq.lease);
    job->admitted = clock::now();

    if (!job->request.stream) return finish_non_streaming(*job);
    stream(*job);
    job->lease.release();
}

run_outcome http_server::impl::run(generation_job & job, const std::function<bool(std::string_view)> & emit, logprobs_out * logprobs) {
    const completion_request & cr = job.request;
    generation_request gr;
    gr.prompt = job.prompt;
    // No max_tokens: generate until the context is full (run_generation ends with "length").
    gr.max_tokens = cr.max_tokens.value_or(limits.ctx_size);
    gr.sampling = cr.sampling;
    // tool_choice required / named: the call is forced by its grammar.
    if (!job.tool_grammar.empty()) gr.sampling.grammar = job.tool_grammar;
    if (!cr.seed_given) gr.sampling.seed = fresh_seed();
    gr.prefill_chunk_tokens = opt.prefill_chunk_tokens;
    gr.cache_key = cr.cache_key;
    gr.is_end_of_generation = [this](token_id id) { return tok.is_end_of_generation(id); };

    // Test hook: the completion is a canned text; the model's choices are replaced.
    std::vector<token_id> canned;
    size_t n_canned_used = 0;
    if (!opt.test_canned_outputs.empty()) {
        const std::string & t = opt.test_canned_outputs[n_canned.fetch_add(1) % opt.test_canned_outputs.size()];
        canned = tok.tokenize(t, /*add_bos=*/false, /*parse_special=*/true);
        gr.max_tokens = std::min<int32_t>(gr.max_tokens, static_cast<int32_t>(canned.size()));
        gr.is_end_of_generation = [](token_id) { return false; };
        if (canned.empty()) gr.max_tokens = 0;
    }

    if (logprobs && cr.top_logprobs >= 0) {
        logprobs->n_top = cr.top_logprobs;
        gr.on_logprobs = [&](token_id id, const token_logprobs & lp) {
            logprob_item item;
            item.piece = tok.token_to_piece(id);
            item.logprob = lp.sampled;
            for (const token_logprob & e : lp.top) item.top.emplace_back(tok.token_to_piece(e.id), e.logprob);
            logprobs->items.push_back(std::move(item));
        };
    }
    stop_text_stream text(cr.stop);
    run_outcome out;
    std::optional<clock::time_point> last_token;
    gr.on_token = [&](token_id id) {
        if (!canned.empty()) id = canned[n_canned_used++];
        const auto now = clock::now();
        if (last_token) metrics.observe(metric::time_per_output_token, seconds_between(*last_token, now));
        last_token = now;
        if (stopping || job.client->gone()) {
            out.cancelled = true;
            return false;
        }
        const std::string piece = text.push(tok.token_to_piece(id));
        if (!piece.empty() && emit && !emit(piece)) {
            out.cancelled = true;
            return false;
        }
        return !text.stopped();
    };

    auto res = run_generation(pipeline, job.lease.lane(), gr);
    job.lease.release();  // free the lane before anything is written back
    if (!res.is_ok()) {
        const status & st = res.error();
        SKIPPY_LOG_WARN("request %s failed: %s", job.meta.id.c_str(), st.to_string().c_str());
        // The request passed every check a stage makes (parse_request), so whatever the
        // pipeline refuses now is the server's failure, not the client's: a broken
        // model (non-finite logits), a stage that died (500), a stage that froze (504).
        out.error = error_for_pipeline_failure(st);
        return out;
    }
    out.gen = std::move(res).value();
    if (out.cancelled) return out;
    const std::string tail = text.finish();
    if (!tail.empty() && emit && !emit(tail)) {
        out.cancelled = true;
        return out;
    }
    const bool canned_done = !opt.test_canned_outputs.empty() && n_canned_used == canned.size();
    out.finish = text.stopped() || canned_done || out.gen.finish == finish_reason::end_of_generation ? "stop" : "length";
    return out;
}

void http_server::impl::finish_non_streaming(generation_job & job) {
    std::string text;
    logprobs_out logprobs;
    run_outcome out = run(job, [&](std::string_view piece) {
        text.append(piece);
        return true;
    }, &logprobs);
    const logprobs_out * lp = job.request.top_logprobs >= 0 ? &logprobs : nullptr;
    record(job, out, false);
    response_channel & ch = *job.client;
    if (out.error) return send_error(ch, *out.error);
    if (out.cancelled) {
        // Shutdown, or a client that left (then nobody reads this).
        return send_error(ch, error_for_status(503, stopping ? "The server is shutting down" : "The client went away"));
    }
    usage_numbers usage{static_cast<int64_t>(job.prompt.size()), static_cast<int64_t>(out.gen.tokens.size()),
                        out.gen.cached_tokens, out.gen.cache_hit_stage_mask, out.gen.cache_record_stage_mask};
    if (job.meta.kind != endpoint::chat_completions) {
        return ch.respond(json_response(completion_body(job.meta, text, out.finish, usage, nullptr, lp)));
    }
    const chat::parsed_output reply = chat::parse_output(job.format, text);
    const std::string finish = reply.tool_calls.empty() ? out.finish : "tool_calls";
    ch.respond(json_response(completion_body(job.meta, text, finish, usage, &reply, lp)));
}

void http_server::impl::stream(generation_job & job) {
    response_channel & ch = *job.client;
    http_response head;
    head.content_type = "text/event-stream";
    head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    ch.begin_stream(head);
    const bool usage_null = job.request.include_usage;
    auto write = [&](const std::string & payload) { return ch.write(payload); };
    if (job.meta.kind == endpoint::chat_completions) {
        if (!write(sse_event(stream_chunk(job.meta, "", /*first=*/true, "", usage_null)))) {
            run_outcome none;
            none.cancelled = true;
            record(job, none, true);
            return ch.abort_stream();
        }
    }
    const bool chat = job.meta.kind == endpoint::chat_completions;
    chat::output_parser parser(job.format);
    // The logprobs of the tokens generated since the last chunk went out: the next
    // chunk carries them (the stop-string check and the chat parser may hold text back).
    logprobs_out pending;
    auto sent = [&] {
        for (const logprob_item & it : pending.items) pending.text_offset += it.piece.size();
        pending.items.clear();
    };
    auto write_delta = [&](const chat::output_delta & d) {
        const auto chunks = stream_delta_chunks(job.meta, d, usage_null, &pending);
        if (!chunks.empty()) sent();
        for (const std::string & c : chunks) {
            if (!write(sse_event(c))) return false;
        }
        return true;
    };
    run_outcome out = run(job, [&](std::string_view piece) {
        if (chat) return write_delta(parser.push(piece));
        const bool ok = write(sse_event(stream_chunk(job.meta, piece, false, "", usage_null, &pending)));
        sent();
        return ok;
    }, job.request.top_logprobs >= 0 ? &pending : nullptr);
    if (chat && !out.cancelled && !out.error && !write_delta(parser.finish())) out.cancelled = true;
    if (chat && !out.cancelled && !out.error && parser.n_tool_calls() > 0) out.finish = "tool_calls";
    record(job, out, true);
    if (out.cancelled) return ch.abort_stream();  // closes the connection
    if (out.error) {
        // One error event, and no [DONE]: the stream did not complete.
        write(sse_event(error_body(*out.error)));
        return ch.end_stream();
    }
    bool ok = write(sse_event(stream_chunk(job.meta, "", false, out.finish, usage_null, &pending)));
    if (ok && job.request.include_usage) {
        usage_numbers usage{static_cast<int64_t>(job.prompt.size()), static_cast<int64_t>(out.gen.tokens.size()),
                            out.gen.cached_tokens, out.gen.cache_hit_stage_mask, out.gen.cache_record_stage_mask};
        ok = write(sse_event(stream_usage_chunk(job.meta, usage)));
    }
    ok = ok && write(std::string(sse_done));
    if (ok) return ch.end_stream();
    ch.abort_stream();
}

// POST /tokenize {"content": "...", "add_special": false} → {"tokens": [...]};
// POST /detokenize {"tokens": [...]} → {"content": "..."} (llama.cpp's server shapes).
void http_server::impl::handle_tokenize(const http_request & req, response_channel & ch, bool detokenize) {
    auto body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
        api_error e = error_for_status(400, "the request body must be a JSON object");
        e.code = "invalid_json";
        return send_error(ch, e);
    }
    auto bad_field = [&](const std::string & param, const std::string & message) {
        api_error e = error_for_status(400, message);
        e.param = param;
        e.code = "invalid_value";
        send_error(ch, e);
    };
    if (!detokenize) {
        auto content = body.find("content");
        if (content == body.end() || !content->is_string()) return bad_field("content", "'content' must be a string");
        bool add_special = false;
        if (auto a = body.find("add_special"); a != body.end() && !a->is_null()) {
            if (!a->is_boolean()) return bad_field("add_special", "'add_special' must be a boolean");
            add_special = a->get<bool>();
        }
        bool parse_special = true;
        if (auto a = body.find("parse_special"); a != body.end() && !a->is_null()) {
            if (!a->is_boolean()) return bad_field("parse_special", "'parse_special' must be a boolean");
            parse_special = a->get<bool>();
        }
        const std::vector<token_id> ids =
            tok.tokenize(content->get<std::string>(), add_special && tok.add_bos_default(), parse_special);
        return ch.respond(json_response(nlohmann::json{{"tokens", ids}}.dump()));
    }
    auto tokens = body.find("tokens");
    if (tokens == body.end() || !tokens->is_array()) return bad_field("tokens", "'tokens' must be an array of token ids");
    std::vector<token_id> ids;
    for (size_t i = 0; i < tokens->size(); ++i) {
        const auto & t = (*tokens)[i];
        if (!t.is_number_integer() || (!t.is_number_unsigned() && t.get<int64_t>() < 0) ||
            t.get<uint64_t>() >= static_cast<uint64_t>(limits.n_vocab)) {
            return bad_field("tokens[" + std::to_string(i) + "]",
                             "token ids must be integers in [0, " + std::to_string(limits.n_vocab) + ")");
        }
        ids.push_back(static_cast<token_id>(t.get<int64_t>()));
    }
    const std::string text = sanitize_utf8(tok.detokenize(ids));
    ch.respond(json_response(nlohmann::json{{"content", text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

void http_server::impl::record(const generation_job & job, const run_outcome & out, bool streaming) {
    const auto now = clock::now();
    const char * ep = endpoint_label(job.meta.kind);
    const std::string finish = out.error ? "error" : out.cancelled ? "cancelled" : out.finish;
    metrics.add(metric::generation_requests, 1, {ep, finish});
    metrics.add(metric::prompt_tokens, static_cast<double>(job.prompt.size()));
    metrics.add(metric::cached_prompt_tokens, static_cast<double>(out.gen.cached_tokens));
    metrics.add(metric::generated_tokens, static_cast<double>(out.gen.tokens.size()));
    const double queue_s = seconds_between(job.arrival, job.admitted);
    const bool has_first = !out.error && (out.gen.ttft_ms > 0 || !out.gen.tokens.empty());
    if (has_first) metrics.observe(metric::time_to_first_token, queue_s + out.gen.ttft_ms / 1e3);
    metrics.observe(metric::request_duration, seconds_between(job.arrival, now));
    SKIPPY_LOG_DEBUG("%s %s: %s, %zu prompt tokens (%lld cached), %zu generated, queue %.1f ms, ttft %.1f ms, total %.1f ms",
                     job.meta.id.c_str(), ep, finish.c_str(), job.prompt.size(), static_cast<long long>(out.gen.cached_tokens),
                     out.gen.tokens.size(), queue_s * 1e3, out.gen.ttft_ms, seconds_between(job.arrival, now) * 1e3);
    telemetry::emit(events, named_event("http.request")
                                .attr("skippy.http.endpoint", std::string(ep))
                                .attr("skippy.http.id", job.meta.id)
                                .attr("skippy.http.stream", streaming)
                                .attr("skippy.http.finish_reason", finish)
                                .attr("skippy.http.prompt_tokens", static_cast<int64_t>(job.prompt.size()))
                                .attr("skippy.http.cached_tokens", out.gen.cached_tokens)
                                .attr("skippy.http.completion_tokens", static_cast<int64_t>(out.gen.tokens.size()))
                                .attr("skippy.http.queue_wait_ms", queue_s * 1e3)
                                .attr("skippy.http.ttft_ms", out.gen.ttft_ms)
                                .attr("skippy.http.total_ms", seconds_between(job.arrival, now) * 1e3));
}

http_server::http_server(pipeline_i & pipeline, const tokenizer & tok, server_options options,
                         telemetry::metrics_registry & metrics, telemetry::event_sink_ptr events)
    : impl_(std::make_unique<impl>(pipeline, tok, std::move(options), metrics, std::move(events))) {}

http_server::~http_server() { stop(); }

status http_server::bind() {
    // A write to a client that went away must fail with EPIPE, not kill the process
    // (the loop sends with MSG_NOSIGNAL; this covers everything else).
    std::signal(SIGPIPE, SIG_IGN);
    return impl_->loop.bind();
}

int32_t http_server::port() const { return impl_->loop.port(); }
int32_t http_server::max_connections() const { return impl_->loop.max_connections(); }
int32_t http_server::n_open_connections() const { return impl_->loop.n_open(); }

void http_server::run() { impl_->loop.run(); }

status http_server::start() {
    SKIPPY_TRY(bind());
    impl_->thread = std::thread([this] { run(); });
    return status::ok();
}

void http_server::stop() {
    impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.stop_mutex);
    m.stopping = true;
    m.lanes.shutdown();   // waiters get 503; running generations see `stopping` at their next token
    m.loop.begin_drain(); // every answer from now on closes its connection; blocked stream writes give up
    m.workers.join();     // every generation has answered (through the loop, which still runs)
    m.loop.stop();        // writes what is queued, closes the connections
    if (m.thread.joinable()) m.thread.join();
}

}  // namespace skippy::http
