// libFuzzer targets for src/grammar, one source built three ways:
//   SKIPPY_GRAMMAR_FUZZ_GBNF   gbnf_fuzzer: the input is GBNF text
//   SKIPPY_GRAMMAR_FUZZ_SCHEMA json_schema_fuzzer: the input is a JSON schema
//   SKIPPY_GRAMMAR_FUZZ_SEEDS  grammar_fuzz_seeds DIR_GBNF DIR_SCHEMA: writes seeds
//
// Beyond "no crash, no hang, no sanitizer report, no unbounded allocation", whatever
// compiles must run: the matcher, under tight limits, answers consistently (the mask
// equals the per-token answer; an accepted advance keeps the state alive), and for a
// schema, random constrained output that ends is JSON nlohmann parses.
#include "grammar/grammar.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if defined(SKIPPY_GRAMMAR_FUZZ_SEEDS)
#include "schema_corpus.h"

#include <filesystem>
#include <fstream>
#endif

using namespace skippy;
using namespace skippy::grammar;

#if !defined(SKIPPY_GRAMMAR_FUZZ_SEEDS)
namespace {

#define FUZZ_CHECK(cond)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            std::fprintf(stderr, "grammar_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                                \
        }                                                                                                \
    } while (0)

matcher_limits tight_limits() {
    matcher_limits l;
    l.max_stacks = 64;
    l.max_work_per_call = 200000;
    l.memo_budget_bytes = 1u << 20;
    l.max_cached_masks = 4;
    return l;
}

// Single bytes, a few words and structural pieces, and an end-of-generation token.
const token_trie & fuzz_vocabulary() {
    static token_trie_ptr vocab = [] {
        std::vector<std::string> pieces;
        for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
        for (const char * p : {"ab", "abc", "\":", "\",", "{\"", "\"}", "[]", "12", "true", "null", "  ", "\n",
                               "é", "日本", "\xE6\x97", "\xA5", "😀", "\xF0\x9F"}) {
            pieces.push_back(p);
        }
        pieces.push_back("");  // end of generation
        auto v = token_trie::build(pieces, {token_id(pieces.size() - 1)});
        FUZZ_CHECK(v.is_ok());
        return *v;
    }();
    return *vocab;
}

// Walks the grammar from its start (m.reset(), which keeps the memo of any earlier walk)
// with tokens picked from the mask (seeded by the input), checking the mask against the
// per-token answer; returns the output if the walk ended.
bool walk(matcher & m, uint32_t seed, int max_steps, bool prefer_closing, std::string & out) {
    const token_trie & vocab = fuzz_vocabulary();
    m.reset();
    std::mt19937       rng(seed);
    token_mask         mask;
    for (int step = 0; step < max_steps; ++step) {
        if (!m.allowed_tokens(vocab, mask).is_ok()) {
            FUZZ_CHECK(!m.error().is_ok());
            return false;
        }
        if (step < 3) {
            for (token_id id = 0; id < vocab.n_vocab(); ++id) {
                bool ok = m.accepts_token(vocab, id);
                if (!m.error().is_ok()) return false;
                FUZZ_CHECK(mask.test(id) == ok);
            }
        }
        std::vector<token_id> ids = mask.ids();
        // compile() drops what can never complete, so a live state always has a way on.
        FUZZ_CHECK(!ids.empty());
        token_id pick = ids[rng() % ids.size()];
        if (vocab.is_end_of_generation(ids.back()) && (step > max_steps / 2 || rng() % 4 == 0)) pick = ids.back();
        if (prefer_closing && step > max_steps / 4 && !vocab.is_end_of_generation(pick)) {
            // A length test first: this loop runs over every allowed token at every
            // step, and each traced string compare is a callback in this harness.
            for (token_id id : ids) {
                std::string_view p = vocab.piece(id);
                if (p.size() == 1 && (p[0] == '}' || p[0] == ']' || p[0] == '"')) pick = id;
            }
        }
        status st = m.advance_token(vocab, pick);
        if (!st.is_ok()) {
            FUZZ_CHECK(!m.error().is_ok());  // an allowed token is refused only by a limit
            return false;
        }
        if (vocab.is_end_of_generation(pick)) {
            FUZZ_CHECK(m.is_done());
            return true;
        }
        out += vocab.piece(pick);
    }
    return false;
}

