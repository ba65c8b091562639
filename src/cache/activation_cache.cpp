#include "cache/activation_cache.h"

namespace skippy::cache {

activation_cache::activation_cache(int64_t max_bytes) : max_bytes_(max_bytes > 0 ? max_bytes : 0) {}

void activation_cache::erase(std::list<slot>::iterator it) {
    bytes_ -= static_cast<int64_t>(it->frame->size());
    by_key_.erase(it->key);
    lru_.erase(it);
}

bool activation_cache::store(const activation_key & key, std::vector<uint8_t> frame) {
    const int64_t size = static_cast<int64_t>(frame.size());
    if (!enabled() || size > max_bytes_) {
        ++counts_.n_refused;
        return false;
    }
    if (auto it = by_key_.find(key); it != by_key_.end()) erase(it->second);
    while (bytes_ + size > max_bytes_ && !lru_.empty()) {
        erase(std::prev(lru_.end()));
        ++counts_.n_evictions;
    }
    lru_.push_front(slot{key, std::make_shared<const std::vector<uint8_t>>(std::move(frame))});
    by_key_.emplace(key, lru_.begin());
    bytes_ += size;
    ++counts_.n_stores;
    return true;
}

activation_frame activation_cache::lookup(const activation_key & key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) {
        ++counts_.n_misses;
        return nullptr;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    ++counts_.n_hits;
    return it->second->frame;
}

bool activation_cache::contains(const activation_key & key) const { return by_key_.count(key) > 0; }

activation_stats activation_cache::stats() const {
    activation_stats s = counts_;
    s.n_entries = static_cast<int64_t>(lru_.size());
    s.n_bytes = bytes_;
    return s;
}

}  // namespace skippy::cache
