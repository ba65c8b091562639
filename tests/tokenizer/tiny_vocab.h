// Builds small in-memory GGUF vocabularies for the tokenizer unit tests.
#pragma once

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace skippy::testing {

class tiny_vocab {
public:
    explicit tiny_vocab(std::string model = "llama") : model_(std::move(model)) {}

    // Appends a token; returns its id.
    token_id add(std::string text, float score = 0.0f, token_kind kind = token_kind::normal) {
        tokens_.push_back(std::move(text));
        scores_.push_back(score);
        types_.push_back(static_cast<int32_t>(kind));
        return static_cast<token_id>(tokens_.size() - 1);
    }

    // SPM's usual head: <unk> (0), <s> (1), </s> (2), then <0x00>..<0xFF> (3..258).
    tiny_vocab & with_spm_specials_and_bytes() {
        add("<unk>", 0, token_kind::unknown);
        add("<s>", 0, token_kind::control);
        add("</s>", 0, token_kind::control);
        for (int b = 0; b < 256; ++b) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
            add(hex, 0, token_kind::byte);
        }
        return *this;
    }

    // The 256 GPT-2 alphabet characters as tokens, in byte order (ids 0..255).
    tiny_vocab & with_gpt2_alphabet() {
        int n_shifted = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cpt = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n_shifted++);
            std::string s;
            if (cpt < 0x80) {
                s.push_back(static_cast<char>(cpt));
            } else {
                s.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
                s.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
            }
            add(s);
        }
        return *this;
    }

    tiny_vocab & merge(std::string m) { merges_.push_back(std::move(m)); return *this; }
    tiny_vocab & set(const std::string & key, gguf::value v) { extra_[key] = std::move(v); return *this; }
    tiny_vocab & omit(const std::string & key) { omitted_.push_back(key); return *this; }

    std::vector<uint8_t> to_bytes() const {
        gguf::writer w;
        const auto put = [&](const std::string & key, gguf::value v) {
            for (const auto & o : omitted_) {
                if (o == key) return;
            }
            w.set(key, std::move(v));
        };
        put("tokenizer.ggml.model", gguf::value::make_string(model_));
        put("tokenizer.ggml.tokens", gguf::value::make_string_array(tokens_));
        put("tokenizer.ggml.scores", gguf::value::make_f32_array(scores_));
        put("tokenizer.ggml.token_type", gguf::value::make_i32_array(types_));
        if (model_ == "gpt2") put("tokenizer.ggml.merges", gguf::value::make_string_array(merges_));
        for (const auto & [key, v] : extra_) put(key, v);
        return w.to_bytes();
    }

    result<std::unique_ptr<tokenizer>> build() const {
        const auto bytes = to_bytes();
        auto file = gguf::file::from_bytes(bytes);
        if (!file) return file.error();
        return tokenizer::from_gguf(**file);
    }

private:
    std::string                        model_;
    std::vector<std::string>           tokens_;
    std::vector<float>                 scores_;
    std::vector<int32_t>               types_;
    std::vector<std::string>           merges_;
    std::map<std::string, gguf::value> extra_;
    std::vector<std::string>           omitted_;
};

// Builds `v` or fails the current test (use inside ASSERT_NO_FATAL_FAILURE or check the result).
inline std::unique_ptr<tokenizer> build_or_fail(const tiny_vocab & v) {
    auto t = v.build();
    EXPECT_TRUE(t.is_ok()) << t.error().to_string();
    return t.is_ok() ? std::move(t).value() : nullptr;
}

}  // namespace skippy::testing
