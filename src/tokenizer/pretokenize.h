// BPE pre-tokenizers: the regex cascades that cut text into words before merging,
// chosen by tokenizer.ggml.pre. Regexes run on PCRE2 with UTF and UCP, so \p{L},
// \p{N}, \p{P} and \s use real Unicode properties.
#pragma once

#include "base/status.h"

#include <memory>
#include <string_view>
#include <vector>

namespace skippy::tokenizer_detail {

// One pre-tokenizer family (several tokenizer.ggml.pre names share one).
struct pre_style {
    std::string_view              family;        // "gpt-2", "llama-3", ... (for messages)
    std::vector<std::string_view> patterns;      // applied in order, see pretokenizer::split
    bool                          ignore_merges; // a word that is already a token is taken whole
};

// The style for a tokenizer.ggml.pre value, or nullptr when we do not support it.
const pre_style * find_pre_style(std::string_view pre);

// The supported tokenizer.ggml.pre values, for error messages and docs.
std::string_view supported_pre_names();

class pretokenizer {
public:
    // Compiles the style's patterns. Fails only if PCRE2 rejects one (a bug of ours).
    static result<std::unique_ptr<pretokenizer>> create(const pre_style & style);
    ~pretokenizer();
    pretokenizer(const pretokenizer &) = delete;
    pretokenizer & operator=(const pretokenizer &) = delete;

    const pre_style & style() const { return style_; }

    // Cuts `text` into consecutive non-empty words that together are exactly `text`.
    // Each pattern in turn re-cuts every current word on its own (a match never spans
    // two words): matches become words and so do the stretches between matches, as in
    // llama.cpp's unicode_regex_split.
    // REQUIRES: text is well-formed UTF-8. Views point into `text`.
    void split(std::string_view text, std::vector<std::string_view> & words) const;

private:
    struct compiled;
    explicit pretokenizer(const pre_style & style);

    const pre_style &                      style_;
    std::vector<std::unique_ptr<compiled>> regexes_;
};

}  // namespace skippy::tokenizer_detail
