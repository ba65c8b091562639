// SentencePiece-style BPE over characters, scored by piece (tokenizer.ggml.model = "llama").
#pragma once

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#include <array>

namespace skippy::tokenizer_detail {

class spm_tokenizer final : public tokenizer {
public:
    explicit spm_tokenizer(std::unique_ptr<const vocab> v);

protected:
    // Spaces become U+2581 (with one more in front when after_special and the vocabulary
    // adds a space prefix); the text is cut into UTF-8 characters; the adjacent pair whose
    // concatenation is the highest-scoring token is merged, repeatedly (ties: leftmost
    // first); each final piece is its token, or its bytes as <0xXX> tokens, or unk.
    void encode_text(std::string_view text, bool after_special, std::vector<token_id> & out) const override;

private:
    // Token for each byte when a piece is not in the vocabulary: "<0xXX>", else the
    // one-byte text, else unk, else -1 (the byte is dropped).
    std::array<token_id, 256> byte_tokens_{};
};

}  // namespace skippy::tokenizer_detail
