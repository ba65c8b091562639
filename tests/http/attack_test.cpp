// `skippy serve` under the attacks issue 17 found: slowloris connections that trickle
// a header byte at a time, idle connects, and a huge chunked body. Well-behaved
// requests must still be answered while the bad connections are open (their latency
// goes into the test log, unloaded and loaded; it is reported, not asserted), and the
// body must be refused without the server's memory growing by more than a few MiB
// (read from /proc/<pid>/status: a bound, not a timing).
#include "child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace skippy::http {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using json = nlohmann::json;
using testing::start_serve;

const std::string k_binary = SKIPPY_BINARY_PATH;
const std::string k_model = SKIPPY_HTTP_MODEL_PATH;

int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// The server closed this connection (it is readable and reads end-of-stream or an error).
bool closed_by_server(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) <= 0;
}

// Raises this process's open-file limit to at least `n` (the test holds ~1,200 sockets).
bool raise_fd_limit(rlim_t n) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return false;
    if (lim.rlim_cur >= n) return true;
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < n) return false;
    lim.rlim_cur = n;
    return setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

double ms_since(clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); }

struct timed {
    int         status = 0;
    double      ms = 0;
    std::string body;
};

timed get_health(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    const auto t0 = clock::now();
    auto r = c.Get("/health");
    return {r ? r->status : 0, ms_since(t0), r ? r->body : ""};
}

timed completion(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    const auto t0 = clock::now();
    auto r = c.Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0,"logit_bias":{"2":-100}})",
                    "application/json");
    return {r ? r->status : 0, ms_since(t0), r ? r->body : ""};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

TEST(serve_under_attack, HealthAndACompletionAnswerWhileSlowAndIdleConnectionsAreOpen) {
    constexpr int n_slowloris = 200;
    constexpr int n_idle = 1000;
    ASSERT_TRUE(raise_fd_limit(n_slowloris + n_idle + 256)) << "ulimit -n too low for the test";
    // Deadlines far beyond the test, so that the bad connections stay open throughout:
    // the point is that they cost the others nothing, not that they get closed.
    auto s = start_serve(k_binary, {"-m", k_model, "-t", "1", "--lanes", "2", "--idle-timeout-s", "300",
                                    "--head-timeout-s", "300"});
    ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");

    for (int i = 0; i < 3; ++i) ASSERT_EQ(completion(s.port).status, 200);  // warm: caches, pages, lanes
    std::vector<double> health_unloaded, completion_unloaded;
    std::string unloaded_text;
    for (int i = 0; i < 5; ++i) {
        const timed h = get_health(s.port);
        ASSERT_EQ(h.status, 200);
        health_unloaded.push_back(h.ms);
        const timed c = completion(s.port);
        ASSERT_EQ(c.status, 200) << c.body;
        completion_unloaded.push_back(c.ms);
        unloaded_text = json::parse(c.body)["choices"][0]["text"];
    }

    std::vector<int> idle, slow;
    for (int i = 0; i < n_idle; ++i) {
        idle.push_back(connect_to(s.port));
        ASSERT_GE(idle.back(), 0) << "connect " << i;
    }
    for (int i = 0; i < n_slowloris; ++i) {
        slow.push_back(connect_to(s.port));
        ASSERT_GE(slow.back(), 0);
        const std::string start = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
        ASSERT_EQ(::send(slow.back(), start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
    }
    // Each slow connection sends one more header byte every second, forever.
    std::atomic<bool> attacking{true};
    std::thread trickle([&] {
        while (attacking) {
            for (int fd : slow) (void)::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            for (int i = 0; i < 10 && attacking; ++i) std::this_thread::sleep_for(100ms);
        }
    });
    std::this_thread::sleep_for(1500ms);  // every connection accepted, a byte or two trickled

    std::vector<double> health_loaded, completion_loaded;
    for (int i = 0; i < 5; ++i) {
        const timed h = get_health(s.port);
        EXPECT_EQ(h.status, 200) << "health under attack";
        EXPECT_EQ(h.body, "{\"status\":\"ok\"}");
        health_loaded.push_back(h.ms);
        const timed c = completion(s.port);
        ASSERT_EQ(c.status, 200) << c.body;
        const json j = json::parse(c.body);
        EXPECT_EQ(j["usage"]["completion_tokens"], 4);
        EXPECT_EQ(j["choices"][0]["text"], unloaded_text);
        completion_loaded.push_back(c.ms);
    }
    // The bad connections were all still there while the good requests were answered.
    int n_closed = 0;
    for (int fd : idle) n_closed += closed_by_server(fd) ? 1 : 0;
    for (int fd : slow) n_closed += closed_by_server(fd) ? 1 : 0;
    EXPECT_EQ(n_closed, 0);

    attacking = false;
    trickle.join();
    const std::string report =
        "with " + std::to_string(n_slowloris) + " slowloris and " + std::to_string(n_idle) +
        " idle connections open: /health median " + std::to_string(median(health_loaded)) + " ms (unloaded " +
        std::to_string(median(health_unloaded)) + " ms), 4-token completion median " +
        std::to_string(median(completion_loaded)) + " ms (unloaded " + std::to_string(median(completion_unloaded)) + " ms)";
    std::printf("%s\n", report.c_str());
    ::testing::Test::RecordProperty("latency", report);
    ::testing::Test::RecordProperty("health_loaded_ms", std::to_string(median(health_loaded)));
    ::testing::Test::RecordProperty("health_unloaded_ms", std::to_string(median(health_unloaded)));
    ::testing::Test::RecordProperty("completion_loaded_ms", std::to_string(median(completion_loaded)));
    ::testing::Test::RecordProperty("completion_unloaded_ms", std::to_string(median(completion_unloaded)));
    for (int fd : idle) ::close(fd);
    for (int fd : slow) ::close(fd);
    EXPECT_EQ(s.proc->stop(), 0);
}

// Sends a chunked body of `total_bytes` in 64 KiB chunks until the server answers;
// returns the status of that answer (0: none).
int send_chunked_until_answered(int fd, size_t total_bytes) {
    const std::string head =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(head.size())) return 0;
    char size_line[16];
    std::snprintf(size_line, sizeof(size_line), "%x\r\n", 64 << 10);
    const std::string chunk = size_line + std::string(64 << 10, 'a') + "\r\n";
    std::string answer;
    for (size_t sent = 0; sent < total_bytes;) {
        pollfd p{fd, POLLIN | POLLOUT, 0};
        if (::poll(&p, 1, 5000) <= 0) break;
        if (p.revents & POLLIN) break;  // the server answered
        const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN) break;
        if (n > 0) sent += static_cast<size_t>(n);
    }
    char buf[4096];
    for (int i = 0; i < 100 && answer.find("\r\n\r\n") == std::string::npos; ++i) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        answer.append(buf, static_cast<size_t>(n));
    }
    return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
}

