// The vocabulary a GGUF file describes, validated: token texts, scores, kinds, special
// ids and flags. Internal to the tokenizer part; both tokenizers read it.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::tokenizer_detail {

// Token ids by text: open addressing over ids, each slot a 32-bit hash tag and an id,
// compared against the texts themselves. A lookup costs one probe and one string
// compare; the node map it replaced cost three cache misses, and loading a 200k-token
// vocabulary with its 450k merges (three lookups each) took most of a second.
class text_index {
public:
    // Indexes texts[i] as id i. REQUIRES: fewer than 2^31 - 1 texts. When two texts are
    // equal it stops there and returns both ids (first < second); else {-1, -1}.
    struct duplicate {
        token_id first = -1;
        token_id second = -1;
    };
    duplicate build(const std::vector<std::string> & texts);
    // Id whose text is exactly `text`, or -1. REQUIRES: `texts` is what build() saw.
    token_id find(std::string_view text, const std::vector<std::string> & texts) const;

private:
    static uint64_t slot_of(uint32_t tag, token_id id) { return (uint64_t{tag} << 32) | static_cast<uint32_t>(id); }
    std::vector<uint64_t> slots_;  // empty slot: id bits all ones
    uint64_t              mask_ = 0;
};

// A BPE merge: the ids of its two pieces and of the piece they make.
struct bpe_merge {
    token_id left = -1;
    token_id right = -1;
    token_id merged = -1;
};

struct vocab {
    tokenizer_model model = tokenizer_model::spm;
    std::string     pre;   // BPE: tokenizer.ggml.pre ("default" when absent); SPM: ""

    // Per token, indexed by id; all the same length (n_vocab >= 1).
    std::vector<std::string> texts;   // as stored (an empty text becomes "[EMPTY_<id>]", as in llama.cpp)
    std::vector<float>       scores;  // SPM merge priority; 0 when the file has none
    std::vector<token_kind>  kinds;
    std::vector<uint8_t>     strip;   // k_lstrip / k_rstrip: whitespace a matched special token eats
    std::vector<std::string> pieces;  // the bytes each token renders to (with render_special)

    text_index            ids_by_text;
    std::vector<token_id> special_ids;  // control, user-defined and unknown tokens; longest text first
    std::vector<token_id> eog_ids;      // end-of-generation ids, ascending

    std::vector<bpe_merge> merges;      // BPE, in the file's order: the index is the rank

    token_id bos = -1;
    token_id eos = -1;
    token_id unk = -1;
    bool     add_bos = false;
    bool     add_space_prefix = false;  // SPM: prefix " " to text at the start / after a special token

    static constexpr uint8_t k_lstrip = 1;
    static constexpr uint8_t k_rstrip = 2;

    int32_t n_vocab() const { return static_cast<int32_t>(texts.size()); }
    bool    valid_id(token_id id) const { return id >= 0 && id < n_vocab(); }
    // Id whose text is exactly `text`, or -1.
    token_id find(std::string_view text) const { return ids_by_text.find(text, texts); }
};

// Reads and validates the tokenizer.ggml.* metadata of `file`.
result<vocab> load_vocab(const gguf::file & file);

}  // namespace skippy::tokenizer_detail
