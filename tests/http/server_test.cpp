// The HTTP server end to end on a fake pipeline: routes, errors, streaming, queueing,
// cancellation. The fake's decode can be held at a gate, so lane occupancy is set by the
// test, never by timing.
#include "http/server.h"

#include "http/access.h"

#include "tokenizer/tiny_vocab.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <optional>
#include <future>
#include <thread>

namespace skippy::http {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr token_id k_eos = 2;
token_id byte_token(unsigned char b) { return 3 + b; }  // tiny_vocab: <0x00> is id 3

std::vector<token_id> bytes_of(std::string_view s) {
    std::vector<token_id> out;
    for (unsigned char c : s) out.push_back(byte_token(c));
    return out;
}

// A pipeline that "generates" a fixed script of tokens (repeated), with a gate on decode:
// while closed, each decode waits for a permit.
class fake_pipeline final : public pipeline_i {
public:
    fake_pipeline(int32_t n_lanes, int32_t ctx, int32_t n_vocab, std::vector<token_id> script)
        : n_lanes_(n_lanes), ctx_(ctx), n_vocab_(n_vocab), script_(std::move(script)), steps_(static_cast<size_t>(n_lanes)) {}

    int32_t n_lanes() const override { return n_lanes_; }
    int32_t ctx_size() const override { return ctx_; }
    int32_t n_vocab() const override { return n_vocab_; }

    status begin(int32_t lane, const sampling_config &, std::span<const token_id> prompt, std::string_view key) override {
        std::lock_guard<std::mutex> lock(mutex_);
        steps_[static_cast<size_t>(lane)] = 0;
        last_prompt_.assign(prompt.begin(), prompt.end());
        last_cache_key_ = std::string(key);
        return status::ok();
    }
    status prefill(int32_t, int64_t, std::span<const token_id>) override { return status::ok(); }
    result<token_id> decode(int32_t lane, int64_t, token_id) override {
        std::unique_lock<std::mutex> lock(mutex_);
        ++waiting_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_ || permits_ > 0; });
        if (!open_) --permits_;
        --waiting_;
        ++decodes_;
        const size_t step = steps_[static_cast<size_t>(lane)]++;
        if (failure_ && static_cast<int64_t>(step) >= fail_after_) return *failure_;
        return script_[step % script_.size()];
    }
    void end(int32_t) override {
        std::lock_guard<std::mutex> lock(mutex_);
        ++ended_;
        cv_.notify_all();
    }
    int64_t cached_tokens(int32_t) const override { return cached_; }

    void close_gate() { std::lock_guard<std::mutex> lock(mutex_); open_ = false; permits_ = 0; }
    void open_gate() { std::lock_guard<std::mutex> lock(mutex_); open_ = true; cv_.notify_all(); }
    void permit(int n) { std::lock_guard<std::mutex> lock(mutex_); permits_ += n; cv_.notify_all(); }
    // Waits (bounded) until `n` decodes are blocked at the gate.
    bool wait_blocked(int n) {
        std::unique_lock<std::mutex> lock(mutex_);
        return cv_.wait_for(lock, 10s, [&] { return waiting_ >= n; });
    }
    int ended() const { std::lock_guard<std::mutex> lock(mutex_); return ended_; }
    int64_t decodes() const { std::lock_guard<std::mutex> lock(mutex_); return decodes_; }
    std::string last_cache_key() const { std::lock_guard<std::mutex> lock(mutex_); return last_cache_key_; }
    std::vector<token_id> last_prompt() const { std::lock_guard<std::mutex> lock(mutex_); return last_prompt_; }
    void set_cached_tokens(int64_t n) { cached_ = n; }
    // From the lane's decode number `after` on (0: the first), decodes fail with `why`.
    void fail_decodes(status why, int64_t after) {
        std::lock_guard<std::mutex> lock(mutex_);
        failure_ = std::move(why);
        fail_after_ = after;
    }

private:
    const int32_t n_lanes_, ctx_, n_vocab_;
    const std::vector<token_id> script_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<size_t> steps_;
    bool open_ = true;
    int permits_ = 0, waiting_ = 0, ended_ = 0;
    int64_t decodes_ = 0;
    std::atomic<int64_t> cached_{0};
    std::string last_cache_key_;
    std::vector<token_id> last_prompt_;
    std::optional<status> failure_;
    int64_t fail_after_ = 0;
};

