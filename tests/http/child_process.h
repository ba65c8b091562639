// Runs `skippy` subcommands as child processes for the HTTP integration tests: a
// server that is started, waited for (its startup line names the port) and stopped
// with SIGTERM, or a command run to completion.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace skippy::testing {

class child_process {
public:
    // Starts argv[0] with argv[1..] (no shell); its stderr is collected, stdout dropped.
    static std::unique_ptr<child_process> spawn(const std::vector<std::string> & argv);
    ~child_process();  // kills (SIGKILL) and reaps it if still running

    pid_t pid() const { return pid_; }
    // Everything it wrote to stderr so far.
    std::string stderr_text() const;
    // Waits until stderr holds `needle`; false when the process exits or `wait` passes first.
    bool wait_for_stderr(const std::string & needle, std::chrono::seconds wait = std::chrono::seconds(60));
    // SIGTERM, then waits for it; returns its exit status (-1: killed by a signal).
    int stop();
    // Waits for it to exit by itself; returns its exit status as stop() does.
    int wait();

private:
    child_process() = default;
    pid_t                  pid_ = -1;
    int                    stderr_fd_ = -1;
    std::thread            reader_;
    mutable std::mutex     mutex_;
    std::string            stderr_;
    bool                   exited_ = false;
    int                    exit_status_ = -1;
};

// Runs a command to completion; returns its exit status (-1: killed by a signal) and
// its stderr in *err.
int run_to_completion(const std::vector<std::string> & argv, std::string * err = nullptr);

// `skippy serve` with `args` on a free loopback port, waited for until it listens.
struct serve_process {
    std::unique_ptr<child_process> proc;
    int                            port = -1;
};
// REQUIRES: binary is the skippy executable. port -1 when it did not start.
serve_process start_serve(const std::string & binary, const std::vector<std::string> & args);

// The value of a "Name:   123 kB" line of /proc/<pid>/status, in bytes (0 when absent).
size_t proc_status_bytes(pid_t pid, const std::string & name);

}  // namespace skippy::testing
