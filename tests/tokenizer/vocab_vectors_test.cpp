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

// About 10 KB of the vector strings, tokenized 10 times: the time goes to the test log
// (no timed assertion); the result must be the same every time.
TEST_P(shared_vocab, TenKilobytesTokenizeTheSameEveryTime) {
    LOAD_VOCAB_CASE(c);
    std::string text;
    while (text.size() < 10 * 1024) {
        for (const auto & s : c.inputs) text += s + "\n";
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto first = c.tok->tokenize(text, false, false);
    for (int rep = 1; rep < 10; ++rep) ASSERT_EQ(c.tok->tokenize(text, false, false), first);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
    std::printf("[ perf     ] %s: %zu bytes -> %zu tokens in %.2f ms\n", name.c_str(), text.size(), first.size(), ms);
    EXPECT_GT(first.size(), text.size() / 8);
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
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "starcoder", "deepseek-coder", "qwen3", "llama3", "gptoss"),
                         [](const auto & param_info) {
                             std::string s = param_info.param;
                             for (char & ch : s) {
                                 if (ch == '-') ch = '_';
                             }
                             return s;
                         });

// Opens one shared vocabulary by name ("qwen3", ...) into `tok` (FAIL/SKIP when it cannot).
#define LOAD_SHARED_TOKENIZER(name, file, tok)                                     \
    SKIPPY_REQUIRE_TEST_FILE(path_##tok, std::string("vocab/ggml-vocab-") + name + ".gguf"); \
    auto opened_##tok = gguf::file::open(path_##tok);                                \
    ASSERT_TRUE(opened_##tok.is_ok()) << opened_##tok.error().to_string();           \
    const std::unique_ptr<gguf::file> file = std::move(opened_##tok).value();        \
    auto built_##tok = tokenizer::from_gguf(*file);                                  \
    ASSERT_TRUE(built_##tok.is_ok()) << built_##tok.error().to_string();             \
    const std::unique_ptr<tokenizer> tok = std::move(built_##tok).value()

std::vector<token_id> concat(std::initializer_list<std::vector<token_id>> parts) {
    std::vector<token_id> out;
    for (const auto & p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

// Where llama.cpp and Hugging Face tokenizers part (tools/reference-notes.md), we follow
// llama.cpp, as the vectors do. Each test names the behaviour on one such string.

// Qwen3: no NFC normalization. A decomposed "é" (e + U+0301) stays two code points, so it
// tokenizes differently from the precomposed one (Hugging Face would normalize first).
TEST(reference_behaviour, Qwen3DoesNotNormalizeToNfc) {
    LOAD_SHARED_TOKENIZER("qwen3", file, tok);
    const std::string decomposed = "e\xCC\x81" "cole";
    const std::string composed = "\xC3\xA9" "cole";
    const auto ids_decomposed = tok->tokenize(decomposed, false, false);
    EXPECT_NE(ids_decomposed, tok->tokenize(composed, false, false));
    EXPECT_EQ(tok->detokenize(ids_decomposed), decomposed);
}

// gpt-oss: llama.cpp's gpt-4o pattern has no \p{M}, so a combining mark is not part of a
// word; it can only lead the next one (the optional non-letter in front of a letter run).
// "दुनिया" is cut द | ुन | िय | ा, where Hugging Face keeps it one word.
TEST(reference_behaviour, GptOssSplitsWordsAtCombiningMarks) {
    LOAD_SHARED_TOKENIZER("gptoss", file, tok);
    const auto t = [&](std::string_view s) { return tok->tokenize(s, false, false); };
    const std::string da = "\xE0\xA4\xA6", u = "\xE0\xA5\x81", na = "\xE0\xA4\xA8";
    const std::string i = "\xE0\xA4\xBF", ya = "\xE0\xA4\xAF", aa = "\xE0\xA4\xBE";
    const auto whole = t(da + u + na + i + ya + aa);
    EXPECT_EQ(whole, concat({t(da), t(u + na), t(i + ya), t(aa)}));
    EXPECT_GE(whole.size(), 4u);
}

// gpt-oss: llama.cpp makes <|start|>, <|channel|>, <|message|>, <|constrain|> and <|end|>
// user-defined, so they are matched even without special parsing; <|return|> and
// <|call|> stay control tokens (plain text unless parse_special).
TEST(reference_behaviour, GptOssHarmonyMarkersAreMatchedWithoutSpecialParsing) {
    LOAD_SHARED_TOKENIZER("gptoss", file, tok);
    for (std::string_view text : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"}) {
        const token_id id = tok->find_token(text);
        ASSERT_GE(id, 0) << text;
        EXPECT_EQ(tok->kind(id), token_kind::user_defined) << text;
        EXPECT_EQ(tok->tokenize(text, false, false), std::vector<token_id>{id}) << text;
        EXPECT_EQ(tok->token_to_piece(id), text) << "user-defined tokens always render";
    }
    for (std::string_view text : {"<|return|>", "<|call|>"}) {
        const token_id id = tok->find_token(text);
        ASSERT_GE(id, 0) << text;
        EXPECT_EQ(tok->kind(id), token_kind::control) << text;
        EXPECT_GT(tok->tokenize(text, false, false).size(), 1u) << text;
        EXPECT_EQ(tok->tokenize(text, false, true), std::vector<token_id>{id}) << text;
    }
}

// The special and end-of-generation tokens of the three real chat vocabularies, as
// llama.cpp derives them from the files (keys, then texts). These files are vocab-only:
// they carry no hyper-parameters, and the tokenizer must not need any.
TEST(real_vocab_specials, Qwen3) {
    LOAD_SHARED_TOKENIZER("qwen3", file, tok);
    EXPECT_EQ(file->find("qwen3.block_count"), nullptr);
    EXPECT_FALSE(tok->add_bos_default());
    EXPECT_EQ(tok->bos(), 151643);
    EXPECT_EQ(tok->eos(), 151645);
    // EOS <|im_end|>, <|endoftext|> by text, and the FIM pad / repo / file-separator tokens.
    EXPECT_EQ(tok->end_of_generation_ids(), (std::vector<token_id>{151643, 151645, 151662, 151663, 151664}));
    EXPECT_FALSE(tok->is_end_of_generation(151644));  // <|im_start|>
    EXPECT_EQ(tok->tokenize("<|im_start|>user\n", false, true), (std::vector<token_id>{151644, 872, 198}));
    EXPECT_EQ(tok->kind(tok->find_token("<think>")), token_kind::user_defined);
    EXPECT_EQ(tok->tokenize("<think>", false, false), std::vector<token_id>{151667});
}

TEST(real_vocab_specials, Llama3) {
    LOAD_SHARED_TOKENIZER("llama3", file, tok);
    EXPECT_EQ(file->find("llama.block_count"), nullptr);
    EXPECT_TRUE(tok->add_bos_default());
    EXPECT_EQ(tok->bos(), 128000);
    EXPECT_EQ(tok->eos(), 128009);
    // <|end_of_text|> and <|eot_id|>; Llama 3.0 has no <|eom_id|> (128008 is reserved).
    EXPECT_EQ(tok->end_of_generation_ids(), (std::vector<token_id>{128001, 128009}));
    EXPECT_FALSE(tok->is_end_of_generation(128008));
    EXPECT_EQ(tok->tokenize("<|start_header_id|>user<|end_header_id|>", true, true),
              (std::vector<token_id>{128000, 128006, 882, 128007}));
}

TEST(real_vocab_specials, GptOss) {
    LOAD_SHARED_TOKENIZER("gptoss", file, tok);
    EXPECT_EQ(file->find("gpt-oss.block_count"), nullptr);
    EXPECT_FALSE(tok->add_bos_default());
    EXPECT_EQ(tok->eos(), 200002);
    // <|endoftext|>, <|return|> (EOS: the answer is complete) and <|call|> (a tool call
    // is complete). <|end|> only closes one message of the answer (analysis, then final),
    // so it does not end the generation.
    EXPECT_EQ(tok->end_of_generation_ids(), (std::vector<token_id>{199999, 200002, 200012}));
    EXPECT_FALSE(tok->is_end_of_generation(200007));
    EXPECT_EQ(tok->token_text(200007), "<|end|>");
    EXPECT_EQ(tok->tokenize("<|start|>assistant<|channel|>final<|message|>", false, true),
              (std::vector<token_id>{200006, 173781, 200005, 17196, 200008}));
}

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
