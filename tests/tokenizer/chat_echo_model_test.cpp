// Echo-safe built-in chat templates on the real vocabularies they are used with: chatml
// on Qwen3 (<|im_start|> / <|im_end|> special), llama3 on Llama 3, the [INST] / </s>
// families on Llama 2's SentencePiece vocabulary, plain on all three. See chat_echo.h.
#include "chat_echo.h"
#include "common/test_data.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

struct echo_case {
    const char *         vocab;
    chat_template_family family;
};

class chat_echo_vocab : public ::testing::TestWithParam<echo_case> {};

TEST_P(chat_echo_vocab, AnswersEchoToThePreviousPromptAndTheGeneratedTokens) {
    const echo_case c = GetParam();
    SKIPPY_REQUIRE_TEST_FILE(path, std::string("vocab/ggml-vocab-") + c.vocab + ".gguf");
    auto vocab = gguf::file::open(path);
    ASSERT_TRUE(vocab.is_ok()) << vocab.error().to_string();
    auto m = testing::make_echo_model(vocab->get());
    ASSERT_TRUE(m);
    testing::expect_echo_safe(*m, c.family);
}

INSTANTIATE_TEST_SUITE_P(all, chat_echo_vocab,
                         ::testing::Values(echo_case{"qwen3", chat_template_family::chatml},
                                           echo_case{"qwen3", chat_template_family::plain},
                                           echo_case{"llama3", chat_template_family::llama3},
                                           echo_case{"llama3", chat_template_family::plain},
                                           echo_case{"llama-spm", chat_template_family::llama2},
                                           echo_case{"llama-spm", chat_template_family::mistral},
                                           echo_case{"llama-spm", chat_template_family::zephyr},
                                           echo_case{"llama-spm", chat_template_family::gemma},
                                           echo_case{"llama-spm", chat_template_family::plain}),
                         [](const auto & param_info) {
                             std::string s = std::string(param_info.param.vocab) + "_" +
                                             std::string(chat_template_family_name(param_info.param.family));
                             for (char & ch : s) {
                                 if (ch == '-') ch = '_';
                             }
                             return s;
                         });

}  // namespace
}  // namespace skippy
