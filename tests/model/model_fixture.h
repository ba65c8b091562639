// Helpers for model tests: in-memory synthetic models and batch evaluation.
#pragma once

#include "model/synthetic.h"
#include "runtime/stage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace skippy::testing {

// Same length, not empty, same bits.
inline bool bitwise_equal(const std::vector<float> & a, const std::vector<float> & b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n deterministic token ids below n_vocab (a linear congruential sequence from seed).
inline std::vector<token_id> sample_ids(int n, int32_t n_vocab, uint32_t seed) {
    std::vector<token_id> ids;
    uint32_t x = seed;
    for (int i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        ids.push_back(static_cast<token_id>((x >> 8) % static_cast<uint32_t>(n_vocab)));
    }
    return ids;
}

inline std::shared_ptr<const gguf::file> parse(const gguf::writer & w) {
    auto f = gguf::file::from_bytes(w.to_bytes());
    EXPECT_TRUE(f.is_ok()) << f.error().to_string();
    if (!f.is_ok()) return nullptr;
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

// A writer holding `f`'s metadata and tensors, minus the tensor named `drop` (none: "").
inline gguf::writer copy_without(const gguf::file & f, const std::string & drop) {
    gguf::writer w;
    for (const auto & [key, v] : f.metadata()) w.set(key, v);
    for (const auto & t : f.tensors()) {
        if (t.name == drop) continue;
        w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    return w;
}

inline std::shared_ptr<const gguf::file> synthetic_model(synthetic_model_options o) {
    auto w = build_synthetic_model(o);
    EXPECT_TRUE(w.is_ok()) << w.error().to_string();
    if (!w.is_ok()) return nullptr;
    auto f = gguf::file::from_bytes(w->to_bytes());
    EXPECT_TRUE(f.is_ok()) << f.error().to_string();
    if (!f.is_ok()) return nullptr;
    return std::shared_ptr<const gguf::file>(std::move(f).value());
}

struct eval_settings {
    int64_t  chunk_tokens = 0;  // 0: one batch
    int32_t  n_threads = 1;
    kv_dtype kv = kv_dtype::f16;
};

// Logits [n, n_vocab] of `ids` evaluated from position 0 in chunks.
inline std::vector<float> eval_logits(std::shared_ptr<const gguf::file> file, const std::vector<token_id> & ids,
                                      const eval_settings & e) {
    stage_options so;
    so.n_threads = e.n_threads;
    so.ctx_size = static_cast<int32_t>(ids.size()) + 16;
    so.kv_type = e.kv;
    auto st = stage::load(file, so);
    EXPECT_TRUE(st.is_ok()) << st.error().to_string();
    if (!st.is_ok()) return {};
    stage & s = **st;
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t n_embd = s.hparams().n_embd;
    const int64_t chunk = e.chunk_tokens > 0 ? e.chunk_tokens : n;
    std::vector<float> hidden(static_cast<size_t>(n * n_embd));
    for (int64_t pos = 0; pos < n; pos += chunk) {
        const int64_t m = std::min(chunk, n - pos);
        status fs = s.forward(0, pos, std::span<const token_id>(ids).subspan(static_cast<size_t>(pos), static_cast<size_t>(m)), {},
                              m, std::span<float>(hidden).subspan(static_cast<size_t>(pos * n_embd), static_cast<size_t>(m * n_embd)));
        EXPECT_TRUE(fs.is_ok()) << fs.to_string();
    }
    std::vector<float> logits(static_cast<size_t>(n * s.hparams().n_vocab));
    s.logits(hidden, n, logits);
    return logits;
}

}  // namespace skippy::testing
