// Masks over real vocabularies (../shared/vocab/*.gguf, read through src/tokenizer):
// random constrained generation over several corpus schemas makes documents that
// parse and validate, and the mask equals the per-token answer at sampled steps.
#include "common/test_data.h"
#include "gguf/gguf.h"
#include "random_generation.h"
#include "schema_corpus.h"
#include "schema_validator.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>


namespace skippy::grammar {
namespace {

using testing::ojson;

struct vocabulary {
    token_trie_ptr trie;
    size_t         n_eog = 0;
};

void load_vocabulary(const std::string & path, vocabulary & out) {
    auto file = gguf::file::open(path);
    ASSERT_TRUE(file.is_ok()) << file.error().to_string();
    auto tok = tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.is_ok()) << tok.error().to_string();
    std::vector<std::string> pieces;
    pieces.reserve(size_t((*tok)->n_vocab()));
    for (token_id id = 0; id < (*tok)->n_vocab(); ++id) pieces.push_back((*tok)->token_to_piece(id));
    const auto & eog = (*tok)->end_of_generation_ids();
    auto trie = token_trie::build(std::move(pieces), eog);
    ASSERT_TRUE(trie.is_ok()) << trie.error().to_string();
    out.trie = *trie;
    out.n_eog = eog.size();
}

const char * const schemas_to_run[] = {"tool-call-arguments", "nested-objects", "ref-recursive-tree", "string-lengths",
                                       "format-date-time", "pattern-alternation", "integer-range", "enum-escapes"};

void run_vocabulary(const std::string & name) {
    SKIPPY_REQUIRE_TEST_FILE(path, "vocab/ggml-vocab-" + name + ".gguf");
    vocabulary v;
    load_vocabulary(path, v);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_GT(v.n_eog, 0u);

    std::mt19937 rng(99);
    size_t       n_docs = 0, n_checks = 0;
    for (const auto & c : testing::schema_corpus()) {
        bool wanted = false;
        for (const char * s : schemas_to_run) wanted = wanted || c.name == s;
        if (!wanted) continue;
        SCOPED_TRACE(c.name);
        auto gbnf = gbnf_from_json_schema(std::string_view(c.schema));
        ASSERT_TRUE(gbnf.is_ok()) << gbnf.error().to_string();
        auto g = compile(*gbnf);
        ASSERT_TRUE(g.is_ok()) << g.error().to_string();
        ojson                     schema = ojson::parse(c.schema);
        testing::schema_validator validator(schema);
        for (int run = 0; run < 3; ++run) {
            matcher                     m(*g);
            testing::generation         gen;
            testing::generation_options o;
            o.max_steps = 400;
            o.soft_steps = 25;
            o.check_every = 9;
            testing::generate(m, *v.trie, rng, o, gen);
            if (::testing::Test::HasFatalFailure()) return;
            n_checks += gen.n_mask_checks;
            if (!gen.ended) continue;
            ++n_docs;
            ojson value = ojson::parse(gen.text, nullptr, false);
            ASSERT_FALSE(value.is_discarded()) << "not JSON: " << gen.text;
            std::string why;
            EXPECT_TRUE(validator.validate(value, &why)) << gen.text << "\n" << why;
        }
    }
    EXPECT_GE(n_docs, 12u);
    EXPECT_GT(n_checks, 20u);
}

TEST(GrammarRealVocabulary, Qwen3ByteLevelBpe) { run_vocabulary("qwen3"); }
TEST(GrammarRealVocabulary, LlamaSentencePiece) { run_vocabulary("llama-spm"); }
TEST(GrammarRealVocabulary, Gpt2) { run_vocabulary("gpt-2"); }

}  // namespace
}  // namespace skippy::grammar
