// Chat template detection and the exact rendering of each family (docs/chat-templates.md).
#include "tokenizer/chat_template.h"

#include "tokenizer/tiny_vocab.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace skippy {
namespace {

const std::vector<chat_message> k_chat = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "Bye"},
};

std::string render(chat_template_family f, const std::vector<chat_message> & msgs = k_chat) {
    auto r = render_chat(f, msgs);
    EXPECT_TRUE(r.is_ok()) << r.error().to_string();
    return r.is_ok() ? *r : "";
}

TEST(ChatTemplateDetect, RecognisesEachFamilyFromItsMarkers) {
    // Abridged from the templates these models ship in tokenizer.chat_template.
    EXPECT_EQ(detect_chat_template("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"),
              chat_template_family::chatml);
    EXPECT_EQ(detect_chat_template("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"),
              chat_template_family::llama3);
    EXPECT_EQ(detect_chat_template("{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}{% endif %}{{ bos_token + '[INST] ' + content + ' [/INST]' }}"),
              chat_template_family::llama2);
    EXPECT_EQ(detect_chat_template("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}"),
              chat_template_family::mistral);
    EXPECT_EQ(detect_chat_template("{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }}{% endif %}{% endfor %}"),
              chat_template_family::zephyr);
    EXPECT_EQ(detect_chat_template("<|user|>\n{{ content }}</s>"), chat_template_family::zephyr);
    EXPECT_EQ(detect_chat_template("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"),
              chat_template_family::gemma);
}

TEST(ChatTemplateDetect, UnknownOrMissingTemplatesArePlain) {
    EXPECT_EQ(detect_chat_template(""), chat_template_family::plain);
    EXPECT_EQ(detect_chat_template("{{ messages }}"), chat_template_family::plain);
    // Phi-3 writes <|user|> but ends turns with <|end|>: not Zephyr.
    EXPECT_EQ(detect_chat_template("{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + eos_token}}"),
              chat_template_family::plain);
}

TEST(ChatTemplateDetect, ReadsTheModelsMetadata) {
    testing::tiny_vocab v;
    v.with_spm_specials_and_bytes();
    v.set("tokenizer.chat_template", gguf::value::make_string("<|im_start|>{{ x }}"));
    const auto bytes = v.to_bytes();
    auto file = gguf::file::from_bytes(bytes);
    ASSERT_TRUE(file.is_ok());
    EXPECT_EQ(detect_chat_template(**file), chat_template_family::chatml);

    testing::tiny_vocab none;
    none.with_spm_specials_and_bytes();
    auto file2 = gguf::file::from_bytes(none.to_bytes());
    ASSERT_TRUE(file2.is_ok());
    EXPECT_EQ(detect_chat_template(**file2), chat_template_family::plain);
}

TEST(ChatTemplateRender, Plain) {
    EXPECT_EQ(render(chat_template_family::plain),
              "You are terse.\n\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:");
}

TEST(ChatTemplateRender, ChatMl) {
    EXPECT_EQ(render(chat_template_family::chatml),
              "<|im_start|>system\nYou are terse.<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nBye<|im_end|>\n"
              "<|im_start|>assistant\n");
}

TEST(ChatTemplateRender, Llama2FoldsTheSystemPromptIntoTheFirstTurn) {
    EXPECT_EQ(render(chat_template_family::llama2),
              "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplateRender, Llama3) {
    EXPECT_EQ(render(chat_template_family::llama3),
              "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateRender, Mistral) {
    EXPECT_EQ(render(chat_template_family::mistral), "[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

TEST(ChatTemplateRender, Zephyr) {
    EXPECT_EQ(render(chat_template_family::zephyr),
              "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n"
              "<|assistant|>\n");
}

TEST(ChatTemplateRender, GemmaCallsTheAssistantModel) {
    EXPECT_EQ(render(chat_template_family::gemma),
              "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
              "<start_of_turn>model\nHello.<end_of_turn>\n"
              "<start_of_turn>user\nBye<end_of_turn>\n"
              "<start_of_turn>model\n");
}

TEST(ChatTemplateRender, TrimmingFollowsEachFamilysOfficialTemplate) {
    const std::vector<chat_message> padded = {{"user", "  Hi \n"}};
    EXPECT_EQ(render(chat_template_family::llama3, padded),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_EQ(render(chat_template_family::chatml, padded),
              "<|im_start|>user\n  Hi \n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateRender, ASystemMessageAloneBecomesAUserTurnWhereThereIsNoSystemRole) {
    const std::vector<chat_message> only_system = {{"system", "Rules."}};
    EXPECT_EQ(render(chat_template_family::llama2, only_system), "[INST] <<SYS>>\nRules.\n<</SYS>>\n\n [/INST]");
    EXPECT_EQ(render(chat_template_family::gemma, only_system),
              "<start_of_turn>user\nRules.\n\n<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplateRender, SpecialTextsComeFromTheVocabulary) {
    chat_special_texts sp{"<bos>", "<eos>"};
    auto r = render_chat(chat_template_family::mistral, k_chat, sp);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, "[INST] You are terse.\n\nHi [/INST]Hello.<eos>[INST] Bye [/INST]");
}

TEST(ChatTemplateRender, RefusesNoMessagesAndUnknownRoles) {
    auto empty = render_chat(chat_template_family::chatml, {});
    ASSERT_FALSE(empty.is_ok());
    EXPECT_EQ(empty.error().code(), error_code::invalid_argument);
    auto odd = render_chat(chat_template_family::chatml, std::vector<chat_message>{{"tool", "x"}});
    ASSERT_FALSE(odd.is_ok());
    EXPECT_EQ(odd.error().code(), error_code::invalid_argument);
}

TEST(ChatTemplateTokenize, TemplateMarkersBecomeTheirSpecialIds) {
    testing::tiny_vocab v;
    v.with_spm_specials_and_bytes();
    const token_id im_start = v.add("<|im_start|>", 0, token_kind::control);
    const token_id im_end = v.add("<|im_end|>", 0, token_kind::control);
    auto tok = testing::build_or_fail(v);
    ASSERT_NE(tok, nullptr);
    auto ids = tokenize_chat(*tok, chat_template_family::chatml, std::vector<chat_message>{{"user", "Hi"}});
    ASSERT_TRUE(ids.is_ok()) << ids.error().to_string();
    EXPECT_EQ(ids->front(), tok->bos());  // SPM adds BOS by default
    EXPECT_EQ(std::count(ids->begin(), ids->end(), im_start), 2);
    EXPECT_EQ(std::count(ids->begin(), ids->end(), im_end), 1);
    EXPECT_EQ(ids->back(), tok->tokenize("\n", false, false).back());  // "<|im_start|>assistant\n" ends the prompt
}

TEST(ChatTemplateTokenize, SpecialTextsOfATokenizer) {
    testing::tiny_vocab v;
    v.with_spm_specials_and_bytes();
    auto tok = testing::build_or_fail(v);
    ASSERT_NE(tok, nullptr);
    const chat_special_texts sp = chat_special_texts_of(*tok);
    EXPECT_EQ(sp.bos, "<s>");
    EXPECT_EQ(sp.eos, "</s>");
}

}  // namespace
}  // namespace skippy
