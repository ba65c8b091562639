// Chat templates: a conversation (system / user / assistant messages) as prompt text.
//
// We do not run the Jinja program in tokenizer.chat_template; we recognise which family
// it belongs to from tell-tale substrings and render that family with fixed code. The
// exact text of each family is specified in docs/chat-templates.md (and unit-tested);
// a model without a template, or with one we do not recognise, gets the plain family.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy {

enum class chat_template_family { plain, chatml, llama2, llama3, mistral, zephyr, gemma };

// "plain", "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma".
std::string_view chat_template_family_name(chat_template_family family);

// The family of a tokenizer.chat_template text, checked in this order:
//   "<|im_start|>" → chatml; "<|start_header_id|>" → llama3; "<start_of_turn>" → gemma;
//   "[INST]" with "<<SYS>>" → llama2; "[INST]" → mistral; "<|user|>" with "</s>" or
//   "eos_token" but without Phi-3's "<|end|>" → zephyr; anything else (including "") →
//   plain.
chat_template_family detect_chat_template(std::string_view template_text);

// The family of a model file: its tokenizer.chat_template, plain when absent.
chat_template_family detect_chat_template(const gguf::file & file);

struct chat_message {
    std::string role;     // "system", "user" or "assistant"
    std::string content;
};

// Texts of the special tokens some families write inside the prompt (Llama-2's BOS
// between turns, the EOS that closes an assistant turn in Llama-2, Mistral, Zephyr).
struct chat_special_texts {
    std::string bos = "<s>";
    std::string eos = "</s>";
};

// The prompt text of `messages` in `family`, ending with the opening of an assistant
// turn (the generation prompt). BOS is not written at the start: the tokenizer adds it
// (add_bos_default), as for any prompt.
// PROMISES (echo safety): an assistant message renders as the verbatim continuation of
// the generation prompt before it (its content untrimmed, a separator space only where
// the content has no whitespace of its own), so sending a generated answer back yields
// the previous prompt followed by the answer's text; see docs/chat-templates.md.
// Errors (invalid_argument): no messages, a role other than system / user / assistant.
result<std::string> render_chat(chat_template_family family, std::span<const chat_message> messages,
                                const chat_special_texts & special = {});

// The special texts of a tokenizer: its BOS and EOS token texts ("" when it has none).
chat_special_texts chat_special_texts_of(const tokenizer & tok);

// render_chat, then tokenize with BOS as the vocabulary wants it and parse_special =
// true, so the template's markers ("<|im_start|>", "[INST]" where it is a token ...)
// become their special ids. Like llama.cpp, special-token text inside a message's
// content is parsed too (see docs/chat-templates.md).
result<std::vector<token_id>> tokenize_chat(const tokenizer & tok, chat_template_family family,
                                            std::span<const chat_message> messages);

}  // namespace skippy
