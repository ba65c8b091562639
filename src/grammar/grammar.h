// Constrained output: GBNF grammars, JSON schema → GBNF, and a matcher that says which
// tokens may come next so that the output always parses and matches.
//
//   auto g   = grammar::compile(gbnf);                          // or from a JSON schema:
//   auto txt = grammar::gbnf_from_json_schema(schema, {.strict = true});
//   auto m   = grammar::matcher(*g);
//   auto v   = grammar::token_trie::build(pieces, eog_ids);     // once per vocabulary
//   m.allowed_tokens(**v, mask);  ... sample among mask ...  m.advance_token(**v, id);
//
// Syntax, the schema subset, the whitespace policy, the limits and the errors:
// docs/grammar.md. Everything here is client input: a bad or hostile grammar or schema
// is an error status (invalid_argument, or unsupported for what we do not implement),
// never a crash, a hang or an unbounded allocation.
#pragma once

#include "base/status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::grammar {

namespace detail {
struct grammar_data;
struct trie_data;
class engine;
}  // namespace detail

// ---------------------------------------------------------------------------------------
// Grammars

// Bounds on what compile() accepts. The defaults admit every grammar the JSON schema
// converter produces for reasonable schemas; all are checked before the memory is spent.
struct grammar_limits {
    size_t   max_text_bytes = 1u << 20;     // GBNF source size
    uint32_t max_nesting_depth = 64;        // ( ) groups inside one another
    uint32_t max_repetition = 10000;        // the largest m or n of {m,n}
    size_t   max_rules = 50000;             // named rules plus those groups and repetitions add
    size_t   max_symbols = 1u << 20;        // grammar elements after expanding repetitions
};

// A compiled grammar: immutable, shareable across threads and matchers.
class compiled_grammar {
public:
    ~compiled_grammar();
    compiled_grammar(const compiled_grammar &) = delete;
    compiled_grammar & operator=(const compiled_grammar &) = delete;

    size_t n_rules() const;    // including synthesized ones
    size_t n_symbols() const;  // grammar elements (terminals, references, ends)

    // Internal to src/grammar (compile() makes them; the matcher reads them).
    const detail::grammar_data & data() const { return *data_; }
    explicit compiled_grammar(std::unique_ptr<detail::grammar_data> data);

private:
    std::unique_ptr<detail::grammar_data> data_;
};

using grammar_ptr = std::shared_ptr<const compiled_grammar>;

// Parses and checks a GBNF grammar (llama.cpp's syntax; docs/grammar.md). The start
// rule is `root`.
// PROMISES: on success every rule is defined, nothing is left-recursive, and every
//   alternative that can never match a whole string has been dropped, so a matcher
//   state that is alive can always be completed to a string the grammar accepts.
//   On failure: invalid_argument with "line:column: what" (bytes, 1-based), or for
//   left recursion the rules of the cycle; a limit exceeded is invalid_argument too.
result<grammar_ptr> compile(std::string_view gbnf, const grammar_limits & limits = {});

// ---------------------------------------------------------------------------------------
// JSON schema → GBNF

struct json_schema_options {
    // true: a keyword that constrains values but that we do not enforce exactly is an
    // error (unsupported) naming it. false: such keywords are ignored (the output still
    // matches everything we do enforce). Annotations (title, description, ...) are
    // always ignored. docs/grammar.md lists both sets.
    bool     strict = true;
    uint32_t max_depth = 64;       // schema nesting (objects inside arrays inside ...)
    size_t   max_rules = 10000;    // rules the converter may write
};

// The GBNF of the JSON documents `schema` admits (root rule `root`), in our whitespace
// policy. REQUIRES nothing of the schema: anything malformed is invalid_argument,
// anything outside the subset unsupported (strict) or ignored (not strict).
// Property order is the schema's order, so pass an ordered_json when it matters
// (nlohmann::json sorts keys).
result<std::string> gbnf_from_json_schema(const nlohmann::ordered_json & schema,
                                          const json_schema_options & options = {});
// Same, from the schema's JSON text (parsed keeping the key order).
result<std::string> gbnf_from_json_schema(std::string_view schema_json,
                                          const json_schema_options & options = {});

// The GBNF of `response_format: {type: "json_object"}`: any JSON object.
std::string gbnf_json_object();

// ---------------------------------------------------------------------------------------
// Vocabulary

using token_id = int32_t;

// A vocabulary prepared for masks: the tokens' bytes in a byte trie. Immutable once
// built; share one per model across matchers and threads.
class token_trie {
public:
    // pieces[id]: the bytes token `id` produces (tokenizer::token_to_piece). Tokens with
    // no bytes are never allowed under a grammar, except the end-of-generation ids,
    // which are allowed exactly where the grammar may end (their pieces are ignored).
    // Ids out of range in end_of_generation_ids are invalid_argument.
    static result<std::shared_ptr<const token_trie>> build(std::vector<std::string> pieces,
                                                           const std::vector<token_id> & end_of_generation_ids);
    ~token_trie();
    token_trie(const token_trie &) = delete;
    token_trie & operator=(const token_trie &) = delete;