// A bare TCP client, so a test can drop a connection whenever it likes.
class raw_client {
public:
    explicit raw_client(int port) {
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        connected_ = connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
    }
    ~raw_client() { drop(); }
    bool connected() const { return connected_; }
    void post(const std::string & path, const std::string & body) {
        const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        ASSERT_EQ(send(fd_, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    }
    // Reads until `needle` appears (or the peer closes / 10 s pass); returns what was read.
    std::string read_until(const std::string & needle) {
        std::string got;
        timeval tv{10, 0};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[4096];
        while (got.find(needle) == std::string::npos) {
            const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
            if (n <= 0) break;
            got.append(buf, static_cast<size_t>(n));
        }
        return got;
    }
    void drop() {
        if (fd_ >= 0) close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    bool connected_ = false;
};

// The events of an SSE body: the payload of each "data: " line.
std::vector<std::string> sse_payloads(const std::string & body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        if (end == std::string::npos) break;
        out.push_back(body.substr(pos + 6, end - pos - 6));
        pos = end + 2;
    }
    return out;
}

void expect_openai_error(const httplib::Result & res, int status, const std::string & type = "") {
    ASSERT_TRUE(res) << "no response";
    EXPECT_EQ(res->status, status) << res->body;
    json j = json::parse(res->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << res->body;
    ASSERT_TRUE(j.contains("error")) << res->body;
    const json & e = j["error"];
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_FALSE(e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_TRUE(e.contains("param"));
    EXPECT_TRUE(e.contains("code"));
    if (!type.empty()) {
        EXPECT_EQ(e["type"], type);
    }
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
}

class ServerTest : public ::testing::Test {
protected:
    void start(int32_t lanes, int32_t queue, double timeout_s, std::vector<token_id> script, int32_t ctx = 256,
               telemetry::event_sink_ptr events = nullptr, const std::function<void(server_options &)> & configure = {}) {
        testing::tiny_vocab v;
        v.with_spm_specials_and_bytes();
        tok_ = testing::build_or_fail(v);
        ASSERT_NE(tok_, nullptr);
        pipe_ = std::make_unique<fake_pipeline>(lanes, ctx, tok_->n_vocab(), std::move(script));
        server_options o;
        o.port = 0;
        o.queue_capacity = queue;
        o.queue_timeout_s = timeout_s;
        o.max_body_bytes = 64 * 1024;
        o.model_id = "fake";
        if (configure) configure(o);
        server_ = std::make_unique<http_server>(*pipe_, *tok_, o, metrics_, std::move(events));
        const status st = server_->start();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        port_ = server_->port();
        ASSERT_GT(port_, 0);
    }
    void TearDown() override {
        if (pipe_) pipe_->open_gate();
        server_.reset();
    }
    httplib::Client client() {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(30, 0);
        return c;
    }
    httplib::Result post(const std::string & path, const std::string & body) {
        return client().Post(path.c_str(), body, "application/json");
    }
    double metric_value(telemetry::metric m, const telemetry::label_values & labels = {}) {
        return metrics_.value(m, labels).value_or(0);
    }

    std::unique_ptr<tokenizer>    tok_;
    std::unique_ptr<fake_pipeline> pipe_;
    telemetry::metrics_registry   metrics_;
    std::unique_ptr<http_server>  server_;
    int                           port_ = 0;
};

std::vector<token_id> hello_then_eos() {
    auto s = bytes_of("Hello world");
    s.push_back(k_eos);
    return s;
}

const std::string k_chat = R"({"messages":[{"role":"user","content":"Hi"}],"temperature":0)";

TEST_F(ServerTest, HealthModelsAndMetricsAnswer) {
    start(2, 4, 1, hello_then_eos());
    auto h = client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_EQ(json::parse(h->body)["status"], "ok");
    auto m = client().Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "fake");
    auto one = client().Get("/v1/models/fake");
    ASSERT_TRUE(one);
    EXPECT_EQ(json::parse(one->body)["id"], "fake");
    expect_openai_error(client().Get("/v1/models/other"), 404);
    auto metrics = client().Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 200);
    EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
    EXPECT_NE(metrics->body.find("\nskippy_lanes 2\n"), std::string::npos);
    EXPECT_NE(metrics->body.find("skippy_http_requests_total{endpoint=\"health\",code=\"200\"} 1"), std::string::npos);
}

TEST_F(ServerTest, UnknownRoutesAre404AndWrongMethods405) {
    start(1, 1, 1, hello_then_eos());
    expect_openai_error(client().Get("/v1/nothing"), 404, "invalid_request_error");
    expect_openai_error(post("/v2/chat/completions", "{}"), 404);
    auto r = client().Get("/v1/chat/completions");
    expect_openai_error(r, 405);
    EXPECT_EQ(r->get_header_value("Allow"), "POST");
    expect_openai_error(post("/health", "{}"), 405);
    expect_openai_error(client().Delete("/v1/completions"), 405);
}

TEST_F(ServerTest, BadBodiesAre400AndOversizedOnes413) {
    start(1, 1, 1, hello_then_eos());
    expect_openai_error(post("/v1/chat/completions", "{not json"), 400, "invalid_request_error");
    expect_openai_error(post("/v1/chat/completions", R"({"messages":[]})"), 400);
    expect_openai_error(post("/v1/chat/completions", k_chat + R"(,"temperature":-1})"), 400);
    expect_openai_error(post("/v1/completions", R"({"prompt":"x","n":3})"), 400);
    const std::string big = R"({"prompt":")" + std::string(100 * 1024, 'a') + "\"}";
    expect_openai_error(post("/v1/completions", big), 413);
    EXPECT_EQ(pipe_->decodes(), 0);  // nothing reached the pipeline
}

TEST_F(ServerTest, APromptLongerThanTheContextIs400) {
    start(1, 1, 1, hello_then_eos(), /*ctx=*/32);
    auto r = post("/v1/completions", R"({"prompt":")" + std::string(100, 'x') + "\"}");
    expect_openai_error(r, 400);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "context_length_exceeded");
}

