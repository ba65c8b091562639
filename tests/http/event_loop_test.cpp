// The event loop over loopback sockets: keep-alive, pipelining, refusals that close,
// the connection cap, deadlines, 100-continue, and bounded buffering of a stream to a
// client that does not read. Each waits for what it checks with a generous bound; no
// assertion is on a duration.
#include "http/event_loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace skippy::http {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

struct response {
    int         status = 0;  // 0: none (closed or timed out first)
    std::string head;
    std::string body;
};

// A bare TCP client that reads responses itself.
class raw_conn {
public:
    explicit raw_conn(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
    }
    ~raw_conn() { close(); }
    raw_conn(const raw_conn &) = delete;
    raw_conn & operator=(const raw_conn &) = delete;

    bool connected() const { return connected_; }
    bool send(std::string_view bytes) {
        return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
    }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    // Reads bytes into the buffer until `done(buffer)` or the peer closes or `wait` passes.
    bool fill_until(const std::function<bool()> & done, std::chrono::milliseconds wait = 10s) {
        const auto deadline = clock::now() + wait;
        while (!done()) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
            if (left <= 0) return false;
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
            char buf[65536];
            const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
            if (n <= 0) {
                eof_ = true;
                return done();
            }
            in_.append(buf, static_cast<size_t>(n));
        }
        return true;
    }

    // One response (Content-Length, chunked, or until close).
    response read_response(std::chrono::milliseconds wait = 10s) {
        response r;
        if (!fill_until([&] { return in_.find("\r\n\r\n") != std::string::npos; }, wait)) return r;
        const size_t end = in_.find("\r\n\r\n");
        r.head = in_.substr(0, end + 4);
        in_.erase(0, end + 4);
        r.status = std::atoi(r.head.c_str() + 9);
        std::string lower = r.head;
        for (char & c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (r.status == 100) return r;
        if (const size_t cl = lower.find("content-length: "); cl != std::string::npos) {
            const size_t n = std::strtoull(lower.c_str() + cl + 16, nullptr, 10);
            fill_until([&] { return in_.size() >= n; }, wait);
            r.body = in_.substr(0, n);
            in_.erase(0, std::min(n, in_.size()));
        } else if (lower.find("transfer-encoding: chunked") != std::string::npos) {
            for (;;) {
                if (!fill_until([&] { return in_.find("\r\n") != std::string::npos; }, wait)) break;
                const size_t n = std::strtoull(in_.c_str(), nullptr, 16);
                const size_t line = in_.find("\r\n") + 2;
                if (!fill_until([&] { return in_.size() >= line + n + 2; }, wait)) break;
                r.body += in_.substr(line, n);
                in_.erase(0, line + n + 2);
                if (n == 0) break;
            }
        } else {
            fill_until([] { return false; }, wait);  // until the close
            r.body = std::move(in_);
            in_.clear();
        }
        return r;
    }

    // True once the server closed the connection (end of stream), within `wait`.
    bool closed_by_peer(std::chrono::milliseconds wait = 10s) {
        fill_until([&] { return eof_; }, wait);
        return eof_;
    }
    const std::string & unread() const { return in_; }

private:
    int         fd_ = -1;
    bool        connected_ = false;
    bool        eof_ = false;
    std::string in_;
};

