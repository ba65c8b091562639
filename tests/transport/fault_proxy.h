// A userspace TCP proxy for fault injection between a dialer and a listener on
// loopback (this kernel has no netem): it forwards bytes both ways and can record
// what the dialer sent, flip a byte of it, delay every chunk, stall, or cut the
// connection. One connection at a time is enough for the tests that use it.
#pragma once

#include "transport/socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::testing {

class fault_proxy {
public:
    // Listens on a free loopback port and forwards every accepted connection to `target`.
    explicit fault_proxy(transport::endpoint target) : target_(std::move(target)) {
        auto l = transport::tcp_listener::listen({"127.0.0.1", 0});
        if (l.is_ok()) listener_ = std::move(l).value();
        accept_thread_ = std::thread([this] { accept_loop(); });
    }
    ~fault_proxy() {
        stopping_ = true;
        listener_.close();
        if (accept_thread_.joinable()) accept_thread_.join();
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto & t : pumps_) t.join();
    }
    fault_proxy(const fault_proxy &) = delete;
    fault_proxy & operator=(const fault_proxy &) = delete;

    transport::endpoint address() const { return {"127.0.0.1", listener_.port()}; }

    // Every byte the dialers sent (toward the target), in order.
    std::vector<uint8_t> recorded() {
        std::lock_guard<std::mutex> lock(mutex_);
        return to_target_;
    }
    // XORs the byte at `offset` of the dialer-to-target stream with 0x01 (-1: none).
    void corrupt_at(int64_t offset) { corrupt_at_ = offset; }
    // Sleeps this long before forwarding each chunk, in each direction (half an RTT).
    void set_delay(std::chrono::milliseconds d) { delay_ms_ = static_cast<int32_t>(d.count()); }
    // While stalled, nothing is forwarded (the bytes wait in the kernel buffers).
    void set_stalled(bool stalled) { stalled_ = stalled; }
    // Closes every proxied connection now.
    void cut() { cut_generation_++; }

private:
    void accept_loop() {
        while (!stopping_) {
            auto c = listener_.accept(std::chrono::milliseconds(50));
            if (!c.is_ok()) continue;
            auto t = transport::dial(target_, std::chrono::milliseconds(2000));
            if (!t.is_ok()) continue;  // `c` closes: the dialer sees the target down
            auto a = std::make_shared<transport::tcp_socket>(std::move(c).value());
            auto b = std::make_shared<transport::tcp_socket>(std::move(t).value());
            std::lock_guard<std::mutex> lock(mutex_);
            pumps_.emplace_back([this, a, b] { pump(*a, *b, true); });
            pumps_.emplace_back([this, a, b] { pump(*b, *a, false); });
        }
    }

    // Forwards from -> to until either side closes, the proxy stops or cut() is called.
    void pump(transport::tcp_socket & from, transport::tcp_socket & to, bool to_target) {
        const int generation = cut_generation_;
        std::vector<uint8_t> buf(1 << 16);
        int64_t offset = 0;
        while (!stopping_ && generation == cut_generation_) {
            if (stalled_) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                continue;
            }
            pollfd p{from.fd(), POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const ssize_t n = ::recv(from.fd(), buf.data(), buf.size(), 0);
            if (n <= 0) break;
            if (to_target) {
                const int64_t at = corrupt_at_;
                if (at >= offset && at < offset + n) buf[static_cast<size_t>(at - offset)] ^= 0x01;
                std::lock_guard<std::mutex> lock(mutex_);
                to_target_.insert(to_target_.end(), buf.begin(), buf.begin() + n);
            }
            offset += n;
            if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
            if (!to.write_all(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n))).is_ok()) break;
        }
        // Both directions end together: a half-open relay would hide the cut.
        ::shutdown(from.fd(), SHUT_RDWR);
        ::shutdown(to.fd(), SHUT_RDWR);
    }

    transport::endpoint      target_;
    transport::tcp_listener  listener_;
    std::thread              accept_thread_;
    std::atomic<bool>        stopping_{false};
    std::atomic<int64_t>     corrupt_at_{-1};
    std::atomic<int32_t>     delay_ms_{0};
    std::atomic<bool>        stalled_{false};
    std::atomic<int>         cut_generation_{0};
    std::mutex               mutex_;
    std::vector<std::thread> pumps_;
    std::vector<uint8_t>     to_target_;
};

}  // namespace skippy::testing
