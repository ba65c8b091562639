// Helpers shared by the subcommands: loading a model file, printing errors.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"

#include <memory>
#include <string>

namespace skippy::cli {

// Opens and validates a GGUF file; logs progress on stderr.
result<std::shared_ptr<const gguf::file>> load_gguf(const std::string & path);

// Prints "skippy: error: <status>" on stderr and returns exit code 1.
int fail(const status & st);

// Threads to use: the flag when > 0, else the physical core count.
int32_t resolve_threads(int32_t flag);

}  // namespace skippy::cli
