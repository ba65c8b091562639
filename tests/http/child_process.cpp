#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace skippy::testing {

std::unique_ptr<child_process> child_process::spawn(const std::vector<std::string> & argv) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return nullptr;
    std::vector<char *> args;
    for (const std::string & a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        const int null_fd = open("/dev/null", O_RDWR);
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDIN_FILENO);
        // The test may block signals in its threads; the child starts with none blocked.
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    close(pipe_fds[1]);
    std::unique_ptr<child_process> p(new child_process());
    p->pid_ = pid;
    p->stderr_fd_ = pipe_fds[0];
    p->reader_ = std::thread([raw = p.get()] {
        char buf[4096];
        for (;;) {
            const ssize_t n = read(raw->stderr_fd_, buf, sizeof(buf));
            if (n <= 0) break;
            std::lock_guard<std::mutex> lock(raw->mutex_);
            raw->stderr_.append(buf, static_cast<size_t>(n));
        }
    });
    return p;
}

child_process::~child_process() {
    if (pid_ > 0 && !exited_) {
        kill(pid_, SIGKILL);
        int st = 0;
        waitpid(pid_, &st, 0);
    }
    if (reader_.joinable()) reader_.join();
    if (stderr_fd_ >= 0) close(stderr_fd_);
}

std::string child_process::stderr_text() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stderr_;
}

bool child_process::wait_for_stderr(const std::string & needle, std::chrono::seconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
        if (stderr_text().find(needle) != std::string::npos) return true;
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
            exited_ = true;
            exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            return stderr_text().find(needle) != std::string::npos;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

int child_process::stop() {
    if (!exited_) kill(pid_, SIGTERM);
    return wait();
}

int child_process::wait() {
    if (!exited_) {
        int st = 0;
        waitpid(pid_, &st, 0);
        exited_ = true;
        exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    if (reader_.joinable()) reader_.join();
    return exit_status_;
}

int run_to_completion(const std::vector<std::string> & argv, std::string * err) {
    auto p = child_process::spawn(argv);
    if (!p) return -1;
    const int rc = p->wait();
    if (err) *err = p->stderr_text();
    return rc;
}

serve_process start_serve(const std::string & binary, const std::vector<std::string> & args) {
    std::vector<std::string> argv = {binary, "serve", "--host", "127.0.0.1", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    serve_process s;
    s.proc = child_process::spawn(argv);
    if (!s.proc) return s;
    const std::string marker = "listening on http://127.0.0.1:";
    if (!s.proc->wait_for_stderr(marker)) return s;
    const std::string text = s.proc->stderr_text();
    s.port = std::atoi(text.c_str() + text.find(marker) + marker.size());
    return s;
}

size_t proc_status_bytes(pid_t pid, const std::string & name) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(name + ":", 0) == 0) return std::strtoull(line.c_str() + name.size() + 1, nullptr, 10) * 1024;
    }
    return 0;
}

}  // namespace skippy::testing
