#include "common/test_data.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace skippy::testing {

std::optional<std::string> test_data_root() {
    const char * env = std::getenv("SKIPPY_TEST_DATA");
    std::string root = (env && *env) ? env : SKIPPY_DEFAULT_TEST_DATA;
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec)) return std::nullopt;
    return root;
}

std::optional<std::string> test_data_file(const std::string & relative) {
    auto root = test_data_root();
    if (!root) return std::nullopt;
    std::filesystem::path p = std::filesystem::path(*root) / relative;
    std::error_code ec;
    if (!std::filesystem::exists(p, ec)) return std::nullopt;
    return p.string();
}

bool running_in_ci() {
    const char * ci = std::getenv("CI");
    if (!ci || !*ci) return false;
    std::string v = ci;
    return v != "0" && v != "false";
}

std::string skippy_binary_path() {
    const char * env = std::getenv("SKIPPY_BINARY");
    if (env && *env) return env;
    return std::string(SKIPPY_BINARY_DIR) + "/src/cli/skippy";
}

}  // namespace skippy::testing

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace skippy::testing {

command_result run_command(const std::vector<std::string> & argv, int timeout_s) {
    command_result r;
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return r;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        std::vector<char *> args;
        for (const auto & a : argv) args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    bool timed_out = false;
    while (open_fds > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) { timed_out = true; break; }
        if (poll(fds, 2, static_cast<int>(left)) <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
            char buf[65536];
            ssize_t n = read(fds[i].fd, buf, sizeof(buf));
            if (n <= 0) { close(fds[i].fd); fds[i].fd = -1; --open_fds; continue; }
            (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
        }
    }
    if (timed_out) kill(pid, SIGKILL);
    for (auto & f : fds) if (f.fd >= 0) close(f.fd);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (timed_out) r.exit_code = 124;
    else if (WIFEXITED(wstatus)) r.exit_code = WEXITSTATUS(wstatus);
    else if (WIFSIGNALED(wstatus)) r.exit_code = 128 + WTERMSIG(wstatus);
    return r;
}

std::string make_temp_dir(const std::string & tag) {
    std::string templ = std::string(SKIPPY_BINARY_DIR) + "/test-tmp";
    std::filesystem::create_directories(templ);
    templ += "/" + tag + "-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    char * dir = mkdtemp(buf.data());
    return dir ? std::string(dir) : std::string();
}

}  // namespace skippy::testing

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

namespace skippy::testing {

background_process::background_process(const std::vector<std::string> & argv, const std::string & log_path)
    : log_path_(log_path) {
    // Truncate before forking, so a reader never sees an earlier run's log.
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        std::vector<char *> args;
        for (const auto & a : argv) args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    if (fd >= 0) close(fd);
}

background_process::~background_process() {
    if (running()) {
        kill_now(SIGTERM);
        if (wait(3000) < 0) { kill_now(SIGKILL); wait(3000); }
    }
}

bool background_process::running() {
    if (pid_ <= 0 || exit_code_ >= 0) return false;
    int wstatus = 0;
    pid_t r = waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_) {
        exit_code_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        return false;
    }
    return true;
}

void background_process::kill_now(int signal) {
    if (pid_ > 0 && exit_code_ < 0) ::kill(pid_, signal);
}

int background_process::wait(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (running()) {
        if (std::chrono::steady_clock::now() > deadline) return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
}

std::string background_process::log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

namespace {

// Whether a listener could bind 127.0.0.1:port now (0: the kernel picks one); the
// port bound, or -1.
int bind_probe(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    int bound = -1;
    if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0) {
        socklen_t len = sizeof(addr);
        if (getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0) bound = ntohs(addr.sin_port);
    }
    close(fd);
    return bound;
}

}  // namespace

// Below the kernel's ephemeral range (ip_local_port_range): a port from bind(0) comes
// from that range, where another test running at the same time (ctest -j) can take it
// for a connection or for its own bind(0) listener before the caller's listener binds
// it (CI saw "cannot listen on 127.0.0.1:34959: Address already in use"). Below the
// range only another free_port() caller can, picking at random among thousands.
int free_port() {
    int range_start = 32768;  // Linux's default
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> range_start;
    constexpr int k_lowest = 10000;
    if (range_start > k_lowest + 1000) {
        thread_local std::mt19937 rng(std::random_device{}());
        std::uniform_int_distribution<int> pick(k_lowest, range_start - 1);
        for (int attempt = 0; attempt < 100; ++attempt) {
            const int port = pick(rng);
            if (bind_probe(port) == port) return port;
        }
    }
    return bind_probe(0);
}

bool wait_for_port(const std::string & host, int port, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr {};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port));
        inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
        const bool ok = connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
        close(fd);
        if (ok) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

}  // namespace skippy::testing