TEST(serve_under_attack, AHugeChunkedBodyIs413AndTheServerDoesNotGrow) {
    constexpr size_t max_body = 1 << 20;
    constexpr size_t allowed_growth = 6 << 20;  // "a few MiB": the 1 MiB body limit, its buffer's doubling, slack
    auto s = start_serve(k_binary, {"-m", k_model, "-t", "1", "--lanes", "1", "--max-body-bytes", std::to_string(max_body)});
    ASSERT_GT(s.port, 0) << (s.proc ? s.proc->stderr_text() : "did not start");
    ASSERT_EQ(get_health(s.port).status, 200);
    const pid_t pid = s.proc->pid();
    const size_t rss_before = testing::proc_status_bytes(pid, "VmRSS");
    const size_t hwm_before = testing::proc_status_bytes(pid, "VmHWM");
    ASSERT_GT(rss_before, 0u);

    std::atomic<bool> sampling{true};
    std::atomic<size_t> rss_peak{rss_before};
    std::thread sampler([&] {
        while (sampling) {
            rss_peak = std::max(rss_peak.load(), testing::proc_status_bytes(pid, "VmRSS"));
            std::this_thread::sleep_for(2ms);
        }
    });
    const int fd = connect_to(s.port);
    ASSERT_GE(fd, 0);
    const int status = send_chunked_until_answered(fd, size_t(64) << 20);
    ::close(fd);
    // Announced with Content-Length, it is refused before a byte of it is read.
    const int fd2 = connect_to(s.port);
    const std::string announced = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n";
    ASSERT_EQ(::send(fd2, announced.data(), announced.size(), MSG_NOSIGNAL), static_cast<ssize_t>(announced.size()));
    char buf[256] = {};
    pollfd p{fd2, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 10000), 0);
    ASSERT_GT(::recv(fd2, buf, sizeof(buf) - 1, 0), 12);
    ::close(fd2);
    sampling = false;
    sampler.join();

    EXPECT_EQ(status, 413);
    EXPECT_EQ(std::atoi(buf + 9), 413);
    const size_t hwm_after = testing::proc_status_bytes(pid, "VmHWM");
    std::printf("64 MiB chunked body: RSS %zu KiB before, peak %zu KiB; VmHWM %zu -> %zu KiB\n", rss_before >> 10,
                rss_peak.load() >> 10, hwm_before >> 10, hwm_after >> 10);
    EXPECT_LE(rss_peak.load(), rss_before + allowed_growth);
    EXPECT_LE(hwm_after, std::max(hwm_before, rss_before) + allowed_growth);
    // And it still serves.
    EXPECT_EQ(completion(s.port).status, 200);
    EXPECT_EQ(s.proc->stop(), 0);
}

}  // namespace
}  // namespace skippy::http
