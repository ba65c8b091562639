#include "runtime/constraint.h"

#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <vector>

namespace skippy {

constraint_cache::constraint_cache(std::shared_ptr<const gguf::file> file, size_t max_grammars)
    : file_(std::move(file)), max_grammars_(std::max<size_t>(max_grammars, 1)) {}

constraint_cache::constraint_cache(grammar::token_trie_ptr vocab, size_t max_grammars)
    : max_grammars_(std::max<size_t>(max_grammars, 1)), vocab_(std::move(vocab)) {}

result<grammar::token_trie_ptr> constraint_cache::vocabulary_locked() {
    if (vocab_) return vocab_;
    if (!file_) return make_error(error_code::invalid_argument, "this stage has no vocabulary to constrain its output with");
    SKIPPY_ASSIGN_OR_RETURN(auto tok, tokenizer::from_gguf(*file_));
    std::vector<std::string> pieces;
    pieces.reserve(static_cast<size_t>(tok->n_vocab()));
    for (token_id id = 0; id < tok->n_vocab(); ++id) pieces.push_back(tok->token_to_piece(id));
    SKIPPY_ASSIGN_OR_RETURN(vocab_, grammar::token_trie::build(std::move(pieces), tok->end_of_generation_ids()));
    return vocab_;
}

result<grammar::token_trie_ptr> constraint_cache::vocabulary() {
    std::lock_guard<std::mutex> lock(mutex_);
    return vocabulary_locked();
}

result<constraint_cache::compiled> constraint_cache::get(std::string_view gbnf) {
    std::lock_guard<std::mutex> lock(mutex_);
    SKIPPY_ASSIGN_OR_RETURN(grammar::token_trie_ptr vocab, vocabulary_locked());
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it) {
        if (it->first == gbnf) {
            grammars_.splice(grammars_.begin(), grammars_, it);
            return compiled{grammars_.front().second, vocab};
        }
    }
    // Compiled under the lock: two lanes asking for one new grammar compile it once.
    SKIPPY_ASSIGN_OR_RETURN(grammar::grammar_ptr g, grammar::compile(gbnf));
    grammars_.emplace_front(std::string(gbnf), g);
    while (grammars_.size() > max_grammars_) grammars_.pop_back();
    return compiled{std::move(g), std::move(vocab)};
}

size_t constraint_cache::n_cached() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return grammars_.size();
}

}  // namespace skippy