TEST_F(ServerTest, NonStreamingChatReturnsTheTextAndUsage) {
    start(1, 1, 1, hello_then_eos());
    pipe_->set_cached_tokens(3);
    auto r = post("/v1/chat/completions", k_chat + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["model"], "fake");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello world");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");  // the end-of-generation token
    const auto prompt = tokenize_chat(*tok_, chat_template_family::plain, std::vector<chat_message>{{"user", "Hi"}});
    EXPECT_EQ(j["usage"]["prompt_tokens"], prompt->size());
    EXPECT_EQ(pipe_->last_prompt(), *prompt);
    EXPECT_EQ(j["usage"]["completion_tokens"], 11);
    EXPECT_EQ(j["usage"]["total_tokens"], prompt->size() + 11);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    EXPECT_EQ(metric_value(telemetry::metric::generated_tokens), 11);
    EXPECT_EQ(metric_value(telemetry::metric::cached_prompt_tokens), 3);
    EXPECT_EQ(metric_value(telemetry::metric::generation_requests, {"chat_completions", "stop"}), 1);
}

TEST_F(ServerTest, EachGenerationEmitsASummaryEvent) {
    std::vector<std::string> lines;
    std::mutex lines_mutex;
    auto sink = std::make_shared<telemetry::json_lines_sink>(
        [&](std::string_view l) {
            std::lock_guard<std::mutex> lock(lines_mutex);
            lines.emplace_back(l);
        },
        telemetry::telemetry_level::summary);
    start(1, 1, 1, hello_then_eos(), 256, sink);
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":4})");
    ASSERT_TRUE(r);
    std::lock_guard<std::mutex> lock(lines_mutex);
    ASSERT_EQ(lines.size(), 1u);
    const json e = json::parse(lines[0]);
    EXPECT_EQ(e["event"], "http.request");
    EXPECT_EQ(e["stage"], 0);
    EXPECT_EQ(e["attrs"]["skippy.http.endpoint"], "completions");
    EXPECT_EQ(e["attrs"]["skippy.http.finish_reason"], "length");
    EXPECT_EQ(e["attrs"]["skippy.http.completion_tokens"], 4);
    EXPECT_EQ(e["attrs"]["skippy.http.stream"], false);
}

TEST_F(ServerTest, MaxTokensEndsWithLength) {
    start(1, 1, 1, hello_then_eos());
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":5})");
    ASSERT_TRUE(r);
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], "Hello");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
}

TEST_F(ServerTest, AStopStringIsTrimmedAndEndsWithStop) {
    start(1, 1, 1, hello_then_eos());
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":50,"stop":["xyz","lo w"]})");
    ASSERT_TRUE(r);
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["text"], "Hel");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["usage"]["completion_tokens"], 7);  // "Hello w": generation stopped at the match
}

