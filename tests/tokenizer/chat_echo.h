// Echo safety of the built-in chat templates, on real generations.
//
// A chat client sends the assistant's answer back in the next request. Rendered with the
// template, the grown conversation must tokenize to the previous prompt's tokens, then
// exactly the tokens the model generated, then (where the template closes an answer
// with a special token) that token: only then can a prefix cache reuse the whole
// previous turn. The answers come from random-weight models run by src/runtime with the
// vocabulary under test.
//
// Random weights write token sequences no tokenizer would produce (" t" "a" where
// " ta" is a token), and text can only ever tokenize one way, so no template could echo
// them. A logit bias therefore keeps the model to word tokens that spell themselves
// ("▁ta", "Ġcat"); which of them it picks, and how many, is the model's doing.
#pragma once

#include "model/model_fixture.h"
#include "runtime/pipeline.h"
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace skippy::testing {

struct echo_model {
    std::shared_ptr<const gguf::file> file;
    std::unique_ptr<tokenizer>        tok;
    std::unique_ptr<local_pipeline>   pipeline;
    std::vector<token_id>             words;  // the tokens the answers are made of
};

// A small random llama model with `vocab_from`'s tokenizer (nullptr: make-model's own
// SentencePiece vocabulary). Fails the test when it cannot be built.
inline std::unique_ptr<echo_model> make_echo_model(const gguf::file * vocab_from) {
    synthetic_model_options o;
    o.n_embd = 64;
    o.n_layer = 1;
    o.n_head = 2;
    o.n_head_kv = 1;
    o.n_ff = 128;
    o.n_ctx = 1024;
    o.seed = 5;
    o.vocab_from = vocab_from;
    auto m = std::make_unique<echo_model>();
    m->file = synthetic_model(o);
    if (!m->file) return nullptr;
    auto tok = tokenizer::from_gguf(*m->file);
    EXPECT_TRUE(tok.is_ok()) << tok.error().to_string();
    if (!tok.is_ok()) return nullptr;
    m->tok = std::move(tok).value();
    stage_options so;
    so.n_threads = 1;
    so.ctx_size = 1024;
    auto st = stage::load(m->file, so);
    EXPECT_TRUE(st.is_ok()) << st.error().to_string();
    if (!st.is_ok()) return nullptr;
    m->pipeline = std::make_unique<local_pipeline>(std::move(st).value());

    // Word tokens: a space, then ASCII lowercase letters, tokenizing back to themselves
    // on their own (SPM adds the space itself at the start of a text).
    const tokenizer & t = *m->tok;
    for (token_id id = 0; id < t.n_vocab() && m->words.size() < 32; ++id) {
        if (t.kind(id) != token_kind::normal) continue;
        const std::string piece = t.token_to_piece(id);
        if (piece.size() < 2 || piece[0] != ' ') continue;
        if (piece.find_first_not_of("abcdefghijklmnopqrstuvwxyz", 1) != std::string::npos) continue;
        const std::string alone = t.model() == tokenizer_model::spm ? piece.substr(1) : piece;
        if (t.tokenize(alone, false, false) == std::vector<token_id>{id}) m->words.push_back(id);
    }
    EXPECT_GE(m->words.size(), 8u) << "the vocabulary has too few word tokens for the test";
    return m;
}

// Greedy generation of up to n_tokens from `prompt`, kept to the model's word tokens.
inline std::vector<token_id> generate_words(echo_model & m, const std::vector<token_id> & prompt, int32_t n_tokens) {
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = n_tokens;
    req.sampling.temperature = 0.0f;
    for (token_id id : m.words) req.sampling.logit_bias.push_back({id, 1000.0f});
    req.is_end_of_generation = [&](token_id id) { return m.tok->is_end_of_generation(id); };
    auto out = run_generation(*m.pipeline, 0, req);
    EXPECT_TRUE(out.is_ok()) << out.error().to_string();
    return out.is_ok() ? out->tokens : std::vector<token_id>{};
}

inline std::string show_ids(const tokenizer & tok, const std::vector<token_id> & ids, size_t from) {
    std::string s;
    for (size_t i = from; i < ids.size() && i < from + 12; ++i) {
        s += std::to_string(ids[i]) + "'" + std::string(tok.token_text(ids[i])) + "' ";
    }
    return s;
}

// The text of the special token `family` writes right after an answer, or "" when the
// template writes text there (plain: "\n"; llama2: " EOS") or has no such token.
inline std::string end_token_text(chat_template_family family, const tokenizer & tok) {
    switch (family) {
        case chat_template_family::chatml: return "<|im_end|>";
        case chat_template_family::llama3: return "<|eot_id|>";
        case chat_template_family::gemma: return "<end_of_turn>";
        case chat_template_family::mistral:
        case chat_template_family::zephyr: return tok.eos() >= 0 ? std::string(tok.token_text(tok.eos())) : "";
        case chat_template_family::plain:
        case chat_template_family::llama2: return "";
    }
    return "";
}

// Three turns of a conversation in `family`: each answer is generated from the prompt
// of its turn, returned as the API returns it (the concatenated pieces), sent back, and
// the next prompt must start with the previous prompt + answer [+ end token].
inline void expect_echo_safe(echo_model & m, chat_template_family family) {
    const tokenizer & tok = *m.tok;
    const std::string end_text = end_token_text(family, tok);
    const token_id end = end_text.empty() ? -1 : tok.find_token(end_text);
    const bool end_is_special = end >= 0 && tok.kind(end) != token_kind::normal;

    std::vector<chat_message> chat = {{"system", "You answer in words."}, {"user", "Say something."}};
    auto prompt = tokenize_chat(tok, family, chat);
    ASSERT_TRUE(prompt.is_ok()) << prompt.error().to_string();
    for (int turn = 0; turn < 3; ++turn) {
        SCOPED_TRACE(std::string(chat_template_family_name(family)) + " turn " + std::to_string(turn));
        const std::vector<token_id> answer = generate_words(m, *prompt, 6 + 3 * turn);
        ASSERT_FALSE(answer.empty());
        // What the HTTP API returns: the pieces concatenated, made valid UTF-8.
        const std::string content = sanitize_utf8(tok.detokenize(answer));
        chat.push_back({"assistant", content});
        chat.push_back({"user", turn % 2 == 0 ? "Go on." : "And then?"});
        auto next = tokenize_chat(tok, family, chat);
        ASSERT_TRUE(next.is_ok()) << next.error().to_string();

        std::vector<token_id> expected = *prompt;
        expected.insert(expected.end(), answer.begin(), answer.end());
        if (end_is_special) expected.push_back(end);
        size_t n_shared = 0;
        while (n_shared < expected.size() && n_shared < next->size() && (*next)[n_shared] == expected[n_shared]) ++n_shared;
        EXPECT_EQ(n_shared, expected.size())
            << "content '" << content << "': the echoed prompt shares " << n_shared << " of " << expected.size()
            << " tokens\n  want " << show_ids(tok, expected, n_shared) << "\n  got  " << show_ids(tok, *next, n_shared);
        std::printf("[ echo     ] %s turn %d: %zu prompt + %zu answer tokens%s shared; '%s'\n",
                    std::string(chat_template_family_name(family)).c_str(), turn, prompt->size(), answer.size(),
                    end_is_special ? (" + " + end_text).c_str() : "", content.c_str());
        prompt = std::move(next);
    }
}

}  // namespace skippy::testing
