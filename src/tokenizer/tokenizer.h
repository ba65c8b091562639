// Tokenizers built from GGUF metadata: SentencePiece-style (tokenizer.ggml.model =
// "llama") and byte-level BPE ("gpt2") with the pre-tokenizer named by
// tokenizer.ggml.pre. They reproduce llama.cpp's tokenization id for id; see
// docs/tokenizer.md for the algorithms, the supported pre-tokenizers and the BOS rules.
//
// A tokenizer is immutable once built: every const call may run concurrently.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace skippy {

using token_id = int32_t;

// tokenizer.ggml.token_type values.
enum class token_kind : int32_t {
    undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

enum class tokenizer_model { spm, bpe };

namespace tokenizer_detail {
struct vocab;
}

class tokenizer {
public:
    virtual ~tokenizer();
    tokenizer(const tokenizer &) = delete;
    tokenizer & operator=(const tokenizer &) = delete;

    // Builds the tokenizer a GGUF file describes. Missing or inconsistent metadata
    // (no token list, array lengths that differ, special-token ids out of range,
    // duplicate tokens) is invalid_data; an unknown tokenizer.ggml.model or
    // tokenizer.ggml.pre is unsupported. Never crashes on a hostile file.
    static result<std::unique_ptr<tokenizer>> from_gguf(const gguf::file & file);

    tokenizer_model model() const;
    int32_t n_vocab() const;

    // Token ids for `text` (any bytes; invalid UTF-8 is tolerated, see the docs).
    // add_bos prepends BOS when the vocabulary has one (callers usually pass
    // add_bos_default()). parse_special = false treats control-token text ("<s>") as
    // plain text, like the shared test vectors; true maps it to the control tokens
    // (chat templates). User-defined tokens are matched either way, as llama.cpp does.
    std::vector<token_id> tokenize(std::string_view text, bool add_bos, bool parse_special) const;

    // The bytes a token stands for (byte tokens become their byte, SPM's U+2581 a space,
    // BPE's byte alphabet its bytes). Control and unknown tokens give "" unless
    // render_special; unused/undefined tokens and out-of-range ids always give "".
    // Use this to stream generated text token by token.
    std::string token_to_piece(token_id id, bool render_special = false) const;

    // Concatenated pieces (token_to_piece of each id), e.g. the text of generated tokens.
    // With strip_space_prefix, an SPM vocabulary that adds a space prefix drops one
    // leading space from the first token's piece (the space tokenize added), as
    // llama.cpp's llama_detokenize does: detokenize(tokenize(s, false, false), false,
    // true) == s. Like llama.cpp it looks at the very first token only, so a leading BOS
    // (rendered "") spends the strip. Leave it off for continuations: their first space
    // is real. The result may hold invalid UTF-8 (a character split across tokens);
    // callers sanitize where they need text.
    std::string detokenize(const std::vector<token_id> & ids, bool render_special = false,
                           bool strip_space_prefix = false) const;

    // The token's text as stored in the vocabulary ("" when out of range).
    std::string_view token_text(token_id id) const;
    // The token's kind (undefined when out of range), after llama.cpp's overrides:
    // tokens it recognises by text as end of generation, EOT, EOM or FIM report control;
    // the harmony markers (<|start|>, <|channel|>, <|message|>, <|constrain|>, and
    // <|end|> where <|return|> and <|call|> exist) report user_defined.
    token_kind kind(token_id id) const;
    // The id whose stored text is exactly `text`, or -1.
    token_id find_token(std::string_view text) const;

    token_id bos() const;   // -1 when none
    token_id eos() const;   // -1 when none
    token_id unk() const;   // -1 when none
    // BOS is added by default: tokenizer.ggml.add_bos_token when present, else true for
    // SPM and false for BPE (never true without a BOS).
    bool add_bos_default() const;
    // End of generation, by llama.cpp's rules (docs/tokenizer.md): EOS, EOT, EOM, the FIM
    // pad / repository / file-separator tokens (by key, else by text), and the tokens
    // recognised by text ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>",
    // "<|call|>", ...), except harmony's <|end|> when <|return|> and <|call|> exist.
    bool is_end_of_generation(token_id id) const;
    // Those ids, ascending.
    const std::vector<token_id> & end_of_generation_ids() const;

protected:
    explicit tokenizer(std::unique_ptr<const tokenizer_detail::vocab> vocab);

    const tokenizer_detail::vocab & vocabulary() const { return *vocab_; }

    // Appends the tokens of `text`, a stretch of input that holds no special token.
    // after_special is true at the start of the input and right after a special token
    // (SPM adds its space prefix only there).
    virtual void encode_text(std::string_view text, bool after_special, std::vector<token_id> & out) const = 0;

private:
    std::unique_ptr<const tokenizer_detail::vocab> vocab_;
};

// Replaces each byte that is not part of a well-formed UTF-8 sequence by U+FFFD, one
// U+FFFD per bad byte: truncated sequences, lone continuation bytes, overlong forms,
// surrogates (U+D800..U+DFFF) and code points above U+10FFFF are all rejected.
std::string sanitize_utf8(std::string_view text);

}  // namespace skippy
