// Minimal leveled logging to stderr. stdout belongs to command results only.
#pragma once

#include <cstdarg>

namespace skippy {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_log_level(log_level level);
log_level get_log_level();

// printf-style; a newline is appended.
void log_message(log_level level, const char * fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace skippy

#define SKIPPY_LOG_DEBUG(...) ::skippy::log_message(::skippy::log_level::debug, __VA_ARGS__)
#define SKIPPY_LOG_INFO(...)  ::skippy::log_message(::skippy::log_level::info, __VA_ARGS__)
#define SKIPPY_LOG_WARN(...)  ::skippy::log_message(::skippy::log_level::warn, __VA_ARGS__)
#define SKIPPY_LOG_ERROR(...) ::skippy::log_message(::skippy::log_level::error, __VA_ARGS__)
