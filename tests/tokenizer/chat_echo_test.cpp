// Echo-safe built-in chat templates: the rendering rules for assistant content, and
// three-turn conversations of real generations on make-model's own SentencePiece
// vocabulary (there the markers of chatml, llama3 and gemma are plain text, and </s> is
// a control token). The real vocabularies are in chat_echo_model_test.cpp.
#include "chat_echo.h"

#include <gtest/gtest.h>

namespace skippy {
namespace {

std::string render(chat_template_family family, const std::string & answer) {
    const std::vector<chat_message> chat = {{"user", "Hi"}, {"assistant", answer}, {"user", "Bye"}};
    auto r = render_chat(family, chat);
    EXPECT_TRUE(r.is_ok()) << r.error().to_string();
    return r.is_ok() ? *r : "";
}

// An answer as the model wrote it (SentencePiece: with the space of its first token)
// continues the generation prompt exactly; the separator space is written only for
// content without its own.
TEST(chat_template_echo, PlainWritesItsSpaceOnlyWhenTheContentHasNone) {
    EXPECT_EQ(render(chat_template_family::plain, " Hello."), "User: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
    EXPECT_EQ(render(chat_template_family::plain, "Hello."), "User: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
    EXPECT_EQ(render(chat_template_family::plain, "\nHello."), "User: Hi\nAssistant:\nHello.\nUser: Bye\nAssistant:");
    EXPECT_EQ(render(chat_template_family::plain, ""), "User: Hi\nAssistant:\nUser: Bye\nAssistant:");
}

TEST(chat_template_echo, Llama2KeepsTheAnswerAndItsOwnSpaces) {
    EXPECT_EQ(render(chat_template_family::llama2, "Hello."), "[INST] Hi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    EXPECT_EQ(render(chat_template_family::llama2, " Hello. "), "[INST] Hi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    EXPECT_EQ(render(chat_template_family::llama2, "  Hello.\n"), "[INST] Hi [/INST]  Hello.\n</s><s>[INST] Bye [/INST]");
    EXPECT_EQ(render(chat_template_family::llama2, ""), "[INST] Hi [/INST]</s><s>[INST] Bye [/INST]");
}

// Llama 3 and Gemma trim system and user content as their templates do, but not an
// answer: trimming would drop tokens the model generated.
TEST(chat_template_echo, Llama3AndGemmaDoNotTrimAnswers) {
    EXPECT_EQ(render(chat_template_family::llama3, "\nHello. "),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
              "\nHello. <|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_EQ(render(chat_template_family::gemma, " Hello.\n"),
              "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n Hello.\n<end_of_turn>\n"
              "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    const std::vector<chat_message> padded_user = {{"user", "  Hi \n"}};
    EXPECT_EQ(*render_chat(chat_template_family::gemma, padded_user), "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}

class chat_echo_synthetic : public ::testing::TestWithParam<chat_template_family> {};

TEST_P(chat_echo_synthetic, AnswersEchoToThePreviousPromptAndTheGeneratedTokens) {
    auto m = testing::make_echo_model(nullptr);
    ASSERT_TRUE(m);
    testing::expect_echo_safe(*m, GetParam());
}

INSTANTIATE_TEST_SUITE_P(all, chat_echo_synthetic,
                         ::testing::Values(chat_template_family::plain, chat_template_family::chatml,
                                           chat_template_family::llama2, chat_template_family::llama3,
                                           chat_template_family::mistral, chat_template_family::zephyr,
                                           chat_template_family::gemma),
                         [](const auto & param_info) { return std::string(chat_template_family_name(param_info.param)); });

}  // namespace
}  // namespace skippy
