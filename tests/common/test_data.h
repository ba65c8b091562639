// Access to the shared test data (../shared: models, golden outputs, vocabularies).
//
// The folder comes from SKIPPY_TEST_DATA, else <repo>/../shared. When it is missing a
// test skips with a clear message on a developer machine, but fails when the CI
// environment variable is set: CI must never pass by skipping.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace skippy::testing {

// Root of the shared test data, or nullopt when it does not exist.
std::optional<std::string> test_data_root();

// Full path of `relative` (e.g. "models/stories260K.gguf") if the file exists.
std::optional<std::string> test_data_file(const std::string & relative);

// True when running under CI (the CI variable is set and not empty/"0"/"false").
bool running_in_ci();

// Path of the built skippy executable (for tests that drive the CLI).
std::string skippy_binary_path();

}  // namespace skippy::testing

// Declares `var` as the path of shared file `relative`, or skips / fails the test.
#define SKIPPY_REQUIRE_TEST_FILE(var, relative)                                              \
    std::string var;                                                                          \
    do {                                                                                      \
        auto skippy_path_ = ::skippy::testing::test_data_file(relative);                      \
        if (!skippy_path_) {                                                                  \
            if (::skippy::testing::running_in_ci()) {                                         \
                FAIL() << "test data " << (relative) << " missing (CI is set; see SKIPPY_TEST_DATA)"; \
            }                                                                                 \
            GTEST_SKIP() << "test data " << (relative)                                        \
                         << " not found; set SKIPPY_TEST_DATA to the shared folder";          \
        }                                                                                     \
        var = *skippy_path_;                                                                  \
    } while (0)

namespace skippy::testing {

struct command_result {
    int         exit_code = -1;  // 128 + signal when killed by one; 124 on timeout
    std::string out;
    std::string err;
};

// Runs argv (no shell interpretation of arguments) with a timeout, capturing stdout
// and stderr.
command_result run_command(const std::vector<std::string> & argv, int timeout_s = 120);

// A fresh empty directory under the build tree, removed by the caller if wanted.
std::string make_temp_dir(const std::string & tag);

}  // namespace skippy::testing

namespace skippy::testing {

// A child process running in the background (a stage server); killed on destruction.
class background_process {
public:
    // Starts argv; stdout and stderr go to `log_path`.
    background_process(const std::vector<std::string> & argv, const std::string & log_path);
    ~background_process();
    background_process(const background_process &) = delete;
    background_process & operator=(const background_process &) = delete;

    int pid() const { return pid_; }
    bool running();
    void kill_now(int signal = 9);
    // Waits for exit up to timeout_ms; returns the exit code (128 + signal), or -1.
    int wait(int timeout_ms);
    std::string log() const;

private:
    int         pid_ = -1;
    int         exit_code_ = -1;
    std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral
// range where the system allows (so no connection or bind(0) elsewhere takes it).
int free_port();

// Waits until something accepts connections on host:port (up to timeout_ms).
bool wait_for_port(const std::string & host, int port, int timeout_ms);

}  // namespace skippy::testing