TEST_F(ServerTest, TokenIdPromptsAreUsedAsGiven) {
    start(1, 1, 1, hello_then_eos());
    auto r = post("/v1/completions", R"({"prompt":[1,70,80],"max_tokens":2})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(pipe_->last_prompt(), (std::vector<token_id>{1, 70, 80}));
    expect_openai_error(post("/v1/completions", R"({"prompt":[1,9999]})"), 400);
}

TEST_F(ServerTest, PromptCacheKeyReachesThePipeline) {
    start(1, 1, 1, hello_then_eos());
    auto r = post("/v1/chat/completions", k_chat + R"(,"prompt_cache_key":"tenant-a","max_tokens":1})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(pipe_->last_cache_key(), "tenant-a");
    post("/v1/chat/completions", k_chat + R"(,"max_tokens":1})");
    EXPECT_EQ(pipe_->last_cache_key(), "");
}

TEST_F(ServerTest, StreamingChatSendsRoleContentFinishUsageAndDone) {
    start(1, 1, 1, hello_then_eos());
    pipe_->set_cached_tokens(2);
    auto r = post("/v1/chat/completions", k_chat + R"(,"stream":true,"stream_options":{"include_usage":true}})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    const auto events = sse_payloads(r->body);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.back(), "[DONE]");
    const json first = json::parse(events[0]);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    std::string text;
    std::string finish;
    json usage;
    std::set<std::string> ids;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json c = json::parse(events[i]);
        ids.insert(c["id"].get<std::string>());
        if (c["choices"].empty()) {
            usage = c["usage"];
            continue;
        }
        EXPECT_TRUE(c["usage"].is_null());  // include_usage: null on every ordinary chunk
        const json & ch = c["choices"][0];
        if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(text, "Hello world");
    EXPECT_EQ(finish, "stop");
    EXPECT_EQ(ids.size(), 1u);
    ASSERT_TRUE(usage.is_object());
    EXPECT_EQ(usage["completion_tokens"], 11);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST_F(ServerTest, StreamingWithoutIncludeUsageHasNoUsage) {
    start(1, 1, 1, hello_then_eos());
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3,"stream":true})");
    ASSERT_TRUE(r);
    const auto events = sse_payloads(r->body);
    ASSERT_EQ(events.back(), "[DONE]");
    std::string text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json c = json::parse(events[i]);
        EXPECT_FALSE(c.contains("usage"));
        EXPECT_EQ(c["object"], "text_completion");
        text += c["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, "Hel");
    EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
}

// What a chain's stage 0 reports when stage 2 froze under a step (docs/transport.md,
// "Liveness"): a timeout, by its code.
status stage_timeout() {
    return make_error(error_code::timed_out, "stage 1: stage 2 (127.0.0.1:7102, steps) did not acknowledge step 7 (1 tokens) "
                                             "within its deadline of 2020 ms: the stage is stuck or unreachable");
}

TEST_F(ServerTest, AStageTimeoutIs504NamingTheStage) {
    start(1, 1, 1, hello_then_eos());
    pipe_->fail_decodes(stage_timeout(), 0);
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    expect_openai_error(r, 504, "server_error");
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["code"], "stage_timeout");
    EXPECT_NE(e["message"].get<std::string>().find("stage 2 (127.0.0.1:7102, steps)"), std::string::npos) << r->body;
    // Any other failure of the pipeline stays a plain 500.
    pipe_->fail_decodes(make_error(error_code::peer_closed, "stage 1 (127.0.0.1:7101): connection closed by the peer"), 0);
    auto closed = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    expect_openai_error(closed, 500, "server_error");
    EXPECT_TRUE(json::parse(closed->body)["error"]["code"].is_null()) << closed->body;
}

TEST_F(ServerTest, AStageTimeoutInAStreamEndsItWithAnErrorEventAndNoDone) {
    start(1, 1, 1, hello_then_eos());
    pipe_->fail_decodes(stage_timeout(), 2);  // two tokens reach the client first
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":8,"stream":true})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << "the stream had begun";
    const auto events = sse_payloads(r->body);
    ASSERT_EQ(events.size(), 3u) << r->body;
    EXPECT_EQ(json::parse(events[0])["choices"][0]["text"], "H");
    EXPECT_EQ(json::parse(events[1])["choices"][0]["text"], "e");
    const json last = json::parse(events[2]);
    ASSERT_TRUE(last.contains("error")) << events[2];
    EXPECT_EQ(last["error"]["code"], "stage_timeout");
    EXPECT_NE(last["error"]["message"].get<std::string>().find("stage 2"), std::string::npos) << events[2];
}

TEST_F(ServerTest, StreamedChunksNeverSplitAUtf8Character) {
    auto script = bytes_of("a\xe2\x82\xac" "b\xf0\x9f\x98\x80");
    script.push_back(k_eos);
    start(1, 1, 1, script);
    auto r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":50,"stream":true})");
    ASSERT_TRUE(r);
    const auto events = sse_payloads(r->body);
    std::string text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const std::string piece = json::parse(events[i])["choices"][0]["text"];
        EXPECT_EQ(piece.find("\xef\xbf\xbd"), std::string::npos) << "a chunk held a replacement character";
        text += piece;
    }
    EXPECT_EQ(text, "a\xe2\x82\xac" "b\xf0\x9f\x98\x80");
}