std::string get(const std::string & path, const std::string & extra = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}
std::string post(const std::string & path, const std::string & body) {
    return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A loop on a background thread with a test handler:
//   /echo     answers 200 with the request body (or the path when it has none)
//   /hold     keeps the channel; the test answers it (release_held)
//   /stream   a thread writes stream_chunks chunks of 64 KiB, counting what write() took
class LoopTest : public ::testing::Test {
protected:
    void start(loop_options o = {}) {
        o.host = "127.0.0.1";
        o.port = 0;
        loop_ = std::make_unique<event_loop>(o, [this](http_request req, channel_ptr ch) { handle(std::move(req), ch); });
        ASSERT_TRUE(loop_->bind().is_ok());
        port_ = loop_->port();
        thread_ = std::thread([this] { loop_->run(); });
    }
    void TearDown() override {
        release_held();
        if (loop_) loop_->stop();
        if (thread_.joinable()) thread_.join();
        for (auto & t : writers_) t.join();
    }

    void handle(http_request req, const channel_ptr & ch) {
        if (req.path == "/echo") {
            http_response r;
            r.content_type = "text/plain";
            r.body = req.body.empty() ? req.path : req.body;
            return ch->respond(std::move(r));
        }
        if (req.path == "/hold") {
            std::lock_guard<std::mutex> lock(mutex_);
            held_.push_back(ch);
            cv_.notify_all();
            return;
        }
        if (req.path == "/stream") {
            writers_.emplace_back([this, ch] {
                http_response head;
                head.content_type = "text/plain";
                ch->begin_stream(head);
                const std::string chunk(64 << 10, 's');
                bool ok = true;
                for (int i = 0; i < stream_chunks_ && ok; ++i) {
                    ok = ch->write(chunk);
                    if (ok) accepted_bytes_ += chunk.size();
                }
                if (ok) {
                    ch->end_stream();
                } else {
                    ch->abort_stream();
                }
                writer_saw_failure_ = !ok;
                writer_done_ = true;
            });
            return;
        }
        ch->respond(error_response(404, "no such route"));
    }

    bool wait_held(size_t n) {
        std::unique_lock<std::mutex> lock(mutex_);
        return cv_.wait_for(lock, 10s, [&] { return held_.size() >= n; });
    }
    void release_held() {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto & ch : held_) ch->respond(http_response{});
        held_.clear();
    }

    std::unique_ptr<event_loop> loop_;
    std::thread                 thread_;
    int                         port_ = 0;
    std::mutex                  mutex_;
    std::condition_variable     cv_;
    std::vector<channel_ptr>    held_;
    std::vector<std::thread>    writers_;
    int                         stream_chunks_ = 1024;  // 64 MiB
    std::atomic<size_t>         accepted_bytes_{0};
    std::atomic<bool>           writer_done_{false};
    std::atomic<bool>           writer_saw_failure_{false};
};

