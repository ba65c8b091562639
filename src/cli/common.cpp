#include "cli/common.h"

#include "base/log.h"
#include "runtime/stage.h"

#include <cstdio>

namespace skippy::cli {

result<std::shared_ptr<const gguf::file>> load_gguf(const std::string & path) {
    SKIPPY_LOG_DEBUG("loading %s", path.c_str());
    auto f = gguf::file::open(path);
    if (!f.is_ok()) return f.error();
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

int fail(const status & st) {
    std::fprintf(stderr, "skippy: error: %s\n", st.to_string().c_str());
    return 1;
}

int32_t resolve_threads(int32_t flag) { return flag > 0 ? flag : physical_core_count(); }

}  // namespace skippy::cli
