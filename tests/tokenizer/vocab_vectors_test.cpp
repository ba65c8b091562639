// The shared tokenizer vectors (../shared/vocab): every .inp string must tokenize (no
// BOS, parse_special = false) to the ids on the same line of .out, as llama.cpp does;
// and the stories260K model's tokenizer must give the golden prompt tokens.
#include "common/test_data.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

namespace skippy {
namespace {

std::string read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Splits like ../shared/tools/check-golden: on "\n__ggml_vocab_test__\n", with a
// trailing "\n__ggml_vocab_test__" cut from the last piece.
std::vector<std::string> split_inputs(const std::string & text) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t at = text.find(sep, start);
        if (at == std::string::npos) {
            out.push_back(text.substr(start));
            break;
        }
        out.push_back(text.substr(start, at - start));
        start = at + sep.size();
    }
    const std::string tail = "\n__ggml_vocab_test__";
    if (!out.empty() && out.back().size() >= tail.size() &&
        out.back().compare(out.back().size() - tail.size(), tail.size(), tail) == 0) {
        out.back().resize(out.back().size() - tail.size());
    }
    return out;
}

std::vector<std::vector<token_id>> parse_outputs(const std::string & text) {
    std::vector<std::vector<token_id>> out;
    std::stringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        std::stringstream fields(line);
        std::vector<token_id> ids;
        long long id = 0;
        while (fields >> id) ids.push_back(static_cast<token_id>(id));
        out.push_back(std::move(ids));
    }
    return out;
}

std::string show(const std::vector<token_id> & ids) {
    std::string s;
    for (token_id id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
    return s;
}

struct vocab_case {
    std::unique_ptr<gguf::file>      file;
    std::unique_ptr<tokenizer>       tok;
    std::vector<std::string>         inputs;
    std::vector<std::vector<token_id>> expected;
};

class shared_vocab : public ::testing::TestWithParam<const char *> {};

// Opens the vocabulary and its vectors; returns false (after FAIL/SKIP) when it cannot.
#define LOAD_VOCAB_CASE(c)                                                                  \
    const std::string name = GetParam();                                                     \
    SKIPPY_REQUIRE_TEST_FILE(gguf_path, "vocab/ggml-vocab-" + name + ".gguf");               \
    SKIPPY_REQUIRE_TEST_FILE(inp_path, "vocab/ggml-vocab-" + name + ".gguf.inp");            \
    SKIPPY_REQUIRE_TEST_FILE(out_path, "vocab/ggml-vocab-" + name + ".gguf.out");            \
    vocab_case c;                                                                            \
    {                                                                                        \
        auto opened = gguf::file::open(gguf_path);                                           \
        ASSERT_TRUE(opened.is_ok()) << opened.error().to_string();                           \
        c.file = std::move(opened).value();                                                  \
        auto built = tokenizer::from_gguf(*c.file);                                          \
        ASSERT_TRUE(built.is_ok()) << built.error().to_string();                             \
        c.tok = std::move(built).value();                                                    \
        c.inputs = split_inputs(read_file(inp_path));                                        \
        c.expected = parse_outputs(read_file(out_path));                                     \
        ASSERT_GE(c.expected.size() + 1, c.inputs.size());                                   \
    }

TEST_P(shared_vocab, TokenizesLikeLlamaCpp) {
    LOAD_VOCAB_CASE(c);
    // check-golden pairs inputs and lines with zip(): a trailing empty input has no line.
    const size_t n = std::min(c.inputs.size(), c.expected.size());
    size_t n_pass = 0;
    for (size_t i = 0; i < n; ++i) {
        const auto got = c.tok->tokenize(c.inputs[i], /*add_bos=*/false, /*parse_special=*/false);
        if (got == c.expected[i]) {
            ++n_pass;
        } else {
            ADD_FAILURE() << name << " string " << i << " '" << c.inputs[i] << "'\n  got  " << show(got)
                          << "\n  want " << show(c.expected[i]);
        }
    }
    std::printf("[ vectors  ] %s: %zu/%zu strings match\n", name.c_str(), n_pass, n);
    RecordProperty("strings_matched", static_cast<int>(n_pass));
    EXPECT_EQ(n_pass, n);
    EXPECT_GE(n, 40u) << "fewer vectors than expected; was the .inp split right?";
}

// detokenize(tokenize(s)) == s for every vector string, with strip_space_prefix (SPM
// drops the space it added in front, as llama_detokenize does). BPE is lossless on
// valid UTF-8: we never apply llama.cpp's optional clean_spaces (docs/tokenizer.md).
TEST_P(shared_vocab, DetokenizeRoundTrips) {
    LOAD_VOCAB_CASE(c);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
        const auto ids = c.tok->tokenize(c.inputs[i], false, false);
        EXPECT_EQ(c.tok->detokenize(ids, false, true), c.inputs[i]) << name << " string " << i;
    }
}