TEST_F(ServerTest, AFullQueueAnswers429) {
    start(1, 0, 30, hello_then_eos());
    pipe_->close_gate();
    auto busy = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    ASSERT_TRUE(pipe_->wait_blocked(1));
    auto refused = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    expect_openai_error(refused, 429, "rate_limit_error");
    pipe_->open_gate();
    auto ok = busy.get();
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    EXPECT_EQ(metric_value(telemetry::metric::queue_rejections, {"full"}), 1);
}

TEST_F(ServerTest, AWaitPastTheQueueTimeoutAnswers503) {
    start(1, 1, 0.05, hello_then_eos());
    pipe_->close_gate();
    auto busy = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    ASSERT_TRUE(pipe_->wait_blocked(1));
    auto late = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    expect_openai_error(late, 503, "server_error");
    EXPECT_EQ(json::parse(late->body)["error"]["code"], "queue_timeout");
    pipe_->open_gate();
    EXPECT_EQ(busy.get()->status, 200);
    EXPECT_EQ(metric_value(telemetry::metric::queue_rejections, {"timeout"}), 1);
}

TEST_F(ServerTest, AQueuedRequestRunsWhenALaneFrees) {
    start(1, 2, 30, hello_then_eos());
    pipe_->close_gate();
    auto first = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    ASSERT_TRUE(pipe_->wait_blocked(1));
    auto second = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    // Wait until the second one is queued (the gauge is refreshed by each scrape).
    bool queued = false;
    for (int i = 0; i < 5000 && !queued; ++i) {
        auto m = client().Get("/metrics");
        queued = m && m->body.find("\nskippy_queue_waiting_requests 1\n") != std::string::npos;
        if (!queued) std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(queued);
    pipe_->open_gate();
    EXPECT_EQ(first.get()->status, 200);
    EXPECT_EQ(second.get()->status, 200);
}

// Drops the connection of a request that holds the only lane; the generation must be
// cancelled (far fewer decodes than max_tokens) and the lane freed for the next request.
void drop_client_and_check_lane_freed(ServerTest & t, fake_pipeline & pipe, int port, bool stream,
                                      const std::function<httplib::Result()> & next_request) {
    pipe.close_gate();
    pipe.permit(2);  // let a couple of tokens through, then hold the lane at the gate
    raw_client dropped(port);
    ASSERT_TRUE(dropped.connected());
    dropped.post("/v1/completions", std::string(R"({"prompt":"Hi","max_tokens":200,"stream":)") + (stream ? "true" : "false") + "}");
    ASSERT_TRUE(pipe.wait_blocked(1));
    if (stream) {
        const std::string got = dropped.read_until("data: ");
        EXPECT_NE(got.find("200 OK"), std::string::npos);
    }
    dropped.drop();
    // One token at a time until the server notices; bounded, never a timing assertion.
    for (int i = 0; i < 150 && pipe.ended() == 0; ++i) {
        pipe.permit(1);
        std::this_thread::sleep_for(2ms);
    }
    ASSERT_EQ(pipe.ended(), 1) << "the dropped request was not cancelled";
    EXPECT_LT(pipe.decodes(), 150);
    pipe.open_gate();
    auto r = next_request();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    (void)t;
}

TEST_F(ServerTest, ADroppedNonStreamingClientFreesItsLane) {
    start(1, 0, 30, bytes_of("abcdefgh"));  // no EOS: would run to max_tokens
    drop_client_and_check_lane_freed(*this, *pipe_, port_, false,
                                     [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    EXPECT_EQ(metric_value(telemetry::metric::generation_requests, {"completions", "cancelled"}), 1);
}

TEST_F(ServerTest, ADroppedStreamingClientFreesItsLane) {
    start(1, 0, 30, bytes_of("abcdefgh"));
    drop_client_and_check_lane_freed(*this, *pipe_, port_, true,
                                     [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    EXPECT_EQ(metric_value(telemetry::metric::generation_requests, {"completions", "cancelled"}), 1);
}

TEST_F(ServerTest, AClientThatLeavesWhileQueuedGivesUpItsPlace) {
    start(1, 1, 30, hello_then_eos());
    pipe_->close_gate();
    auto busy = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    ASSERT_TRUE(pipe_->wait_blocked(1));
    {
        raw_client waiter(port_);
        waiter.post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
        bool queued = false;
        for (int i = 0; i < 5000 && !queued; ++i) {
            auto m = client().Get("/metrics");
            queued = m && m->body.find("\nskippy_queue_waiting_requests 1\n") != std::string::npos;
            if (!queued) std::this_thread::sleep_for(1ms);
        }
        ASSERT_TRUE(queued);
    }  // dropped while waiting
    bool left = false;
    for (int i = 0; i < 5000 && !left; ++i) {
        left = metric_value(telemetry::metric::queue_rejections, {"disconnected"}) == 1;
        if (!left) std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(left);
    pipe_->open_gate();
    EXPECT_EQ(busy.get()->status, 200);
}

TEST_F(ServerTest, StopAnswersWaitersWith503AndCancelsRunningRequests) {
    start(1, 2, 30, bytes_of("abc"));
    pipe_->close_gate();
    auto running = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":100})"); });
    ASSERT_TRUE(pipe_->wait_blocked(1));
    auto waiting = std::async(std::launch::async, [&] { return post("/v1/completions", R"({"prompt":"Hi","max_tokens":3})"); });
    bool queued = false;
    for (int i = 0; i < 5000 && !queued; ++i) {
        auto m = client().Get("/metrics");
        queued = m && m->body.find("\nskippy_queue_waiting_requests 1\n") != std::string::npos;
        if (!queued) std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(queued);
    auto stopper = std::async(std::launch::async, [&] { server_->stop(); });
    expect_openai_error(waiting.get(), 503);
    pipe_->open_gate();  // the running request sees the stop at its next token
    expect_openai_error(running.get(), 503);
    stopper.get();
    EXPECT_LT(pipe_->decodes(), 100);
}

}  // namespace
}  // namespace skippy::http

namespace skippy::http {
namespace {

// --- The agent API: auth, CORS, aliases, tokenize, templates and tool calls. ---

TEST_F(ServerTest, ApiKeysGuardEveryRouteButHealth) {
    start(1, 1, 1, hello_then_eos(), 256, nullptr, [](server_options & o) { o.api_keys = {"k-one", "k-two"}; });
    expect_openai_error(post("/v1/chat/completions", k_chat + "}"), 401);
    auto missing = client().Get("/v1/models");
    expect_openai_error(missing, 401);
    EXPECT_EQ(json::parse(missing->body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(missing->get_header_value("WWW-Authenticate"), "Bearer");
    expect_openai_error(client().Get("/v1/models", {{"Authorization", "Bearer k-on"}}), 401);
    expect_openai_error(client().Get("/v1/models", {{"Authorization", "Bearer k-one2"}}), 401);
    expect_openai_error(client().Get("/metrics", {{"Authorization", "Basic k-one"}}), 401);
    auto ok = client().Get("/v1/models", {{"Authorization", "Bearer k-two"}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    auto chat = client().Post("/v1/chat/completions", {{"Authorization", "Bearer k-one"}}, k_chat + "}", "application/json");
    ASSERT_TRUE(chat);
    EXPECT_EQ(chat->status, 200) << chat->body;
    auto health = client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
}

TEST(BearerKey, MatchesOnlyAWholeKey) {
    const std::vector<std::string> keys = {"secret", "other-key"};
    const std::string good = "Bearer secret", lower = "bearer other-key", prefix = "Bearer secre", longer = "Bearer secrets",
                      empty = "Bearer ", none = "secret";
    EXPECT_TRUE(bearer_key_matches(&good, keys));
    EXPECT_TRUE(bearer_key_matches(&lower, keys));
    EXPECT_FALSE(bearer_key_matches(&prefix, keys));
    EXPECT_FALSE(bearer_key_matches(&longer, keys));
    EXPECT_FALSE(bearer_key_matches(&empty, keys));
    EXPECT_FALSE(bearer_key_matches(&none, keys));
    EXPECT_FALSE(bearer_key_matches(nullptr, keys));
}

TEST_F(ServerTest, CorsIsOffByDefault) {
    start(1, 1, 1, hello_then_eos());
    auto r = client().Get("/v1/models", {{"Origin", "https://app.example"}});
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
    auto pre = client().Options("/v1/chat/completions",
                                {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 405);
    EXPECT_FALSE(pre->has_header("Access-Control-Allow-Origin"));
}

TEST_F(ServerTest, CorsPreflightAndResponsesForTheAllowedOrigin) {
    start(1, 1, 1, hello_then_eos(), 256, nullptr, [](server_options & o) {
        o.cors_origin = "https://app.example";
        o.api_keys = {"k"};
    });
    // A preflight carries no credentials: answered before the key check.
    auto pre = client().Options("/chat/completions", {{"Origin", "https://app.example"},
                                                      {"Access-Control-Request-Method", "POST"},
                                                      {"Access-Control-Request-Headers", "authorization, content-type"}});
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Methods"), "POST, OPTIONS");
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
    EXPECT_EQ(pre->get_header_value("Vary"), "Origin");
    auto r = client().Post("/v1/chat/completions", {{"Origin", "https://app.example"}, {"Authorization", "Bearer k"}},
                           k_chat + ",\"stream\":true}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    auto denied = client().Get("/v1/models", {{"Origin", "https://app.example"}});  // a 401 is readable too
    ASSERT_TRUE(denied);
    EXPECT_EQ(denied->status, 401);
    EXPECT_EQ(denied->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    auto other = client().Options("/v1/models", {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "GET"}});
    ASSERT_TRUE(other);
    EXPECT_NE(other->status, 204);
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
}

TEST_F(ServerTest, RoutesWithoutV1AreAliasesAndResponsesCarryAFingerprint) {
    start(1, 1, 1, hello_then_eos());
    auto m = client().Get("/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "fake");
    auto c = post("/chat/completions", k_chat + "}");
    ASSERT_TRUE(c);
    ASSERT_EQ(c->status, 200);
    const json j = json::parse(c->body);
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello world");
    EXPECT_EQ(j["system_fingerprint"].get<std::string>().rfind("fp_", 0), 0u);
    auto t = post("/completions", R"({"prompt":"Hi","max_tokens":2})");
    ASSERT_TRUE(t);
    EXPECT_EQ(json::parse(t->body)["system_fingerprint"], j["system_fingerprint"]);
    auto s = post("/v1/chat/completions", k_chat + ",\"stream\":true}");
    ASSERT_TRUE(s);
    for (const std::string & p : sse_payloads(s->body)) {
        if (p == "[DONE]") continue;
        EXPECT_EQ(json::parse(p)["system_fingerprint"], j["system_fingerprint"]) << p;
    }
}

TEST_F(ServerTest, TokenizeAndDetokenize) {
    start(1, 1, 1, hello_then_eos());
    auto t = post("/tokenize", R"({"content":"Hi"})");
    ASSERT_TRUE(t);
    ASSERT_EQ(t->status, 200) << t->body;
    const json tokens = json::parse(t->body)["tokens"];
    EXPECT_EQ(tokens, json(tok_->tokenize("Hi", false, true)));
    auto with_bos = post("/tokenize", R"({"content":"Hi","add_special":true})");
    ASSERT_TRUE(with_bos);
    EXPECT_EQ(json::parse(with_bos->body)["tokens"], json(tok_->tokenize("Hi", tok_->add_bos_default(), true)));
    auto d = post("/detokenize", json{{"tokens", tokens}}.dump());
    ASSERT_TRUE(d);
    ASSERT_EQ(d->status, 200) << d->body;
    EXPECT_EQ(json::parse(d->body)["content"], tok_->detokenize(tokens.get<std::vector<token_id>>()));
    expect_openai_error(post("/tokenize", R"({"content":5})"), 400);
    expect_openai_error(post("/tokenize", "[]"), 400);
    expect_openai_error(post("/detokenize", R"({"tokens":[-1]})"), 400);
    expect_openai_error(post("/detokenize", R"({"tokens":[99999999]})"), 400);
    expect_openai_error(client().Get("/tokenize"), 405);
}

// A Hermes-style template (Qwen3's markers) small enough to read; the comment names
// <think>, so the answer's reasoning is read as Qwen3's.
const char * k_hermes_template = R"({#- answers may open with <think> -#}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}</tool_call>{% endfor %}<|im_end|>
{% endfor -%}
{%- if tools %}{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}{% endif -%}
{%- if messages[-1].content == 'raise' %}{{ raise_exception('the template refuses this') }}{% endif -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %})";

const std::string k_tool_chat =
    R"({"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";

std::vector<token_id> script_of(const std::string & text) {
    auto s = bytes_of(text);
    s.push_back(k_eos);
    return s;
}

void use_hermes(server_options & o) {
    auto t = chat::chat_template::from_jinja(k_hermes_template, "<s>", "</s>");
    ASSERT_TRUE(t.is_ok()) << t.error().to_string();
    o.chat_template = std::make_shared<const chat::chat_template>(std::move(t).value());
}

TEST_F(ServerTest, ToolCallsComeBackAsToolCalls) {
    start(1, 1, 1,
          script_of("<think>\nweather tool\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\"}}\n</tool_call>"),
          256, nullptr, use_hermes);
    auto r = post("/v1/chat/completions", k_tool_chat + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    const json & m = j["choices"][0]["message"];
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_TRUE(m["content"].is_null()) << m;
    EXPECT_EQ(m["reasoning_content"], "weather tool");
    ASSERT_EQ(m["tool_calls"].size(), 1u);
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
    // The prompt the template rendered, tools included, reached the pipeline.
    const std::string prompt = tok_->detokenize(pipe_->last_prompt(), true);
    EXPECT_NE(prompt.find("get_weather]<|im_start|>assistant"), std::string::npos) << prompt;

    // Streaming: reasoning, then the call's name, then its arguments, then tool_calls.
    auto s = post("/v1/chat/completions", k_tool_chat + R"(,"stream":true})");
    ASSERT_TRUE(s);
    ASSERT_EQ(s->status, 200);
    std::string reasoning, content, name, arguments, finish;
    int name_chunks = 0;
    for (const std::string & p : sse_payloads(s->body)) {
        if (p == "[DONE]") continue;
        const json c = json::parse(p);
        const json & d = c["choices"][0]["delta"];
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (d.contains("tool_calls")) {
            const json & tc = d["tool_calls"][0];
            EXPECT_EQ(tc["index"], 0);
            if (tc["function"].contains("name")) {
                ++name_chunks;
                EXPECT_TRUE(arguments.empty());
                EXPECT_EQ(tc["id"].get<std::string>().rfind("call_", 0), 0u);
                name = tc["function"]["name"];
            }
            arguments += tc["function"]["arguments"].get<std::string>();
        }
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(reasoning, "weather tool");
    EXPECT_EQ(content, "");
    EXPECT_EQ(name_chunks, 1);
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}}));
    EXPECT_EQ(finish, "tool_calls");
}

TEST_F(ServerTest, AToolCallTheModelGotWrongIsPlainText) {
    const std::string wrong = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    start(1, 1, 1, script_of(wrong), 256, nullptr, use_hermes);
    auto r = post("/v1/chat/completions", k_tool_chat + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["choices"][0]["message"]["content"], wrong);
    EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ServerTest, ToolMessagesGoThroughTheTemplateAndItsErrorsAre400) {
    start(1, 1, 1, hello_then_eos(), 256, nullptr, use_hermes);
    auto r = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"weather?"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"sunny"}]})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string prompt = tok_->detokenize(pipe_->last_prompt(), true);
    EXPECT_NE(prompt.find("<tool_call>get_weather</tool_call>"), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("<|im_start|>tool\nsunny"), std::string::npos) << prompt;
    auto raised = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"raise"}]})");
    expect_openai_error(raised, 400);
    EXPECT_EQ(json::parse(raised->body)["error"]["message"], "the template refuses this");
}

TEST_F(ServerTest, RequiredToolChoiceNeedsSchemasItsGrammarCanRead) {
    start(1, 1, 1, hello_then_eos(), 256, nullptr, use_hermes);
    auto ok = post("/v1/chat/completions", k_tool_chat + R"(,"tool_choice":"required"})");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
    auto bad = post("/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"f"}},)"
                    R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                    R"("properties":{"a":{"$ref":"#/nowhere"}}}}}]})");
    expect_openai_error(bad, 400);
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], "tools");
}

TEST_F(ServerTest, ToolsOnABuiltinTemplateAre400) {
    start(1, 1, 1, hello_then_eos());
    expect_openai_error(post("/v1/chat/completions", k_tool_chat + "}"), 400);
    // tool_choice none: the tools are not used, so any template serves.
    auto r = post("/v1/chat/completions", k_tool_chat + R"(,"tool_choice":"none"})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace skippy::http
