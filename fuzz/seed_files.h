// Small helpers shared by the seed writers (*_fuzz_seeds): they write a fuzzer's seed
// corpus into the directory named on their command line.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

namespace skippy::fuzz_seeds {

// The corpus directory of `prog DIR`, or nullptr after printing the usage.
inline const char * corpus_dir_arg(int argc, char ** argv) {
    if (argc == 2) return argv[1];
    std::fprintf(stderr, "usage: %s DIR\n", argc > 0 ? argv[0] : "seeds");
    return nullptr;
}

// Writes `bytes` to `path`, replacing it. False when it cannot be written.
inline bool write_seed_file(const std::string & path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(out);
}

}  // namespace skippy::fuzz_seeds
