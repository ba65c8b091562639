#include "tokenizer/chat_template.h"

#include "base/escape.h"

namespace skippy {
namespace {

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// Leading and trailing ASCII whitespace removed, as Jinja's trim / Python's strip do for
// the templates that apply it (Llama-2, Llama-3, Gemma), on system and user content.
std::string trim(std::string_view s) {
    const char * ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return "";
    const size_t e = s.find_last_not_of(ws);
    return std::string(s.substr(b, e - b + 1));
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Echo safety (docs/chat-templates.md): an assistant message is what the model generated
// after the generation prompt, sent back by the client. It must render as exactly that
// continuation, so its content is never trimmed, and a separator space the template puts
// around it is written only where the content does not bring its own whitespace (a
// SentencePiece answer starts with the space of its first token, " Hello").
std::string space_before(std::string_view content) {
    return !content.empty() && !is_ascii_space(content.front()) ? " " : "";
}
std::string space_after(std::string_view content) {
    return !content.empty() && !is_ascii_space(content.back()) ? " " : "";
}

// Families without a system role (Llama-2, Mistral, Gemma) fold each system message
// into the next user message; one left without a user message after it becomes a
// user turn of its own. Yields (role, content, system_text) turns.
struct turn {
    std::string_view role;
    std::string      content;
    std::string      system;  // folded system text ("" when none)
};

std::vector<turn> fold_system(std::span<const chat_message> messages) {
    std::vector<turn> out;
    std::string pending;
    bool has_pending = false;
    for (const chat_message & m : messages) {
        if (m.role == "system") {
            if (has_pending) pending += "\n\n";
            pending += m.content;
            has_pending = true;
            continue;
        }
        if (m.role == "user" && has_pending) {
            out.push_back({"user", m.content, pending});
            pending.clear();
            has_pending = false;
            continue;
        }
        if (has_pending) {  // a system message followed by an assistant one
            out.push_back({"user", "", pending});
            pending.clear();
            has_pending = false;
        }
        out.push_back({m.role, m.content, ""});
    }
    if (has_pending) out.push_back({"user", "", pending});
    return out;
}

std::string render_plain(std::span<const chat_message> messages) {
    std::string out;
    for (const chat_message & m : messages) {
        if (m.role == "system") out += m.content + "\n\n";
        else if (m.role == "user") out += "User: " + m.content + "\n";
        else out += "Assistant:" + space_before(m.content) + m.content + "\n";
    }
    out += "Assistant:";
    return out;
}

std::string render_chatml(std::span<const chat_message> messages) {
    std::string out;
    for (const chat_message & m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    out += "<|im_start|>assistant\n";
    return out;
}

std::string render_llama3(std::span<const chat_message> messages) {
    std::string out;
    for (const chat_message & m : messages) {
        const std::string content = m.role == "assistant" ? m.content : trim(m.content);
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
    }
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

std::string render_llama2(std::span<const chat_message> messages, const chat_special_texts & sp) {
    std::string out;
    bool first_user = true;
    for (const turn & t : fold_system(messages)) {
        if (t.role == "user") {
            // The first BOS comes from the tokenizer; later turns carry their own.
            out += first_user ? "[INST] " : sp.bos + "[INST] ";
            first_user = false;
            if (!t.system.empty()) out += "<<SYS>>\n" + trim(t.system) + "\n<</SYS>>\n\n";
            out += trim(t.content) + " [/INST]";
        } else {
            out += space_before(t.content) + t.content + space_after(t.content) + sp.eos;
        }
    }
    return out;
}

std::string render_mistral(std::span<const chat_message> messages, const chat_special_texts & sp) {
    std::string out;
    for (const turn & t : fold_system(messages)) {
        if (t.role == "user") {
            out += "[INST] ";
            if (!t.system.empty()) out += t.system + "\n\n";
            out += t.content + " [/INST]";
        } else {
            out += t.content + sp.eos;
        }
    }
    return out;
}

std::string render_zephyr(std::span<const chat_message> messages, const chat_special_texts & sp) {
    std::string out;
    for (const chat_message & m : messages) out += "<|" + m.role + "|>\n" + m.content + sp.eos + "\n";
    out += "<|assistant|>\n";
    return out;
}

std::string render_gemma(std::span<const chat_message> messages) {
    std::string out;
    for (const turn & t : fold_system(messages)) {
        const std::string_view role = t.role == "assistant" ? "model" : "user";
        std::string content = t.role == "assistant" ? t.content : trim(t.content);
        if (!t.system.empty()) content = trim(t.system) + "\n\n" + content;
        out += "<start_of_turn>" + std::string(role) + "\n" + content + "<end_of_turn>\n";
    }
    out += "<start_of_turn>model\n";
    return out;
}

}  // namespace

std::string_view chat_template_family_name(chat_template_family family) {
    switch (family) {
        case chat_template_family::plain: return "plain";
        case chat_template_family::chatml: return "chatml";
        case chat_template_family::llama2: return "llama2";
        case chat_template_family::llama3: return "llama3";
        case chat_template_family::mistral: return "mistral";
        case chat_template_family::zephyr: return "zephyr";
        case chat_template_family::gemma: return "gemma";
    }
    return "plain";
}

chat_template_family detect_chat_template(std::string_view t) {
    if (contains(t, "<|im_start|>")) return chat_template_family::chatml;
    if (contains(t, "<|start_header_id|>")) return chat_template_family::llama3;
    if (contains(t, "<start_of_turn>")) return chat_template_family::gemma;
    if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? chat_template_family::llama2 : chat_template_family::mistral;
    // Phi-3 also writes <|user|> but closes turns with <|end|>; it is not Zephyr.
    if (contains(t, "<|user|>") && (contains(t, "</s>") || contains(t, "eos_token")) && !contains(t, "<|end|>")) {
        return chat_template_family::zephyr;
    }
    return chat_template_family::plain;
}

chat_template_family detect_chat_template(const gguf::file & file) {
    const auto t = file.get_string("tokenizer.chat_template");
    return t ? detect_chat_template(*t) : chat_template_family::plain;
}

result<std::string> render_chat(chat_template_family family, std::span<const chat_message> messages,
                                const chat_special_texts & special) {
    if (messages.empty()) return make_error(error_code::invalid_argument, "a chat needs at least one message");
    for (const chat_message & m : messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant") {
            return make_error(error_code::invalid_argument,
                              "message role '" + escape_bytes(m.role) + "' is not one of system, user, assistant");
        }
    }
    switch (family) {
        case chat_template_family::plain: return render_plain(messages);
        case chat_template_family::chatml: return render_chatml(messages);
        case chat_template_family::llama2: return render_llama2(messages, special);
        case chat_template_family::llama3: return render_llama3(messages);
        case chat_template_family::mistral: return render_mistral(messages, special);
        case chat_template_family::zephyr: return render_zephyr(messages, special);
        case chat_template_family::gemma: return render_gemma(messages);
    }
    return make_error(error_code::internal, "unknown chat template family");
}

chat_special_texts chat_special_texts_of(const tokenizer & tok) {
    chat_special_texts s;
    s.bos = tok.bos() >= 0 ? std::string(tok.token_text(tok.bos())) : "";
    s.eos = tok.eos() >= 0 ? std::string(tok.token_text(tok.eos())) : "";
    return s;
}

result<std::vector<token_id>> tokenize_chat(const tokenizer & tok, chat_template_family family,
                                            std::span<const chat_message> messages) {
    SKIPPY_ASSIGN_OR_RETURN(std::string text, render_chat(family, messages, chat_special_texts_of(tok)));
    return tok.tokenize(text, tok.add_bos_default(), /*parse_special=*/true);
}

}  // namespace skippy
