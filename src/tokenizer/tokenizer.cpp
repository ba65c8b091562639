#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

#include <algorithm>

namespace skippy {

using tokenizer_detail::vocab;

tokenizer::tokenizer(std::unique_ptr<const vocab> v) : vocab_(std::move(v)) {}

tokenizer::~tokenizer() = default;

result<std::unique_ptr<tokenizer>> tokenizer::from_gguf(const gguf::file & file) {
    auto loaded = tokenizer_detail::load_vocab(file);
    if (!loaded) return loaded.error().with_context("tokenizer");
    auto v = std::make_unique<const vocab>(std::move(loaded).value());
    if (v->model == tokenizer_model::spm) {
        return std::unique_ptr<tokenizer>(std::make_unique<tokenizer_detail::spm_tokenizer>(std::move(v)));
    }
    auto bpe = tokenizer_detail::bpe_tokenizer::create(std::move(v));
    if (!bpe) return bpe.error().with_context("tokenizer");
    return bpe;
}

tokenizer_model tokenizer::model() const { return vocab_->model; }

int32_t tokenizer::n_vocab() const { return vocab_->n_vocab(); }

std::vector<token_id> tokenizer::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_->bos >= 0) out.push_back(vocab_->bos);
    bool after_special = true;  // the start of the input counts as "after a special token"
    for (const auto & fragment : tokenizer_detail::split_special_tokens(text, *vocab_, parse_special)) {
        if (fragment.token >= 0) {
            out.push_back(fragment.token);
            after_special = true;
        } else {
            encode_text(text.substr(fragment.offset, fragment.length), after_special, out);
            after_special = false;
        }
    }
    return out;
}

std::string tokenizer::token_to_piece(token_id id, bool render_special) const {
    if (!vocab_->valid_id(id)) return {};
    const token_kind k = vocab_->kinds[id];
    if (!render_special && (k == token_kind::control || k == token_kind::unknown)) return {};
    return vocab_->pieces[id];
}

std::string tokenizer::detokenize(const std::vector<token_id> & ids, bool render_special,
                                  bool strip_space_prefix) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        std::string piece = token_to_piece(ids[i], render_special);
        // Undo the space prefix tokenize added; llama.cpp looks at the first token only.
        if (i == 0 && strip_space_prefix && vocab_->add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        out += piece;
    }
    return out;
}

std::string_view tokenizer::token_text(token_id id) const {
    return vocab_->valid_id(id) ? std::string_view(vocab_->texts[id]) : std::string_view();
}

token_kind tokenizer::kind(token_id id) const {
    return vocab_->valid_id(id) ? vocab_->kinds[id] : token_kind::undefined;
}

token_id tokenizer::find_token(std::string_view text) const { return vocab_->find(text); }

token_id tokenizer::bos() const { return vocab_->bos; }
token_id tokenizer::eos() const { return vocab_->eos; }
token_id tokenizer::unk() const { return vocab_->unk; }

bool tokenizer::add_bos_default() const { return vocab_->add_bos; }

bool tokenizer::is_end_of_generation(token_id id) const {
    return std::binary_search(vocab_->eog_ids.begin(), vocab_->eog_ids.end(), id);
}

const std::vector<token_id> & tokenizer::end_of_generation_ids() const { return vocab_->eog_ids; }

}  // namespace skippy