TEST_F(LoopTest, KeepAliveServesSeveralRequestsOnOneConnection) {
    start();
    raw_conn c(port_);
    ASSERT_TRUE(c.connected());
    for (const char * body : {"one", "two", "three"}) {
        ASSERT_TRUE(c.send(post("/echo", body)));
        const response r = c.read_response();
        EXPECT_EQ(r.status, 200) << r.head;
        EXPECT_EQ(r.body, body);
        EXPECT_EQ(r.head.find("Connection: close"), std::string::npos);
    }
    ASSERT_TRUE(c.send(get("/echo", "Connection: close\r\n")));
    const response last = c.read_response();
    EXPECT_EQ(last.status, 200);
    EXPECT_NE(last.head.find("Connection: close"), std::string::npos);
    EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(LoopTest, PipelinedRequestsAreAnsweredInOrder) {
    start();
    raw_conn c(port_);
    ASSERT_TRUE(c.send(post("/echo", "first") + get("/hold") + post("/echo", "third")));
    const response first = c.read_response();
    EXPECT_EQ(first.body, "first");
    ASSERT_TRUE(wait_held(1));
    // The third waits behind the held second one.
    EXPECT_EQ(c.read_response(200ms).status, 0);
    release_held();
    EXPECT_EQ(c.read_response().status, 200);  // the second
    const response third = c.read_response();
    EXPECT_EQ(third.status, 200);
    EXPECT_EQ(third.body, "third");
}

TEST_F(LoopTest, HttpOneZeroClosesAfterTheResponseUnlessKeptAlive) {
    start();
    raw_conn c(port_);
    ASSERT_TRUE(c.send("GET /echo HTTP/1.0\r\n\r\n"));
    EXPECT_EQ(c.read_response().status, 200);
    EXPECT_TRUE(c.closed_by_peer());
    raw_conn k(port_);
    ASSERT_TRUE(k.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    const response r = k.read_response();
    EXPECT_NE(r.head.find("Connection: keep-alive"), std::string::npos);
    ASSERT_TRUE(k.send("GET /echo HTTP/1.0\r\n\r\n"));
    EXPECT_EQ(k.read_response().status, 200);
}

TEST_F(LoopTest, MalformedHeadsAreAnsweredAndClosed) {
    loop_options o;
    o.limits.max_head_bytes = 4096;
    o.limits.max_headers = 16;
    o.limits.max_body_bytes = 1024;
    start(o);
    std::string many = "GET /echo HTTP/1.1\r\n";
    for (int i = 0; i < 20; ++i) many += "H" + std::to_string(i) + ": v\r\n";
    const std::pair<std::string, int> cases[] = {
        {"GARBAGE\r\n\r\n", 400},
        {"GET /echo HTTP/1.1\r\nX: " + std::string(5000, 'v') + "\r\n\r\n", 431},
        {many + "\r\n", 431},
        {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", 400},
        {"POST /echo HTTP/1.1\r\nContent-Length: -4\r\n\r\n", 400},
        {"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", 400},
        {"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nab", 400},
        {"POST /echo HTTP/1.1\r\nContent-Length: 2048\r\n\r\n", 413},
        {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n" + std::string(512, 'x') + "\r\n201\r\n", 413},
        {"GET /echo HTTP/3.0\r\n\r\n", 505},
    };
    for (const auto & [bytes, want] : cases) {
        raw_conn c(port_);
        ASSERT_TRUE(c.send(bytes));
        const response r = c.read_response();
        EXPECT_EQ(r.status, want) << bytes.substr(0, 80);
        EXPECT_NE(r.head.find("Connection: close"), std::string::npos);
        const auto j = nlohmann::json::parse(r.body, nullptr, false);
        ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
        EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
        EXPECT_TRUE(c.closed_by_peer()) << bytes.substr(0, 80);
    }
    // Still serving.
    raw_conn ok(port_);
    ASSERT_TRUE(ok.send(get("/echo")));
    EXPECT_EQ(ok.read_response().status, 200);
}

TEST_F(LoopTest, ExpectContinueGetsAnInterimResponseBeforeTheBody) {
    start();
    raw_conn c(port_);
    ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    const response interim = c.read_response();
    EXPECT_EQ(interim.status, 100);
    ASSERT_TRUE(c.send("hello"));
    const response r = c.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello");
    // A body over the limit is refused at once, without a 100.
    raw_conn big(port_);
    ASSERT_TRUE(big.send("POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 999999999\r\n\r\n"));
    EXPECT_EQ(big.read_response().status, 413);
}

TEST_F(LoopTest, AtTheCapANewConnectionGets503WhenNoneCanBeShed) {
    loop_options o;
    o.max_connections = 3;
    start(o);
    std::vector<std::unique_ptr<raw_conn>> busy;
    for (int i = 0; i < 3; ++i) {
        busy.push_back(std::make_unique<raw_conn>(port_));
        ASSERT_TRUE(busy.back()->send(get("/hold")));
    }
    ASSERT_TRUE(wait_held(3));
    raw_conn beyond(port_);
    ASSERT_TRUE(beyond.connected());
    const response r = beyond.read_response();
    EXPECT_EQ(r.status, 503);
    EXPECT_TRUE(beyond.closed_by_peer());
    release_held();
    for (auto & c : busy) EXPECT_EQ(c->read_response().status, 200);
}

TEST_F(LoopTest, AtTheCapIdleConnectionsAreShedFirst) {
    loop_options o;
    o.max_connections = 3;
    o.idle_timeout_s = 600;
    start(o);
    raw_conn idle1(port_), idle2(port_), idle3(port_);
    // Wait until all three are accepted (a request on each proves it), then idle again.
    for (raw_conn * c : {&idle1, &idle2, &idle3}) {
        ASSERT_TRUE(c->send(get("/echo")));
        ASSERT_EQ(c->read_response().status, 200);
    }
    raw_conn fresh(port_);
    ASSERT_TRUE(fresh.send(get("/echo")));
    EXPECT_EQ(fresh.read_response().status, 200);
    EXPECT_TRUE(idle1.closed_by_peer());    // the longest idle went
    EXPECT_FALSE(idle3.closed_by_peer(200ms));
    EXPECT_EQ(loop_->n_open(), 3);
}

TEST_F(LoopTest, AHeadThatDoesNotArriveInTimeIs408AndClosed) {
    loop_options o;
    o.head_timeout_s = 0.3;
    start(o);
    raw_conn partial(port_);
    ASSERT_TRUE(partial.send("GET /echo HTTP/1.1\r\nHost"));
    const response r = partial.read_response();
    EXPECT_EQ(r.status, 408);
    EXPECT_TRUE(partial.closed_by_peer());

    // A trickler that keeps sending is closed all the same: the deadline is for the whole head.
    raw_conn trickler(port_);
    ASSERT_TRUE(trickler.send("GET /echo HTTP/1.1\r\n"));
    bool closed = false;
    for (int i = 0; i < 200 && !closed; ++i) {
        trickler.send("X");
        closed = trickler.closed_by_peer(50ms);
    }
    EXPECT_TRUE(closed);
    EXPECT_NE(trickler.unread().find(" 408 "), std::string::npos);
}

TEST_F(LoopTest, AnIdleConnectionIsClosedSilently) {
    loop_options o;
    o.idle_timeout_s = 0.2;
    start(o);
    raw_conn c(port_);
    ASSERT_TRUE(c.send(get("/echo")));
    EXPECT_EQ(c.read_response().status, 200);
    EXPECT_TRUE(c.closed_by_peer());
    EXPECT_TRUE(c.unread().empty());
}

TEST_F(LoopTest, ABodyBelowTheMinimumRateIs408) {
    loop_options o;
    o.body_timeout_s = 0.2;
    o.min_body_bytes_per_s = 1000;
    start(o);
    raw_conn c(port_);
    ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nContent-Length: 100000\r\n\r\n0123456789"));
    EXPECT_EQ(c.read_response().status, 408);
    EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(LoopTest, AStreamToAClientThatDoesNotReadStaysBounded) {
    loop_options o;
    o.max_output_bytes = 256 << 10;
    start(o);
    raw_conn c(port_);
    ASSERT_TRUE(c.send(get("/stream")));
    // The writer runs until the connection's buffer and the sockets' are full, then blocks.
    size_t last = 0;
    for (int stable = 0, i = 0; i < 400 && stable < 10; ++i) {
        std::this_thread::sleep_for(20ms);
        const size_t now = accepted_bytes_;
        stable = now == last ? stable + 1 : 0;
        last = now;
    }
    const size_t total = static_cast<size_t>(stream_chunks_) * (64 << 10);
    EXPECT_FALSE(writer_done_);
    EXPECT_LT(accepted_bytes_.load(), total / 2) << "the writer was not held back";
    // Reading drains it: the whole stream arrives and the writer finishes.
    const response r = c.read_response(30s);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), total);
    // The last bytes can reach the client before the writer's thread marks itself done.
    for (int i = 0; i < 1000 && !writer_done_; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(writer_done_);
    EXPECT_FALSE(writer_saw_failure_);
}

TEST_F(LoopTest, AStreamWriterLearnsThatTheClientLeft) {
    start();
    {
        raw_conn c(port_);
        ASSERT_TRUE(c.send(get("/stream")));
        ASSERT_TRUE(c.fill_until([&] { return accepted_bytes_ > 0; }));
    }  // closed without reading
    for (int i = 0; i < 1000 && !writer_done_; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(writer_done_);
    EXPECT_TRUE(writer_saw_failure_);
}

TEST_F(LoopTest, AHeldRequestSeesItsClientGo) {
    start();
    {
        raw_conn c(port_);
        ASSERT_TRUE(c.send(get("/hold")));
        ASSERT_TRUE(wait_held(1));
    }
    channel_ptr ch;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ch = held_[0];
    }
    bool gone = false;
    for (int i = 0; i < 1000 && !gone; ++i) {
        gone = ch->gone();
        if (!gone) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(gone);
}

}  // namespace
}  // namespace skippy::http