// About 10 KB of the vector strings, tokenized 10 times: must stay in milliseconds.
TEST_P(shared_vocab, TenKilobytesTakeMilliseconds) {
    LOAD_VOCAB_CASE(c);
    std::string text;
    while (text.size() < 10 * 1024) {
        for (const auto & s : c.inputs) text += s + "\n";
    }
    const auto t0 = std::chrono::steady_clock::now();
    size_t n_tokens = 0;
    for (int rep = 0; rep < 10; ++rep) n_tokens += c.tok->tokenize(text, false, false).size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
    std::printf("[ perf     ] %s: %zu bytes -> %zu tokens in %.2f ms\n", name.c_str(), text.size(), n_tokens / 10, ms);
    // Generous for sanitizer and debug builds; a release build needs a few ms.
    EXPECT_LT(ms, 500.0);
}

// Arbitrary bytes (invalid UTF-8, control characters, special-token fragments) never
// produce an out-of-range id, and well-formed text round-trips where the vocabulary
// covers every byte (all but Falcon, whose vocabulary lacks some control bytes; Phi-3
// eats whitespace after "</s>").
TEST_P(shared_vocab, RandomBytesAreSafe) {
    LOAD_VOCAB_CASE(c);
    std::mt19937 rng(1234);
    const std::string alphabet = "ab <>/s|\n\t\xC3\xA9\xE4\xBD\xA0";
    const bool exact = name != "falcon" && name != "phi-3";
    for (int iter = 0; iter < 300; ++iter) {
        std::string s(rng() % 48, '\0');
        for (char & ch : s) ch = static_cast<char>(rng() % 4 == 0 ? rng() : alphabet[rng() % alphabet.size()]);
        for (bool parse_special : {false, true}) {
            for (token_id id : c.tok->tokenize(s, true, parse_special)) {
                ASSERT_TRUE(id >= 0 && id < c.tok->n_vocab()) << id;
            }
        }
        const std::string valid = sanitize_utf8(s);
        if (exact) {
            EXPECT_EQ(c.tok->detokenize(c.tok->tokenize(valid, false, false), true, true), valid);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(all, shared_vocab,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "starcoder", "deepseek-coder"),
                         [](const auto & param_info) {
                             std::string s = param_info.param;
                             for (char & ch : s) {
                                 if (ch == '-') ch = '_';
                             }
                             return s;
                         });

TEST(stories260k_tokenizer, OnceUponATimeWithBos) {
    SKIPPY_REQUIRE_TEST_FILE(path, "models/stories260K.gguf");
    auto file = gguf::file::open(path);
    ASSERT_TRUE(file.is_ok()) << file.error().to_string();
    auto tok = tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.is_ok()) << tok.error().to_string();
    const auto & t = **tok;
    EXPECT_EQ(t.model(), tokenizer_model::spm);
    EXPECT_TRUE(t.add_bos_default());
    EXPECT_EQ(t.bos(), 1);
    EXPECT_EQ(t.eos(), 2);
    EXPECT_TRUE(t.is_end_of_generation(2));
    const auto ids = t.tokenize("Once upon a time", t.add_bos_default(), false);
    EXPECT_EQ(ids, (std::vector<token_id>{1, 403, 407, 261, 378}));
    const std::vector<token_id> text_ids(ids.begin() + 1, ids.end());
    EXPECT_EQ(t.detokenize(text_ids, false, true), "Once upon a time");
    // Without the strip, pieces concatenate as generated text does.
    EXPECT_EQ(t.detokenize(text_ids), " Once upon a time");
}

}  // namespace
}  // namespace skippy
