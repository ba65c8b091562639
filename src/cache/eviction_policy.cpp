#include "cache/eviction_policy.h"

namespace skippy::cache {

int64_t recompute_cost(entry_kind kind, int64_t n_tokens) {
    return kind == entry_kind::resident ? n_tokens : 0;
}

eviction_key make_eviction_key(entry_kind kind, int64_t n_tokens, uint64_t last_used_tick, entry_id id) {
    return eviction_key{recompute_cost(kind, n_tokens), last_used_tick, id};
}

}  // namespace skippy::cache
