// Helpers for tier tests: deterministic page payloads and an importer that checks
// what a tier hands back.
//
// The payload of page [s, s + c) of a prompt is a function of the prompt's tokens
// [0, s + c) (like real KV, which depends on every earlier token), so a page that
// comes back for the wrong prefix, or damaged, never matches expected_payload.
#pragma once

#include "cache/identity.h"
#include "cache/tier.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

// Fails the test (ASSERT) when x.check_invariants() is not ok, with its message.
#define EXPECT_INVARIANTS(x) \
    do { status st_ = (x).check_invariants(); ASSERT_TRUE(st_.is_ok()) << st_.to_string(); } while (0)

namespace skippy::cache::testing {

using toks = std::vector<token_id>;

// A namespace for tests: model `model`, stage `stage`, layers [layer_start, layer_end),
// block 4, ctx 256.
inline cache_namespace test_namespace(const std::string & model, int32_t stage = 0, int32_t layer_start = 0,
                                      int32_t layer_end = 2) {
    namespace_fields f;
    f.model_identity = model;
    f.stage_index = stage;
    f.layer_start = layer_start;
    f.layer_end = layer_end;
    f.kv_block_tokens = 4;
    f.ctx_size = 256;
    f.platform_tag = "test";
    return *make_namespace(f);
}

// A digest whose every byte is b (distinct namespaces for b = 1, 2, ...).
inline digest256 ns_of(uint8_t b) {
    digest256 d;
    d.bytes.fill(b);
    return d;
}

inline toks run_of(int32_t first, int n) {
    toks t;
    for (int i = 0; i < n; ++i) t.push_back(first + i);
    return t;
}

inline toks concat(toks a, const toks & b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

inline std::vector<uint8_t> expected_payload(const cache_namespace & ns, const toks & tokens, int64_t start, int64_t count,
                                             size_t n_bytes) {
    const digest256 h = prefix_hash(ns, std::span<const token_id>(tokens).first(static_cast<size_t>(start + count)));
    std::vector<uint8_t> out(n_bytes);
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x = (x << 8) | h.bytes[static_cast<size_t>(i)];
    for (size_t i = 0; i < n_bytes; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = static_cast<uint8_t>(x);
    }
    return out;
}

// The pages a record of `tokens` exports, cut at page_tokens.
inline std::vector<page_bytes> pages_of(const cache_namespace & ns, const toks & tokens, int64_t page_tokens, size_t n_bytes) {
    std::vector<page_bytes> pages;
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t s = 0; s < n; s += page_tokens) {
        const int64_t c = std::min(page_tokens, n - s);
        page_bytes p;
        p.token_start = s;
        p.token_count = c;
        p.bytes = expected_payload(ns, tokens, s, c, n_bytes);
        pages.push_back(std::move(p));
    }
    return pages;
}

// Records what it was given; fails on demand.
class checking_importer final : public page_importer_i {
public:
    status import(int32_t session, std::span<const page_bytes> pages, int64_t n_tokens) override {
        ++n_calls;
        last_session = session;
        last_pages.assign(pages.begin(), pages.end());
        last_tokens = n_tokens;
        if (fail_with != error_code::ok) return make_error(fail_with, "injected import failure");
        return status::ok();
    }
    // Every page handed over is exactly the payload the prompt's own tokens give, the
    // pages are contiguous from 0 and cover n_tokens.
    ::testing::AssertionResult pages_match(const cache_namespace & ns, const toks & query, size_t n_bytes) const {
        int64_t next = 0;
        for (const page_bytes & p : last_pages) {
            if (p.token_start != next) return ::testing::AssertionFailure() << "gap at " << next;
            if (p.bytes != expected_payload(ns, query, p.token_start, p.token_count, n_bytes)) {
                return ::testing::AssertionFailure() << "page [" << p.token_start << ", +" << p.token_count << ") differs";
            }
            next += p.token_count;
        }
        if (next < last_tokens) return ::testing::AssertionFailure() << "pages cover " << next << " of " << last_tokens;
        return ::testing::AssertionSuccess();
    }

    int                     n_calls = 0;
    int32_t                 last_session = -1;
    std::vector<page_bytes> last_pages;
    int64_t                 last_tokens = 0;
    error_code              fail_with = error_code::ok;
};

// Bytes of every regular file below dir.
inline int64_t dir_bytes(const std::string & dir) {
    int64_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
        if (it->is_regular_file(ec)) n += static_cast<int64_t>(it->file_size(ec));
    }
    return n;
}

inline int n_files(const std::string & dir) {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) ++n;
    return n;
}

inline std::vector<std::string> files_in(const std::string & dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        out.push_back(it->path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace skippy::cache::testing
