// Cost of constrained output per generated token: the allowed-token mask for a
// JSON-schema grammar over a 32k and a 150k-token vocabulary, against an unconstrained
// request (no matcher: nothing to pay).
//
// Each benchmark replays one recorded generation (random allowed tokens, fixed seed)
// step by step: mask, then advance by the recorded token. "warm" keeps one matcher
// across replays (its memo and mask cache fill up, as in a long generation or a
// repeated schema); "cold" starts every replay with a fresh matcher (every grammar state
// met for the first time). One iteration is one generated token: the time per
// iteration (µs) is the cost per token.
//
// Vocabularies: synthetic (BPE-like pieces: words with and without a leading space,
// digits, punctuation runs, some non-ASCII), and, when SKIPPY_TEST_DATA (or ../shared)
// holds them, the real qwen3 (151,936) and llama-spm (32,000) vocabularies.
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>

namespace {

using namespace skippy;
using namespace skippy::grammar;

const char * const bench_schema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 40},
    "kind": {"type": "string", "enum": ["person", "company", "place"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["city"], "additionalProperties": false},
    "active": {"type": "boolean"},
    "score": {"type": "number"}
  },
  "required": ["name", "kind", "tags", "address"],
  "additionalProperties": false
})";

struct vocab_fixture {
    token_trie_ptr        trie;
    std::vector<token_id> trajectory;  // a generation's tokens, ending with end-of-generation
};

