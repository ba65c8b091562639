// Open-addressing tables keyed by 64-bit integers (internal to src/grammar): the
// matcher's memo lives in these, on its hot path, so they are flat arrays with linear
// probing rather than node-based maps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace skippy::grammar::detail {

inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

// Map from a key (any value but empty_key) to a 32-bit value. Several entries may share
// a key (find_next walks them), which the state table uses for hash collisions.
class u64_map {
public:
    static constexpr uint64_t empty_key = ~uint64_t{0};

    u64_map() { rehash(16); }

    // The slot of the first entry with `key` at or after probing start `from`, or npos.
    static constexpr size_t npos = ~size_t{0};
    size_t find(uint64_t key) const { return scan(key, home(key)); }
    size_t find_next(uint64_t key, size_t slot) const { return scan(key, (slot + 1) & mask_); }
    uint32_t value(size_t slot) const { return vals_[slot]; }

    void insert(uint64_t key, uint32_t value) {
        if ((n_ + 1) * 4 > keys_.size() * 3) rehash(keys_.size() * 2);
        size_t i = home(key);
        while (keys_[i] != empty_key) i = (i + 1) & mask_;
        keys_[i] = key;
        vals_[i] = value;
        ++n_;
    }

    void clear() {
        if (n_ == 0) return;
        if (keys_.size() > 1024) {
            keys_.clear();
            vals_.clear();
            rehash(16);
        } else {
            std::fill(keys_.begin(), keys_.end(), empty_key);
        }
        n_ = 0;
    }

    size_t size() const { return n_; }
    size_t bytes() const { return keys_.size() * (sizeof(uint64_t) + sizeof(uint32_t)); }

private:
    std::vector<uint64_t> keys_;
    std::vector<uint32_t> vals_;
    size_t                mask_ = 0;
    size_t                n_ = 0;

    size_t home(uint64_t key) const { return size_t(mix64(key)) & mask_; }

    size_t scan(uint64_t key, size_t i) const {
        while (true) {
            uint64_t k = keys_[i];
            if (k == key) return i;
            if (k == empty_key) return npos;
            i = (i + 1) & mask_;
        }
    }

    void rehash(size_t n_slots) {
        std::vector<uint64_t> old_keys(n_slots, empty_key);
        std::vector<uint32_t> old_vals(n_slots, 0);
        old_keys.swap(keys_);
        old_vals.swap(vals_);
        mask_ = n_slots - 1;
        n_ = 0;
        for (size_t i = 0; i < old_keys.size(); ++i) {
            if (old_keys[i] != empty_key) insert(old_keys[i], old_vals[i]);
        }
    }
};

// Set of keys, cleared in time proportional to what it held (it is cleared once per
// character the matcher consumes).
class u64_set {
public:
    u64_set() { keys_.assign(64, u64_map::empty_key); }

    // True when `key` was not there yet.
    bool insert(uint64_t key) {
        if ((used_.size() + 1) * 2 > keys_.size()) grow();
        size_t i = size_t(mix64(key)) & (keys_.size() - 1);
        while (true) {
            if (keys_[i] == key) return false;
            if (keys_[i] == u64_map::empty_key) break;
            i = (i + 1) & (keys_.size() - 1);
        }
        keys_[i] = key;
        used_.push_back(i);
        return true;
    }

    void clear() {
        for (size_t i : used_) keys_[i] = u64_map::empty_key;
        used_.clear();
    }

private:
    std::vector<uint64_t> keys_;
    std::vector<size_t>   used_;

    void grow() {
        std::vector<uint64_t> held;
        held.reserve(used_.size());
        for (size_t i : used_) held.push_back(keys_[i]);
        keys_.assign(keys_.size() * 2, u64_map::empty_key);
        used_.clear();
        for (uint64_t k : held) insert(k);
    }
};

}  // namespace skippy::grammar::detail
