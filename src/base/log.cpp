#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace skippy {
namespace {
std::atomic<int> g_level{static_cast<int>(log_level::info)};
std::mutex       g_mutex;
}  // namespace

void set_log_level(log_level level) { g_level.store(static_cast<int>(level)); }
log_level get_log_level() { return static_cast<log_level>(g_level.load()); }

void log_message(log_level level, const char * fmt, ...) {
    if (static_cast<int>(level) < g_level.load()) return;
    static const char * const k_prefix[] = {"debug", "info", "warn", "error"};
    char buf[2048];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "skippy %s: %s\n", k_prefix[static_cast<int>(level)], buf);
}

}  // namespace skippy
