// Constrained generation on a real vocabulary (stories260K): for every schema of the
// grammar tests' corpus, sampled output (temperature 0.9, a seed per schema) under the
// schema's grammar is the same tokens in one process, on 1 stage and on 3 stages, with
// the prefix cache off and on (a second, cache-served run of the same prompt); and
// every output that ends is JSON that validates against its schema.
#include "../grammar/schema_corpus.h"
#include "../grammar/schema_validator.h"
#include "cache_fixture.h"
#include "common/test_data.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace skippy::testing {
namespace {

using grammar::testing::ojson;

struct constrained_run {
    std::vector<token_id> tokens;
    finish_reason         finish = finish_reason::length;
    int64_t               cached = 0;
};

constrained_run run(pipeline_i & p, const tokenizer & tok, const std::vector<token_id> & prompt, const std::string & gbnf,
                    uint64_t seed) {
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = 200;
    req.sampling.temperature = 0.9f;
    req.sampling.seed = seed;
    req.sampling.grammar = gbnf;
    req.is_end_of_generation = [&](token_id id) { return tok.is_end_of_generation(id); };
    auto res = run_generation(p, 0, req);
    EXPECT_TRUE(res.is_ok()) << res.error().to_string();
    constrained_run out;
    if (!res.is_ok()) return out;
    out.tokens = res->tokens;
    out.finish = res->finish;
    out.cached = res->cached_tokens;
    return out;
}

TEST(constrained_chain, SchemaOutputsValidateAndAreTheSameOnEveryTopology) {
    SKIPPY_REQUIRE_TEST_FILE(path, "models/stories260K.gguf");
    auto f = gguf::file::open(path);
    ASSERT_TRUE(f.is_ok());
    std::shared_ptr<const gguf::file> file(std::move(f).value());
    auto tok = tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.is_ok()) << tok.error().to_string();

    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 512;
    auto whole = stage::load(file, so);
    ASSERT_TRUE(whole.is_ok()) << whole.error().to_string();
    local_pipeline local(std::move(whole).value());
    cache_run_options o;
    o.cache_on = false;
    o.n_stages = 1;
    auto one = cached_chain(file, o);
    o.n_stages = 3;
    auto three = cached_chain(file, o);
    o.cache_on = true;
    auto three_cached = cached_chain(file, o);
    ASSERT_TRUE(one && three && three_cached);

    const std::vector<token_id> prompt = (*tok)->tokenize("Once upon a time, Lily wrote down what she saw as JSON:", true, false);
    size_t n_schemas = 0, n_ended = 0;
    uint64_t seed = 100;
    for (const auto & c : grammar::testing::schema_corpus()) {
        SCOPED_TRACE(c.name);
        auto gbnf = grammar::gbnf_from_json_schema(std::string_view(c.schema), {.strict = false});
        if (!gbnf.is_ok()) continue;  // outside the subset (the corpus has a few such)
        ++n_schemas;
        ++seed;
        const constrained_run ref = run(local, **tok, prompt, *gbnf, seed);
        EXPECT_EQ(run(*one, **tok, prompt, *gbnf, seed).tokens, ref.tokens) << "1 stage";
        EXPECT_EQ(run(*three, **tok, prompt, *gbnf, seed).tokens, ref.tokens) << "3 stages";
        EXPECT_EQ(run(*three_cached, **tok, prompt, *gbnf, seed).tokens, ref.tokens) << "3 stages, cache recording";
        const constrained_run warm = run(*three_cached, **tok, prompt, *gbnf, seed);
        EXPECT_EQ(warm.tokens, ref.tokens) << "3 stages, cache hit";
        EXPECT_GT(warm.cached, 0) << "the second run was not served from the cache";

        const std::string text = (*tok)->detokenize(ref.tokens);
        auto m = grammar::matcher(*grammar::compile(*gbnf));
        EXPECT_TRUE(m.accepts(text)) << text;
        if (ref.finish != finish_reason::end_of_generation) continue;
        ++n_ended;
        const ojson value = ojson::parse(text, nullptr, false);
        ASSERT_FALSE(value.is_discarded()) << "not JSON: " << text;
        const ojson schema = ojson::parse(c.schema);  // the validator keeps a reference
        grammar::testing::schema_validator validator(schema);
        std::string why;
        EXPECT_TRUE(validator.validate(value, &why)) << text << "\n" << why;
    }
    // A grammar the final stage cannot compile (the HTTP front end would have refused
    // it): an error on every topology, and the lane serves the next request.
    for (pipeline_i * p : {static_cast<pipeline_i *>(&local), static_cast<pipeline_i *>(one.get()),
                           static_cast<pipeline_i *>(three.get())}) {
        generation_request bad;
        bad.prompt = prompt;
        bad.max_tokens = 4;
        bad.sampling.grammar = "root ::= \"unclosed";
        auto res = run_generation(*p, 0, bad);
        ASSERT_FALSE(res.is_ok());
        EXPECT_EQ(res.error().code(), error_code::invalid_argument) << res.error().to_string();
        const std::string gbnf = grammar::gbnf_json_object();
        EXPECT_EQ(run(*p, **tok, prompt, gbnf, 7).tokens, run(local, **tok, prompt, gbnf, 7).tokens);
    }
    EXPECT_GE(n_schemas, 30u);
    EXPECT_GE(n_ended, 30u) << "too few outputs ended within max_tokens to check";
    std::printf("constrained_chain: %zu schemas, %zu outputs ended and validated\n", n_schemas, n_ended);
}

}  // namespace
}  // namespace skippy::testing