std::vector<std::string> synthetic_pieces(size_t n_vocab, uint32_t seed) {
    std::mt19937             rng(seed);
    std::set<std::string>    seen;
    std::vector<std::string> out;
    auto add = [&](std::string p) {
        if (!p.empty() && seen.insert(p).second) out.push_back(std::move(p));
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
    const char * const punct[] = {"{", "}", "[", "]", "\"", ":", ",", "\":", "\",", "\"}", "},", "],", "{\"", "\": \"",
                                  "\", \"", "\n", "\n  ", "  ", "    ", ".", "-", "_", "(", ")", "!", "?", "'", "/"};
    for (const char * p : punct) add(p);
    const char * const multi[] = {"é", "ü", "ß", "日本", "中", "😀", "ñ", "ö", "я", "ø", "\xE2\x80", "\x9C"};
    std::uniform_int_distribution<int> len(1, 9), letter(0, 25), kind(0, 99);
    while (out.size() < n_vocab) {
        int         k = kind(rng);
        std::string p;
        if (k < 45) p += ' ';
        if (k < 85) {
            int n = len(rng);
            for (int i = 0; i < n; ++i) p += char((i == 0 && k % 7 == 0 ? 'A' : 'a') + letter(rng));
        } else if (k < 92) {
            int n = len(rng) % 4 + 1;
            for (int i = 0; i < n; ++i) p += char('0' + letter(rng) % 10);
        } else if (k < 97) {
            p += punct[size_t(letter(rng)) % std::size(punct)];
            p += char('a' + letter(rng));
        } else {
            p += multi[size_t(letter(rng)) % std::size(multi)];
        }
        add(std::move(p));
    }
    return out;
}

// Random allowed tokens until the grammar may end (preferring to end past 60 tokens).
std::vector<token_id> record_trajectory(const grammar_ptr & g, const token_trie & vocab, uint32_t seed) {
    std::mt19937          rng(seed);
    matcher               m(g);
    token_mask            mask;
    std::vector<token_id> out;
    for (int step = 0; step < 400; ++step) {
        if (!m.allowed_tokens(vocab, mask).is_ok()) break;
        std::vector<token_id> ids = mask.ids(), ends, others;
        for (token_id id : ids) (vocab.is_end_of_generation(id) ? ends : others).push_back(id);
        token_id next;
        if (!ends.empty() && (step > 60 || others.empty())) {
            next = ends[0];
        } else {
            std::vector<double> w;
            for (token_id id : others) {
                size_t closers = 0;
                for (char c : vocab.piece(id)) closers += c == '"' || c == '}' || c == ']';
                w.push_back(1.0 + (step > 60 ? 50.0 * double(closers) : 0.0));
            }
            next = others[std::discrete_distribution<size_t>(w.begin(), w.end())(rng)];
        }
        out.push_back(next);
        if (!m.advance_token(vocab, next).is_ok() || vocab.is_end_of_generation(next)) break;
    }
    return out;
}

grammar_ptr bench_grammar() {
    static grammar_ptr g = [] {
        auto gbnf = gbnf_from_json_schema(std::string_view(bench_schema));
        if (!gbnf.is_ok()) std::abort();
        auto c = compile(*gbnf);
        if (!c.is_ok()) std::abort();
        return *c;
    }();
    return g;
}

vocab_fixture make_fixture(std::vector<std::string> pieces, std::vector<token_id> eog) {
    vocab_fixture f;
    auto          trie = token_trie::build(std::move(pieces), eog);
    if (!trie.is_ok()) std::abort();
    f.trie = *trie;
    f.trajectory = record_trajectory(bench_grammar(), *f.trie, 7);
    return f;
}

const vocab_fixture * synthetic(size_t n_vocab) {
    static std::map<size_t, vocab_fixture> cache;
    auto it = cache.find(n_vocab);
    if (it == cache.end()) {
        auto pieces = synthetic_pieces(n_vocab - 1, uint32_t(n_vocab));
        pieces.push_back("");  // end of generation
        it = cache.emplace(n_vocab, make_fixture(std::move(pieces), {token_id(n_vocab - 1)})).first;
    }
    return &it->second;
}

const vocab_fixture * real(const std::string & name) {
    static std::map<std::string, std::unique_ptr<vocab_fixture>> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second.get();
    const char * env = std::getenv("SKIPPY_TEST_DATA");
    std::string  root = env && *env ? env : "../shared";
    std::string  path = root + "/vocab/ggml-vocab-" + name + ".gguf";
    std::unique_ptr<vocab_fixture> f;
    if (std::filesystem::exists(path)) {
        auto file = gguf::file::open(path);
        auto tok = file.is_ok() ? tokenizer::from_gguf(**file) : result<std::unique_ptr<tokenizer>>(file.error());
        if (tok.is_ok()) {
            std::vector<std::string> pieces;
            for (token_id id = 0; id < (*tok)->n_vocab(); ++id) pieces.push_back((*tok)->token_to_piece(id));
            f = std::make_unique<vocab_fixture>(make_fixture(std::move(pieces), (*tok)->end_of_generation_ids()));
        }
    }
    return cache.emplace(name, std::move(f)).first->second.get();
}

void replay(benchmark::State & state, const vocab_fixture * f, bool warm) {
    if (!f || f->trajectory.empty()) {
        state.SkipWithError("vocabulary not available");
        return;
    }
    const token_trie & vocab = *f->trie;
    token_mask         mask;
    auto               m = std::make_unique<matcher>(bench_grammar());
    size_t             step = 0;
    for (auto _ : state) {
        if (step == f->trajectory.size()) {
            step = 0;
            if (warm) m->reset();
            else m = std::make_unique<matcher>(bench_grammar());
        }
        if (!m->allowed_tokens(vocab, mask).is_ok()) std::abort();
        benchmark::DoNotOptimize(mask.words().data());
        if (!m->advance_token(vocab, f->trajectory[step++]).is_ok()) std::abort();
    }
    state.counters["n_vocab"] = double(vocab.n_vocab());
    state.counters["trie_nodes"] = double(vocab.n_nodes());
    state.counters["tokens_per_doc"] = double(f->trajectory.size());
    auto s = m->stats();
    state.counters["states"] = double(s.n_states);
    state.counters["memo_mib"] = double(m->memo_bytes()) / (1 << 20);
    state.counters["nodes_per_token"] = double(s.n_nodes_walked) / double(state.iterations());
    state.counters["computed_per_token"] = double(s.n_steps_computed) / double(state.iterations());
}

// The sampler's check for a token it picked, without a full mask.
void accepts_only(benchmark::State & state, const vocab_fixture * f) {
    if (!f || f->trajectory.empty()) {
        state.SkipWithError("vocabulary not available");
        return;
    }
    auto   m = std::make_unique<matcher>(bench_grammar());
    size_t step = 0;
    for (auto _ : state) {
        if (step == f->trajectory.size()) {
            step = 0;
            m->reset();
        }
        token_id id = f->trajectory[step++];
        benchmark::DoNotOptimize(m->accepts_token(*f->trie, id));
        if (!m->advance_token(*f->trie, id).is_ok()) std::abort();
    }
}

// An unconstrained request: the sampler has no matcher and pays a null check.
void BM_unconstrained(benchmark::State & state) {
    matcher * none = nullptr;
    benchmark::DoNotOptimize(none);
    for (auto _ : state) {
        bool constrained = none != nullptr;
        benchmark::DoNotOptimize(constrained);
    }
}
BENCHMARK(BM_unconstrained);

// What a request with response_format (or tools) pays before its first token: the
// schema's GBNF and its compiled grammar. "wide" is a tool-call-like object: 40
// properties, string enums, patterns, nested arrays.
std::string wide_schema() {
    nlohmann::ordered_json props = nlohmann::ordered_json::object();
    for (int i = 0; i < 40; ++i) {
        std::string key = "parameter_" + std::to_string(i) + "_of_the_tool";
        switch (i % 4) {
            case 0: props[key] = {{"type", "string"}, {"enum", {"first_choice_" + std::to_string(i), "second_choice", "a third, longer choice"}}}; break;
            case 1: props[key] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}; break;
            case 2: props[key] = {{"type", "string"}, {"pattern", "^[a-z]{2,8}-[0-9]{3}$"}}; break;
            default: props[key] = {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 4}}; break;
        }
    }
    nlohmann::ordered_json schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
    return schema.dump();
}

