// The chat templates real models ship (tokenizer.chat_template of the vocabularies in
// the shared test data: Qwen3, gpt-oss, Llama 3), read from the GGUF files at test time
// and rendered with every conversation of conversations.json by jinja2 and by us.
#include "common/test_data.h"
#include "gguf/gguf.h"
#include "jinja/jinja.h"
#include "oracle.h"

#include <gtest/gtest.h>

namespace skippy::jinja::testing {
namespace {

struct model_template {
    std::string source;
    std::string bos;
    std::string eos;
};

// The template and the BOS / EOS token texts of a vocabulary file.
std::optional<model_template> read_model_template(const std::string & path) {
    auto file = gguf::file::open(path);
    EXPECT_TRUE(file.is_ok()) << file.error().to_string();
    if (!file.is_ok()) return std::nullopt;
    auto source = (*file)->get_string("tokenizer.chat_template");
    EXPECT_TRUE(source.has_value()) << path << " has no tokenizer.chat_template";
    if (!source) return std::nullopt;
    model_template t;
    t.source = *source;
    const gguf::value * tokens = (*file)->find("tokenizer.ggml.tokens");
    auto token_text = [&](const char * key) -> std::string {
        auto id = (*file)->get_int(key);
        if (!id || !tokens || !tokens->as_array() || *id < 0 || static_cast<size_t>(*id) >= tokens->as_array()->size()) return "";
        const std::string * s = (*tokens->as_array())[static_cast<size_t>(*id)].as_string();
        return s ? *s : "";
    };
    t.bos = token_text("tokenizer.ggml.bos_token_id");
    t.eos = token_text("tokenizer.ggml.eos_token_id");
    return t;
}

TEST(jinja_model_templates, gguf_templates_render_byte_identical_to_jinja2) {
    std::vector<jinja_case> cases;
    for (const char * name : {"qwen3", "gptoss", "llama3"}) {
        SKIPPY_REQUIRE_TEST_FILE(path, std::string("vocab/ggml-vocab-") + name + ".gguf");
        auto t = read_model_template(path);
        ASSERT_TRUE(t.has_value());
        auto parsed = compiled_template::parse(t->source);
        ASSERT_TRUE(parsed.is_ok()) << name << ": " << parsed.error().to_string();
        auto more = conversation_cases(name, t->source, t->bos, t->eos);
        cases.insert(cases.end(), more.begin(), more.end());
    }
    SKIPPY_REQUIRE_ORACLE(theirs, cases);
    size_t same = expect_same(cases, theirs);
    size_t rendered = 0;
    for (const auto & o : theirs) rendered += o.ok;
    std::printf("jinja model templates: %zu of %zu cases identical to jinja2 (%zu rendered, %zu raised)\n", same,
                cases.size(), rendered, cases.size() - rendered);
    EXPECT_EQ(same, cases.size());
}

}  // namespace
}  // namespace skippy::jinja::testing
