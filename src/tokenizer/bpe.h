// Byte-level BPE with ranked merges (tokenizer.ggml.model = "gpt2").
#pragma once

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#include <memory>
#include <string_view>
#include <vector>

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
    // A merge found by its pieces' ids: its rank and the id it makes.
    struct ranked_merge {
        int32_t  rank = -1;
        token_id merged = -1;
    };

    bpe_tokenizer(std::unique_ptr<const vocab> v, std::unique_ptr<pretokenizer> pre);

    // The merge of pieces `left` and `right` (ids), or rank -1.
    ranked_merge find_merge(token_id left, token_id right) const;

    std::unique_ptr<pretokenizer> pre_;
    // Open addressing on (left << 32 | right); an empty slot has rank -1. At most half
    // full, so probes stay short on the 450k merges of the large vocabularies.
    struct merge_slot {
        uint64_t     key = 0;
        ranked_merge value;
    };
    std::vector<merge_slot> merge_slots_;
    uint64_t                merge_mask_ = 0;
};

}  // namespace skippy::tokenizer_detail
