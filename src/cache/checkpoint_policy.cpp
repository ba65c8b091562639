#include "cache/checkpoint_policy.h"

#include <algorithm>

namespace skippy::cache {

std::vector<int64_t> prefill_checkpoints(int64_t pos_start, int64_t n_tokens, int64_t spacing_tokens, int64_t min_tokens) {
    std::vector<int64_t> out;
    if (spacing_tokens <= 0 || n_tokens <= 0 || pos_start < 0) return out;
    const int64_t end = pos_start + n_tokens;
    const int64_t from = std::max(pos_start + 1, min_tokens);
    for (int64_t c = (from + spacing_tokens - 1) / spacing_tokens * spacing_tokens; c <= end; c += spacing_tokens) out.push_back(c);
    return out;
}

}  // namespace skippy::cache
