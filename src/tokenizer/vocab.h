// The vocabulary a GGUF file describes, validated: token texts, scores, kinds, special
// ids and flags. Internal to the tokenizer part; both tokenizers read it.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace skippy::tokenizer_detail {

// Hash that lets an unordered_map keyed by std::string be searched with a string_view
// (no allocation per lookup on the tokenizers' hot paths).
struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using text_to_id_map = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

struct vocab {
    tokenizer_model model = tokenizer_model::spm;
    std::string     pre;   // BPE: tokenizer.ggml.pre ("default" when absent); SPM: ""

    // Per token, indexed by id; all the same length (n_vocab >= 1).
    std::vector<std::string> texts;   // as stored (an empty text becomes "[EMPTY_<id>]", as in llama.cpp)
    std::vector<float>       scores;  // SPM merge priority; 0 when the file has none
    std::vector<token_kind>  kinds;
    std::vector<uint8_t>     strip;   // k_lstrip / k_rstrip: whitespace a matched special token eats
    std::vector<std::string> pieces;  // the bytes each token renders to (with render_special)

    text_to_id_map        text_to_id;
    std::vector<token_id> special_ids;  // control, user-defined and unknown tokens; longest text first
    std::vector<token_id> eog_ids;      // end-of-generation ids, ascending

    std::vector<std::string> merges;    // BPE: "left right" strings; the index is the rank

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
    token_id find(std::string_view text) const {
        auto it = text_to_id.find(text);
        return it == text_to_id.end() ? -1 : it->second;
    }
};

// Reads and validates the tokenizer.ggml.* metadata of `file`.
result<vocab> load_vocab(const gguf::file & file);

}  // namespace skippy::tokenizer_detail
