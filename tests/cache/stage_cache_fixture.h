// A stage cache over a fake backend, for fixtures: events kept in memory, the cache
// rebuilt with another config by make(), and check() asserting the index's and the
// tiers' invariants and the backend's refcounts after a step.
#pragma once

#include "cache/stage_cache.h"
#include "fakes.h"

#include <gtest/gtest.h>

#include <memory>

namespace skippy::cache::testing {

// Small sizes for fakes: prefixes from 4 tokens, 8 resident entries, pages of 4
// tokens in blocks of 16 bytes, 1 KiB of activation frames.
inline stage_cache_config small_stage_cache_config() {
    stage_cache_config c;
    c.min_tokens = 4;
    c.max_entries = 8;
    c.exact_max_bytes = 1 << 20;
    c.exact_page_tokens = 4;
    c.exact_block_bytes = 16;
    c.activation_max_bytes = 1024;
    return c;
}

template <class Backend>
struct stage_cache_fixture : ::testing::Test {
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
    Backend                         backend;
    std::unique_ptr<stage_cache>    cache;

    // A backend of n_blocks blocks of 4 positions and 3 sessions.
    explicit stage_cache_fixture(int32_t n_blocks) : backend(n_blocks, 4, 3) {}

    void make(const stage_cache_config & c) {
        cache.reset();
        cache = std::move(stage_cache::create(backend, c, sink).value());
    }
    void check() {
        status st = cache->check_invariants();
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_EQ(backend.violations(), 0);
    }
};

}  // namespace skippy::cache::testing