void fuzz_gbnf(std::string_view text) {
    grammar_limits limits;
    limits.max_rules = 2000;
    limits.max_symbols = 20000;
    limits.max_repetition = 200;
    auto g = compile(text, limits);
    if (!g.is_ok()) {
        FUZZ_CHECK(g.error().code() == error_code::invalid_argument);
        return;
    }
    std::string out;
    matcher     walker(*g, tight_limits());
    (void)walk(walker, uint32_t(text.size()), 40, false, out);
    // Raw bytes of the input against the grammar, split into two calls.
    matcher m(*g, tight_limits());
    size_t  cut = text.size() / 2;
    if (m.accepts(text.substr(0, cut))) {
        FUZZ_CHECK(m.advance(text.substr(0, cut)).is_ok() || !m.error().is_ok());
    }
    (void)m.advance(text.substr(cut));
}

void fuzz_schema(std::string_view text) {
    nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, nullptr, false);
    if (schema.is_discarded()) return;
    // Most schemas inside the subset convert to the same text strict or not; the walks
    // over that grammar are deterministic, so running them twice checks nothing new.
    std::string strict_gbnf;
    for (bool strict : {true, false}) {
        json_schema_options options;
        options.strict = strict;
        options.max_depth = 16;
        options.max_rules = 2000;
        auto gbnf = gbnf_from_json_schema(schema, options);
        if (!gbnf.is_ok()) {
            FUZZ_CHECK(gbnf.error().code() == error_code::invalid_argument ||
                       gbnf.error().code() == error_code::unsupported);
            continue;
        }
        if (strict) {
            strict_gbnf = *gbnf;
        } else if (*gbnf == strict_gbnf) {
            continue;
        }
        auto g = compile(*gbnf);
        if (!g.is_ok()) {
            // Only what a schema can mean (left recursion through $ref, nothing
            // admitted, a limit); never a syntax error in what the converter wrote.
            FUZZ_CHECK(g.error().message().find("expected") == std::string::npos);
            FUZZ_CHECK(g.error().message().find("unexpected") == std::string::npos);
            continue;
        }
        // One matcher for both walks: the second starts after reset() on the first one's
        // memo, so it checks reused states and masks (as a server's matcher that is reset
        // would use them) against the per-token answers, and costs less.
        matcher m(*g, tight_limits());
        for (uint32_t seed = 0; seed < 2; ++seed) {
            std::string out;
            if (walk(m, seed + uint32_t(text.size()), 200, true, out)) {
                FUZZ_CHECK(!nlohmann::ordered_json::parse(out, nullptr, false).is_discarded());
            }
        }
    }
}

}  // namespace
#endif

#if defined(SKIPPY_GRAMMAR_FUZZ_SEEDS)

namespace {

void write_file(const std::filesystem::path & path, std::string_view bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s GBNF_CORPUS_DIR SCHEMA_CORPUS_DIR\n", argv[0]);
        return 2;
    }
    std::filesystem::create_directories(argv[1]);
    std::filesystem::create_directories(argv[2]);
    const char * const grammars[] = {
        "root ::= \"a\" [b-d]* \"e\"",
        "root ::= ( \"x\" | y ){2,5} .\ny ::= [^\\n\"]+ # comment",
        "root ::= \"(\" root \")\" | [0-9]{1,3}",
        "root ::= \"\\u00e9\\x41\\U0001F600\" [\\t-\\r] ( \"a\"? \"b\"+ )*",
        "root ::= a b\na ::= \"\" | \"a\"\nb ::= \"b\" a",
    };
    int n = 0;
    for (const char * g : grammars) write_file(std::filesystem::path(argv[1]) / ("seed-" + std::to_string(n++)), g);
    for (const auto & c : skippy::grammar::testing::schema_corpus()) {
        write_file(std::filesystem::path(argv[2]) / ("seed-" + c.name), c.schema);
        auto gbnf = gbnf_from_json_schema(std::string_view(c.schema));
        if (gbnf.is_ok()) write_file(std::filesystem::path(argv[1]) / ("seed-" + c.name), *gbnf);
    }
    return 0;
}

#else

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    std::string_view text(reinterpret_cast<const char *>(data), size);
#if defined(SKIPPY_GRAMMAR_FUZZ_GBNF)
    fuzz_gbnf(text);
#elif defined(SKIPPY_GRAMMAR_FUZZ_SCHEMA)
    fuzz_schema(text);
#else
#error "define SKIPPY_GRAMMAR_FUZZ_GBNF, SKIPPY_GRAMMAR_FUZZ_SCHEMA or SKIPPY_GRAMMAR_FUZZ_SEEDS"
#endif
    return 0;
}

#endif