void schema_to_grammar(benchmark::State & state, const std::string & schema) {
    for (auto _ : state) {
        auto gbnf = gbnf_from_json_schema(std::string_view(schema));
        if (!gbnf.is_ok()) {
            state.SkipWithError(gbnf.error().message().c_str());
            return;
        }
        auto g = compile(*gbnf);
        if (!g.is_ok()) {
            state.SkipWithError(g.error().message().c_str());
            return;
        }
        benchmark::DoNotOptimize(g);
    }
}
void BM_schema_to_grammar_bench(benchmark::State & s) { schema_to_grammar(s, bench_schema); }
void BM_schema_to_grammar_wide(benchmark::State & s) { schema_to_grammar(s, wide_schema()); }
BENCHMARK(BM_schema_to_grammar_bench)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_schema_to_grammar_wide)->Unit(benchmark::kMicrosecond);

void BM_mask_synthetic_32k_warm(benchmark::State & s) { replay(s, synthetic(32000), true); }
void BM_mask_synthetic_32k_cold(benchmark::State & s) { replay(s, synthetic(32000), false); }
void BM_mask_synthetic_150k_warm(benchmark::State & s) { replay(s, synthetic(150000), true); }
void BM_mask_synthetic_150k_cold(benchmark::State & s) { replay(s, synthetic(150000), false); }
void BM_mask_llama_spm_32k_warm(benchmark::State & s) { replay(s, real("llama-spm"), true); }
void BM_mask_llama_spm_32k_cold(benchmark::State & s) { replay(s, real("llama-spm"), false); }
void BM_mask_qwen3_152k_warm(benchmark::State & s) { replay(s, real("qwen3"), true); }
void BM_mask_qwen3_152k_cold(benchmark::State & s) { replay(s, real("qwen3"), false); }
void BM_accepts_token_qwen3(benchmark::State & s) { accepts_only(s, real("qwen3")); }
BENCHMARK(BM_mask_synthetic_32k_warm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_synthetic_32k_cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_synthetic_150k_warm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_synthetic_150k_cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_llama_spm_32k_warm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_llama_spm_32k_cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_qwen3_152k_warm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mask_qwen3_152k_cold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_accepts_token_qwen3)->Unit(benchmark::kMicrosecond);

}  // namespace
