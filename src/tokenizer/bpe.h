// Byte-level BPE with ranked merges (tokenizer.ggml.model = "gpt2").
#pragma once

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#include <memory>
#include <string_view>
#include <unordered_map>

namespace skippy::tokenizer_detail {

class bpe_tokenizer final : public tokenizer {
public:
    // Fails when the vocabulary's pre-tokenizer is unsupported.
    static result<std::unique_ptr<tokenizer>> create(std::unique_ptr<const vocab> v);

protected:
    // The text is made well-formed UTF-8 (each bad byte -> U+FFFD), cut into words by the
    // pre-tokenizer, and each word's bytes are spelled in the GPT-2 byte alphabet; then
    // the adjacent pair with the lowest merge rank is merged, repeatedly (ties: leftmost
    // first); each final piece is its token, or its single bytes' tokens.
    void encode_text(std::string_view text, bool after_special, std::vector<token_id> & out) const override;

private:
    struct merge_pair {
        std::string_view left;
        std::string_view right;
        bool operator==(const merge_pair &) const = default;
    };
    struct merge_pair_hash {
        size_t operator()(const merge_pair & p) const;
    };

    bpe_tokenizer(std::unique_ptr<const vocab> v, std::unique_ptr<pretokenizer> pre);

    // Rank of merging `left` and `right`, or -1.
    int32_t merge_rank(std::string_view left, std::string_view right) const;

    std::unique_ptr<pretokenizer> pre_;
    // Views into vocabulary().merges, which lives (unmodified) as long as this tokenizer.
    std::unordered_map<merge_pair, int32_t, merge_pair_hash> ranks_;
};

}  // namespace skippy::tokenizer_detail