    int32_t          n_vocab() const;
    std::string_view piece(token_id id) const;   // REQUIRES 0 <= id < n_vocab()
    bool             is_end_of_generation(token_id id) const;
    size_t           n_nodes() const;             // trie nodes (for the bench's report)
    uint64_t         serial() const;               // unique per built trie (cache key)

    // Internal to src/grammar (build() makes them; the matcher walks them).
    const detail::trie_data & data() const { return *data_; }
    explicit token_trie(std::unique_ptr<detail::trie_data> data);

private:
    std::unique_ptr<detail::trie_data> data_;
};

using token_trie_ptr = std::shared_ptr<const token_trie>;

// One bit per token id: the set of tokens that may come next.
class token_mask {
public:
    void    reset(int32_t n_vocab);          // n_vocab bits, all clear
    int32_t n_vocab() const { return n_vocab_; }
    bool    test(token_id id) const {        // false for ids out of range
        return id >= 0 && id < n_vocab_ && ((words_[size_t(id) >> 6] >> (id & 63)) & 1u);
    }
    void    set(token_id id) { words_[size_t(id) >> 6] |= uint64_t{1} << (id & 63); }  // REQUIRES id in range
    int32_t count() const;                   // tokens allowed
    // Allowed ids, ascending.
    std::vector<token_id> ids() const;
    const std::vector<uint64_t> & words() const { return words_; }
    std::vector<uint64_t> &       words() { return words_; }

private:
    int32_t               n_vocab_ = 0;
    std::vector<uint64_t> words_;
};

// ---------------------------------------------------------------------------------------
// Matcher

struct matcher_limits {
    uint32_t max_stacks = 512;              // parse stacks alive at once (ambiguity)
    uint64_t max_work_per_call = 1u << 24;  // expansion steps one call may spend
    size_t   memo_budget_bytes = 64u << 20; // memoised states and transitions; compacted past it
    uint32_t max_cached_masks = 64;         // whole masks remembered per state
};

// What the memo did, for tests and the bench (counts since the matcher was made).
struct matcher_stats {
    size_t   n_states = 0;           // grammar states memoised now
    size_t   n_transitions = 0;      // byte transitions memoised now
    uint64_t n_mask_cache_hits = 0;  // allowed_tokens answered from a remembered mask
    uint64_t n_bulk_subtrees = 0;    // trie subtrees allowed whole without walking them
    uint64_t n_compactions = 0;      // times the memo went past its budget
    uint64_t n_nodes_walked = 0;     // trie nodes visited by allowed_tokens
    uint64_t n_steps_computed = 0;   // byte transitions computed (memo misses)
};

// Where a generation stands in a grammar: which bytes may come next, whether it may end.
//
// Bytes are UTF-8; a character may be split across tokens (a partial character is
// carried to the next call). Invalid UTF-8 (overlong forms, surrogates, stray
// continuation bytes) is never accepted.
//
// A limit exceeded (too many stacks, too much work, a state larger than the memo
// budget) puts the matcher into a failed state: that call and every later one return
// the error (invalid_argument: the grammar is too ambiguous or too large to run), and
// accepts() answers false. A rejected advance leaves the state unchanged.
//
// Not thread-safe: even the asking calls fill the matcher's memo. One per request.
class matcher {
public:
    explicit matcher(grammar_ptr grammar, const matcher_limits & limits = {});
    ~matcher();
    matcher(matcher &&) noexcept;
    matcher & operator=(matcher &&) noexcept;

    // Back to the start of the grammar (keeps the memo; clears a failure).
    void reset();

    // True when the grammar admits some output that starts with what was accepted so
    // far followed by `bytes` (a partial character at the end counts when it can be
    // completed). accepts("") is true unless failed.
    bool accepts(std::string_view bytes);
    // Consumes `bytes`. invalid_argument when !accepts(bytes) (state unchanged).
    status advance(std::string_view bytes);

    // The output so far is a complete match (no partial character pending).
    bool can_end() const;
    // can_end() and nothing may follow: generation should stop.
    bool is_done() const;
    // The error that failed the matcher, or ok.
    status error() const;

    // The tokens that may come next: a token is set iff accepts(piece) (non-empty
    // piece), or it is end-of-generation and can_end(). Fills `mask` (resized).
    // Cost: a walk of the trie pruned where the grammar dies, with transitions and
    // whole masks memoised per grammar state; see docs/grammar.md for figures.
    status allowed_tokens(const token_trie & vocab, token_mask & mask);
    // The same answer for one token (cheap: the sampler checks its favourite first).
    bool accepts_token(const token_trie & vocab, token_id id);
    // Consumes a token: its bytes, or for end-of-generation the end (afterwards only
    // is_done() holds and nothing more is accepted). invalid_argument when not allowed.
    status advance_token(const token_trie & vocab, token_id id);

    // Memo size in bytes (approximate), for tests and the bench.
    size_t memo_bytes() const;
    matcher_stats stats() const;

private:
    grammar_ptr                     grammar_;
    std::unique_ptr<detail::engine> engine_;
    uint32_t                        state_ = 0;     // the engine's id of where the output stands
    bool                            ended_ = false; // an end-of-generation token was consumed
};

}  // namespace skippy::grammar
