// Cost of a constrained token against an unconstrained one, in the final stage's
// sampler (lane_sampler, the code every topology samples with): one iteration is one
// sampled token (logits copied, then lane_sampler::sample, then the token tracked),
// default sampling (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), a JSON-schema
// grammar (7 properties, nested object, array, enum, integer, bounded strings).
//
//   unconstrained        no grammar: the baseline.
//   favourite_allowed    the model's favourite is what the grammar allows (as with a
//                        model that follows the schema): one accepts_token per token.
//   favourite_refused    the model's favourite is never allowed: a full mask and a
//                        second draw for every token (the worst case).
//
// The grammar's output restarts (a rewind to the prompt: the matcher keeps its memo)
// when it ends. Vocabularies: the real qwen3 (151,936) and llama-spm (32,000) ones
// from SKIPPY_TEST_DATA (or ../shared); skipped when absent.
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "runtime/step.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

namespace {

using namespace skippy;

const char * const bench_schema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 24},
    "kind": {"type": "string", "enum": ["person", "company", "place"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    "address": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 20}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["city"], "additionalProperties": false},
    "active": {"type": "boolean"},
    "score": {"type": "number"}
  },
  "required": ["name", "kind", "age", "address", "active"],
  "additionalProperties": false
})";

struct fixture {
    std::shared_ptr<constraint_cache> cache;
    std::string                       gbnf;
    std::vector<float>                base;          // random logits
    std::vector<token_id>             trajectory;    // a constrained generation (for favourite_allowed)
    token_id                          never_allowed = -1;
};

const fixture * load(const std::string & name) {
    static std::map<std::string, std::unique_ptr<fixture>> fixtures;
    if (auto it = fixtures.find(name); it != fixtures.end()) return it->second.get();
    const char * env = std::getenv("SKIPPY_TEST_DATA");
    const std::string root = env && *env ? env : "../shared";
    const std::string path = root + "/vocab/ggml-vocab-" + name + ".gguf";
    std::unique_ptr<fixture> f;
    if (std::filesystem::exists(path)) {
        auto file = gguf::file::open(path);
        auto gbnf = grammar::gbnf_from_json_schema(std::string_view(bench_schema));
        if (file.is_ok() && gbnf.is_ok()) {
            f = std::make_unique<fixture>();
            f->cache = std::make_shared<constraint_cache>(std::shared_ptr<const gguf::file>(std::move(file).value()));
            f->gbnf = *gbnf;
            auto vocab = f->cache->vocabulary();
            if (!vocab.is_ok()) return fixtures.emplace(name, nullptr).first->second.get();
            const int32_t n_vocab = (*vocab)->n_vocab();
            std::mt19937 rng(17);
            std::normal_distribution<float> d(0.0f, 2.0f);
            f->base.resize(static_cast<size_t>(n_vocab));
            for (float & v : f->base) v = d(rng);
            // A token with no bytes that is not an end of generation: never allowed.
            for (token_id id = 0; id < n_vocab && f->never_allowed < 0; ++id) {
                if ((*vocab)->piece(id).empty() && !(*vocab)->is_end_of_generation(id)) f->never_allowed = id;
            }
            // The trajectory: greedy over the random logits under the grammar.
            sampling_config c;
            c.grammar = f->gbnf;
            c.temperature = 0.0f;
            auto s = lane_sampler::make(c, f->cache.get());
            const token_id prompt[] = {0};
            (*s)->track(0, prompt);
            for (int i = 0; i < 400; ++i) {
                std::vector<float> l = f->base;
                auto t = (*s)->sample(l);
                if (!t.is_ok() || (*vocab)->is_end_of_generation(*t)) break;
                f->trajectory.push_back(*t);
                const token_id one[] = {*t};
                (*s)->track(static_cast<int64_t>(f->trajectory.size()), one);
            }
        }
    }
    return fixtures.emplace(name, std::move(f)).first->second.get();
}

enum class mode { unconstrained, favourite_allowed, favourite_refused };

void run(benchmark::State & state, const std::string & name, mode m) {
    const fixture * f = load(name);
    if (!f || f->trajectory.empty() || f->never_allowed < 0) {
        state.SkipWithError("vocabulary not available");
        return;
    }
    sampling_config c;
    c.seed = 5;
    if (m != mode::unconstrained) c.grammar = f->gbnf;
    auto made = lane_sampler::make(c, f->cache.get());
    if (!made.is_ok()) {
        state.SkipWithError(made.error().to_string().c_str());
        return;
    }
    lane_sampler & s = **made;
    const token_id prompt[] = {0};
    s.track(0, prompt);
    std::vector<float> logits(f->base.size());
    size_t at = 0;  // output tokens so far
    uint64_t n_tokens = 0, n_restarts = 0;
    for (auto _ : state) {
        logits = f->base;
        if (m == mode::favourite_allowed) logits[static_cast<size_t>(f->trajectory[at % f->trajectory.size()])] += 30.0f;
        if (m == mode::favourite_refused) logits[static_cast<size_t>(f->never_allowed)] += 30.0f;
        auto t = s.sample(logits);
        if (!t.is_ok()) {
            state.SkipWithError(t.error().to_string().c_str());
            return;
        }
        ++n_tokens;
        const bool restart = m == mode::unconstrained ? at + 1 >= f->trajectory.size()
                                                      : f->cache->vocabulary().value()->is_end_of_generation(*t) ||
                                                            (m == mode::favourite_allowed && at + 1 > f->trajectory.size());
        if (restart) {
            s.trim(1);
            at = 0;
            ++n_restarts;
            continue;
        }
        const token_id one[] = {*t};
        s.track(static_cast<int64_t>(1 + at), one);
        ++at;
    }
    state.counters["masked_draws_per_token"] = n_tokens ? static_cast<double>(s.n_masked_draws()) / static_cast<double>(n_tokens) : 0.0;
    state.counters["outputs"] = static_cast<double>(n_restarts);
    state.counters["trajectory_tokens"] = static_cast<double>(f->trajectory.size());
}

void register_all() {
    for (const char * name : {"llama-spm", "qwen3"}) {
        benchmark::RegisterBenchmark((std::string("sample/") + name + "/unconstrained").c_str(),
                                     [n = std::string(name)](benchmark::State & s) { run(s, n, mode::unconstrained); })
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((std::string("sample/") + name + "/favourite_allowed").c_str(),
                                     [n = std::string(name)](benchmark::State & s) { run(s, n, mode::favourite_allowed); })
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((std::string("sample/") + name + "/favourite_refused").c_str(),
                                     [n = std::string(name)](benchmark::State & s) { run(s, n, mode::favourite_refused); })
            ->Unit(benchmark::kMicrosecond);
    }
}

const int registered = (register_all(), 0);

}  // namespace
