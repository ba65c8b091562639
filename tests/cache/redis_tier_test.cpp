// The Redis tier against a real redis-server started on a free loopback port: two
// caches ("processes") share prefixes; values with a wrong length or checksum are
// never served; the server stopped mid-run, a 200 ms delaying proxy and a server
// answering garbage all become misses with error decisions within a bounded wait.
#include "cache/page_record.h"
#include "cache/redis_client.h"
#include "cache/redis_tier.h"
#include "cache/stage_cache.h"

#include "common/test_data.h"
#include "fakes.h"
#include "loopback.h"
#include "tier_fakes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <poll.h>
#include <thread>
#include <unistd.h>

namespace skippy::cache {
namespace {

using testing::connect_loopback;
using testing::expected_kv;
using testing::listen_loopback;
using testing::fake_kv_backend;
using testing::recording_sink;
using toks = std::vector<token_id>;
using clock_type = std::chrono::steady_clock;

toks run(int32_t first, int n) { return testing::run_of(first, n); }
toks prefix(const toks & t, size_t n) { return toks(t.begin(), t.begin() + static_cast<ptrdiff_t>(n)); }

double ms_since(clock_type::time_point t0) { return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count(); }

std::string redis_server_binary() {
    for (const char * p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
        if (std::filesystem::exists(p)) return p;
    }
    return {};
}

// A userspace TCP proxy that holds every chunk for `delay` before passing it on.
class delaying_proxy {
public:
    delaying_proxy(int target_port, std::chrono::milliseconds delay) : target_(target_port), delay_(delay) {
        listen_fd_ = listen_loopback(port_);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~delaying_proxy() {
        stop_ = true;
        ::shutdown(listen_fd_, SHUT_RDWR);
        acceptor_.join();
        for (std::thread & t : pumps_) t.join();
        ::close(listen_fd_);
    }
    int port() const { return port_; }

private:
    void accept_loop() {
        while (!stop_) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            const int server = connect_loopback(target_);
            if (server < 0) {
                ::close(client);
                continue;
            }
            pumps_.emplace_back([this, client, server] { pump(client, server); });
            pumps_.emplace_back([this, client, server] { pump(server, client); });
        }
    }
    void pump(int from, int to) {
        char buf[65536];
        while (!stop_) {
            pollfd p{from, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const ssize_t n = ::read(from, buf, sizeof(buf));
            if (n <= 0) break;
            std::this_thread::sleep_for(delay_);
            if (::send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
        }
        ::shutdown(to, SHUT_RDWR);
    }

    int                       target_;
    std::chrono::milliseconds delay_;
    int                       listen_fd_ = -1;
    int                       port_ = 0;
    std::atomic<bool>         stop_{false};
    std::thread               acceptor_;
    std::vector<std::thread>  pumps_;
};

// Answers every connection with `reply` (garbage), forever.
class babbling_server {
public:
    explicit babbling_server(std::string reply) : reply_(std::move(reply)) {
        listen_fd_ = listen_loopback(port_);
        thread_ = std::thread([this] {
            std::vector<int> clients;
            while (!stop_) {
                pollfd p{listen_fd_, POLLIN, 0};
                if (::poll(&p, 1, 20) > 0) {
                    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                    if (c >= 0) clients.push_back(c);
                }
                for (int c : clients) {
                    char buf[4096];
                    pollfd q{c, POLLIN, 0};
                    if (::poll(&q, 1, 0) > 0 && ::read(c, buf, sizeof(buf)) > 0) {
                        (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
                    }
                }
            }
            for (int c : clients) ::close(c);
        });
    }
    ~babbling_server() {
        stop_ = true;
        thread_.join();
        ::close(listen_fd_);
    }
    int port() const { return port_; }

private:
    std::string       reply_;
    int               listen_fd_ = -1;
    int               port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread       thread_;
};

cache_namespace redis_ns() { return testing::test_namespace("model-R", 2, 4, 6); }

// One "process": a pool and a cache with only the Redis tier behind the memory tiers.
// Its timeout defaults to one a loaded ASan run meets (a publish that times out leaves
// the next node nothing to find); the tests of short timeouts pass theirs.
struct node {
    fake_kv_backend                 backend{32, 4, 2};
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
    std::unique_ptr<stage_cache>    cache;
    node(const std::string & url, int32_t timeout_ms = 2000, bool memory = false) {
        stage_cache_config c;
        c.min_tokens = 4;
        c.max_entries = memory ? 8 : 0;
        c.exact_max_bytes = 0;
        c.exact_page_tokens = 4;
        c.activation_max_bytes = 0;
        c.redis_url = url;
        c.redis_timeout_ms = timeout_ms;
        auto made = stage_cache::create(backend, c, sink);
        EXPECT_TRUE(made.is_ok()) << made.error().to_string();
        if (made.is_ok()) cache = std::move(made).value();
    }
    // One request; its KV always ends exact (checked).
    restore_result request(const cache_namespace & ns, const toks & prompt) {
        restore_result r = cache->restore({ns, 0, prompt, static_cast<int64_t>(prompt.size()) - 1});
        EXPECT_EQ(backend.kv_of(0), expected_kv(prefix(prompt, static_cast<size_t>(r.restored_tokens))));
        toks rest(prompt.begin() + r.restored_tokens, prompt.end());
        EXPECT_TRUE(backend.compute(0, r.restored_tokens, rest).is_ok());
        cache->note_prefill(0, r.restored_tokens, rest);
        EXPECT_EQ(backend.kv_of(0), expected_kv(prompt));
        cache->record(ns, 0, record_reason::final_prefill);
        cache->reset_session(0);
        EXPECT_TRUE(backend.truncate_session(0, 0).is_ok());
        return r;
    }
};

class redis_fixture : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string bin = redis_server_binary();
        if (bin.empty()) {
            if (skippy::testing::running_in_ci()) FAIL() << "redis-server missing (scripts/setup.sh installs it)";
            GTEST_SKIP() << "redis-server not installed (scripts/setup.sh installs it)";
        }
        dir_ = skippy::testing::make_temp_dir("redis");
        start_server();
    }
    void TearDown() override {
        server_.reset();
        std::error_code ec;
        if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    }
    void start_server() {
        port_ = skippy::testing::free_port();
        server_ = std::make_unique<skippy::testing::background_process>(
            std::vector<std::string>{redis_server_binary(), "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", dir_},
            dir_ + "/redis.log");
        ASSERT_TRUE(skippy::testing::wait_for_port("127.0.0.1", port_, 10000)) << server_->log();
    }
    void stop_server() {
        server_->kill_now(9);
        (void)server_->wait(5000);
    }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
    // A direct client, for poking at values.
    std::vector<redis_value> raw(const std::vector<std::string> & args) {
        auto u = parse_redis_url(url());
        auto c = redis_connection::connect(*u, 2000);
        EXPECT_TRUE(c.is_ok()) << c.error().to_string();
        redis_command cmd;
        for (const std::string & a : args) cmd.push_back({reinterpret_cast<const uint8_t *>(a.data()), a.size()});
        const redis_command cmds[] = {cmd};
        auto r = (*c)->run(cmds, clock_type::now() + std::chrono::seconds(2));
        EXPECT_TRUE(r.is_ok()) << r.error().to_string();
        return r.is_ok() ? *r : std::vector<redis_value>{};
    }
    std::string page_key(const toks & tokens, size_t end) const {
        return redis_tier::page_key_name(ns_.hash, prefix_hash(ns_, prefix(tokens, end)));
    }

    cache_namespace                                     ns_ = redis_ns();
    std::string                                         dir_;
    int                                                 port_ = 0;
    std::unique_ptr<skippy::testing::background_process> server_;
};

TEST_F(redis_fixture, ASecondProcessRestoresWhatTheFirstPublished) {
    node a(url()), b(url());
    const toks p = run(10, 14);
    EXPECT_EQ(a.request(ns_, p).restored_tokens, 0);
    EXPECT_EQ(a.sink->last(record_event_name, "skippy.redis_cache.record"), "queued");
    a.cache->wait_for_records();
    EXPECT_EQ(a.sink->last(redis_store_event_name, "skippy.redis_cache.record"), "stored");
    EXPECT_EQ(a.cache->stats().redis.n_pages_published, 4);
    ASSERT_EQ(raw({"EXISTS", page_key(p, 4)})[0].integer, 1);

    const restore_result r = b.request(ns_, p);  // request() checks the KV against a cold compute
    EXPECT_EQ(r.decision, "restore_hit");
    EXPECT_EQ(r.tier, cache_tier::redis);
    EXPECT_EQ(r.restored_tokens, 13);
    EXPECT_EQ(b.cache->stats().n_redis_restores, 1);
    // A prompt sharing 9 tokens: the page chain serves 8.
    const restore_result s = b.request(ns_, testing::concat(prefix(p, 9), run(900, 5)));
    EXPECT_EQ(s.tier, cache_tier::redis);
    EXPECT_EQ(s.restored_tokens, 8);
    // Another namespace shares nothing.
    namespace_fields f;
    f.model_identity = "another";
    f.layer_end = 2;
    EXPECT_EQ(b.request(*make_namespace(f), p).restored_tokens, 0);
}

TEST_F(redis_fixture, ValuesWithAWrongLengthOrChecksumAreNeverServed) {
    node a(url()), b(url());
    const toks p = run(10, 14);
    a.request(ns_, p);
    a.cache->wait_for_records();
    const std::string key = page_key(p, 8);
    std::string value = raw({"GET", key})[0].str;
    ASSERT_GT(value.size(), page_record_overhead_bytes);

    // Wrong length: one byte short.
    raw({"SET", key, value.substr(0, value.size() - 1)});
    restore_result r = b.request(ns_, p);
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(r.restored_tokens, 0);
    EXPECT_EQ(b.sink->last(lookup_event_name, "skippy.kv.error_class"), "invalid_data");
    EXPECT_EQ(b.backend.n_imports(), 0) << "nothing from Redis reached the pool";
    // b deleted the bad value, then computed the prompt and publishes its own pages in the
    // background, which may already have put the page back. Either way the truncated value is
    // gone: the key is empty or holds b's page, byte-equal to a's. Waiting also keeps b's
    // publish from overwriting the value tampered with below (the test's race, not the tier's).
    b.cache->wait_for_records();
    {
        const auto after = raw({"GET", key})[0];
        if (after.type != redis_value::kind::nil) {
            EXPECT_EQ(after.str, value) << "the bad value was deleted";
        }
    }

    // Wrong checksum: one payload bit flipped.
    std::string flipped = value;
    flipped[page_record_header_bytes + 5] ^= 0x10;
    raw({"SET", key, flipped});
    r = b.request(ns_, p);
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(b.sink->last(lookup_event_name, "skippy.kv.error_class"), "integrity");
    EXPECT_EQ(b.backend.n_imports(), 0);
    EXPECT_EQ(b.cache->stats().redis.n_bad_values, 2);
    b.cache->wait_for_records();

    // Not a page record at all, under a key of the chain.
    raw({"SET", key, "hello"});
    EXPECT_EQ(b.request(ns_, p).decision, "restore_error");
    EXPECT_EQ(b.backend.n_imports(), 0);
}

TEST_F(redis_fixture, AServerStoppedMidRunBecomesErrorDecisionsWithinABoundedWait) {
    node a(url()), b(url(), 50);
    const toks p = run(10, 14);
    a.request(ns_, p);
    a.cache->wait_for_records();
    EXPECT_EQ(b.request(ns_, p).tier, cache_tier::redis);
    stop_server();
    for (int i = 0; i < 5; ++i) {
        const auto t0 = clock_type::now();
        const restore_result r = b.request(ns_, run(100 + 20 * i, 14));
        EXPECT_LT(ms_since(t0), 5000.0) << "a dead server must not hang the request";
        EXPECT_EQ(r.restored_tokens, 0);
        EXPECT_EQ(r.decision, "restore_error");
        EXPECT_EQ(b.sink->last(lookup_event_name, "skippy.redis_cache.error_class"), "unavailable");
    }
    EXPECT_GE(b.cache->stats().redis.n_errors + b.cache->stats().redis.n_resting, 5);
    // Publishing into a dead server fails quietly on the worker.
    b.cache->wait_for_records();
    EXPECT_EQ(b.sink->last(redis_store_event_name, "skippy.redis_cache.record"), "error");
}

TEST_F(redis_fixture, ADelayOfTwoHundredMsCostsAtMostTheTimeout) {
    node a(url());
    const toks p = run(10, 14);
    a.request(ns_, p);
    a.cache->wait_for_records();
    delaying_proxy proxy(port_, std::chrono::milliseconds(200));
    node b("redis://127.0.0.1:" + std::to_string(proxy.port()), 50);
    const auto t0 = clock_type::now();
    const restore_result r = b.request(ns_, p);
    const double waited = ms_since(t0);
    EXPECT_EQ(r.restored_tokens, 0) << "the answer came too late to use";
    EXPECT_EQ(r.decision, "restore_error");
    EXPECT_EQ(b.sink->last(lookup_event_name, "skippy.redis_cache.error_class"), "unavailable");
    EXPECT_GE(b.cache->stats().redis.n_timeouts, 1);
    // Bounded: the timeout (connect + one exchange), far below the 200 ms x round trips
    // an unbounded client would wait. Generous slack for a loaded machine.
    EXPECT_LT(waited, 2000.0);
    // With a timeout above the delay the same proxy serves.
    node c("redis://127.0.0.1:" + std::to_string(proxy.port()), 3000);
    EXPECT_EQ(c.request(ns_, p).tier, cache_tier::redis);
}

TEST_F(redis_fixture, AServerAnsweringGarbageIsAnErrorNotACrash) {
    for (const std::string & garbage : {std::string("*99999999999\r\n"), std::string("$99999999999\r\n"), std::string("+OK\r\n"),
                                      std::string("\x01\x02garbage\r\n", 11), std::string(":-5\r\n")}) {
        babbling_server bad(garbage);
        node b("redis://127.0.0.1:" + std::to_string(bad.port()), 100);
        const auto t0 = clock_type::now();
        const restore_result r = b.request(ns_, run(10, 14));
        EXPECT_LT(ms_since(t0), 5000.0);
        EXPECT_EQ(r.restored_tokens, 0);
        EXPECT_EQ(r.decision, "restore_error") << garbage;
        b.cache->wait_for_records();
    }
}

}  // namespace
}  // namespace skippy::cache
