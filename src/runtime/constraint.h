// What a final stage needs to constrain its samplers with grammars: the vocabulary's
// token trie and the compiled grammars, both cached per model (docs/grammar.md,
// "Sampling under a grammar").
//
// The trie is built on first use (a stage that never sees a grammar pays nothing);
// compiled grammars are kept by their text, the most recently used few, so that the
// requests of one client (the same schema again and again) compile once.
//
// Thread-safe: the lanes of a stage may ask from different threads.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace skippy {

class constraint_cache {
public:
    // REQUIRES: file is the model the stage serves (its tokenizer metadata is read on
    // first use). max_grammars >= 1.
    explicit constraint_cache(std::shared_ptr<const gguf::file> file, size_t max_grammars = 16);
    // Over a vocabulary built elsewhere (tests, the bench). REQUIRES: vocab not null.
    explicit constraint_cache(grammar::token_trie_ptr vocab, size_t max_grammars = 16);

    struct compiled {
        grammar::grammar_ptr    grammar;
        grammar::token_trie_ptr vocab;
    };
    // The grammar `gbnf` compiled and the model's trie. invalid_argument with
    // grammar::compile's message for a bad grammar; the tokenizer's error (invalid_data
    // or unsupported) when the model's vocabulary cannot be read.
    result<compiled> get(std::string_view gbnf);

    // The model's trie alone (built on first call).
    result<grammar::token_trie_ptr> vocabulary();

    size_t n_cached() const;

private:
    result<grammar::token_trie_ptr> vocabulary_locked();

    std::shared_ptr<const gguf::file> file_;
    const size_t                      max_grammars_;
    mutable std::mutex                mutex_;
    grammar::token_trie_ptr           vocab_;
    std::list<std::pair<std::string, grammar::grammar_ptr>> grammars_;  // most recent first
};

}  // namespace skippy
