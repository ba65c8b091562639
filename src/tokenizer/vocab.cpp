#include "tokenizer/vocab.h"

#include "base/escape.h"
#include "base/log.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <span>

namespace skippy::tokenizer_detail {

text_index::duplicate text_index::build(const std::vector<std::string> & texts) {
    size_t capacity = 16;
    while (capacity < 2 * texts.size()) capacity *= 2;  // load at most 1/2: short probes
    slots_.assign(capacity, slot_of(0, -1));
    mask_ = capacity - 1;
    for (size_t i = 0; i < texts.size(); ++i) {
        const uint64_t h = std::hash<std::string_view>{}(texts[i]);
        const auto tag = static_cast<uint32_t>(h >> 32);
        for (uint64_t at = h & mask_;; at = (at + 1) & mask_) {
            const auto id = static_cast<token_id>(static_cast<uint32_t>(slots_[at]));
            if (id < 0) {
                slots_[at] = slot_of(tag, static_cast<token_id>(i));
                break;
            }
            if (static_cast<uint32_t>(slots_[at] >> 32) == tag && texts[static_cast<size_t>(id)] == texts[i]) {
                return {id, static_cast<token_id>(i)};
            }
        }
    }
    return {};
}

token_id text_index::find(std::string_view text, const std::vector<std::string> & texts) const {
    if (slots_.empty()) return -1;
    const uint64_t h = std::hash<std::string_view>{}(text);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t at = h & mask_;; at = (at + 1) & mask_) {
        const uint64_t slot = slots_[at];
        const auto id = static_cast<token_id>(static_cast<uint32_t>(slot));
        if (id < 0) return -1;
        if (static_cast<uint32_t>(slot >> 32) == tag && texts[static_cast<size_t>(id)] == text) return id;
    }
}

namespace {

constexpr std::string_view k_key_model       = "tokenizer.ggml.model";
constexpr std::string_view k_key_pre         = "tokenizer.ggml.pre";
constexpr std::string_view k_key_tokens      = "tokenizer.ggml.tokens";
constexpr std::string_view k_key_scores      = "tokenizer.ggml.scores";
constexpr std::string_view k_key_token_type  = "tokenizer.ggml.token_type";
constexpr std::string_view k_key_merges      = "tokenizer.ggml.merges";
constexpr std::string_view k_key_add_bos     = "tokenizer.ggml.add_bos_token";
constexpr std::string_view k_key_add_prefix  = "tokenizer.ggml.add_space_prefix";

status bad(std::string_view key, const std::string & what) {
    return make_error(error_code::invalid_data, std::string(key) + ": " + what);
}

// The array stored under `key` if its elements have one of the accepted types.
// nullptr with ok status when the key is absent.
status find_array(const gguf::file & file, std::string_view key, std::initializer_list<gguf::value_type> accepted,
                  const std::vector<gguf::value> *& out) {
    out = nullptr;
    const gguf::value * v = file.find(key);
    if (v == nullptr) return status::ok();
    const auto * array = v->as_array();
    if (array == nullptr) return bad(key, "expected an array, found " + std::string(gguf::value_type_name(v->type())));
    if (std::find(accepted.begin(), accepted.end(), v->array_type()) == accepted.end()) {
        return bad(key, "unexpected element type " + std::string(gguf::value_type_name(v->array_type())));
    }
    out = array;
    return status::ok();
}

status read_optional_bool(const gguf::file & file, std::string_view key, bool & out) {
    const gguf::value * v = file.find(key);
    if (v == nullptr) return status::ok();
    auto b = v->as_bool();
    if (!b) return bad(key, "expected a bool");
    out = *b;
    return status::ok();
}

// Reads a special-token id. Absent keeps `id` (a default); -1 and 0xFFFFFFFF (how
// converters write "none" into a u32) clear it; anything else must be a valid id.
status read_token_id(const gguf::file & file, std::string_view key, int32_t n_vocab, token_id & id) {
    const gguf::value * v = file.find(key);
    if (v == nullptr) return status::ok();
    if (!v->is_integer()) return bad(key, "expected an integer token id");
    const auto u = v->as_u64();
    const auto s = v->as_int();
    if ((s && *s == -1) || (u && *u == 0xFFFFFFFFu)) {
        id = -1;
        return status::ok();
    }
    if (!s || *s < 0 || *s >= n_vocab) {
        const std::string shown = s ? std::to_string(*s) : std::to_string(u.value_or(0));
        return bad(key, "token id " + shown + " is out of range (n_vocab " + std::to_string(n_vocab) + ")");
    }
    id = static_cast<token_id>(*s);
    return status::ok();
}

// A tokenizer.ggml.token_type element as a kind. Numbers outside the enum are refused
// (llama.cpp reads them as undefined): a file that writes them is not what it claims.
status read_kind(const gguf::value & type, size_t id, token_kind & out) {
    const auto k = type.as_int(static_cast<int64_t>(token_kind::undefined), static_cast<int64_t>(token_kind::byte));
    if (!k) {
        const std::string shown = type.as_int() ? std::to_string(*type.as_int()) : std::to_string(type.as_u64().value_or(0));
        return bad(k_key_token_type, "token " + std::to_string(id) + " has type " + shown +
                                         ", not one of 0..6 (undefined, normal, unknown, control, user-defined, "
                                         "unused, byte)");
    }
    out = static_cast<token_kind>(*k);
    return status::ok();
}

// "<0xAB>" -> 0xAB; -1 when `text` is not of that form.
int parse_byte_token(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    int value = 0;
    for (char c : text.substr(3, 2)) {
        int digit = -1;
        if (c >= '0' && c <= '9') digit = c - '0';
        if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

// What llama.cpp's token_to_piece(special = true) renders for one token.
std::string render_piece(tokenizer_model model, const std::string & text, token_kind kind) {
    switch (kind) {
        case token_kind::unknown:
        case token_kind::control:
        case token_kind::user_defined:
            return text;
        case token_kind::byte: {
            const int byte = parse_byte_token(text);
            if (byte >= 0) return std::string(1, static_cast<char>(byte));
            break;  // a malformed byte token renders like a normal one
        }
        case token_kind::normal:
            break;
        case token_kind::undefined:
        case token_kind::unused:
            return {};  // llama.cpp suppresses these like control tokens, even with special
    }
    if (model == tokenizer_model::bpe) return gpt2_decode(text);
    std::string out;
    out.reserve(text.size());
    constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // U+2581
    for (size_t pos = 0; pos < text.size();) {
        if (text.compare(pos, k_space_marker.size(), k_space_marker) == 0) {
            out.push_back(' ');
            pos += k_space_marker.size();
        } else {
            out.push_back(text[pos++]);
        }
    }
    return out;
}

// Texts llama.cpp treats as end of generation whatever their declared type (it also
// forces them to control). A subset of its list: the entries for widely used chat
// formats, without the model-specific exceptions it then needs.
constexpr std::string_view k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
    "<end_of_utterance>",
};

// Special ids llama.cpp finds by text when the file has no key for them: the first text
// of each list that is a token (llama.cpp takes whichever its hash map yields first).
// They too become control tokens. End of turn and end of message are end of
// generation; so are the FIM pad, repository and file-separator tokens, which a code
// model writes when it has finished a fill-in.
constexpr std::string_view k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<end_of_utterance>",
};
constexpr std::string_view k_eom_texts[] = {"<|eom_id|>"};
constexpr std::string_view k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
constexpr std::string_view k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view k_fim_sep_texts[] = {"<|file_sep|>"};

// The harmony format (gpt-oss) writes these inside an assistant's answer; llama.cpp
// makes them user-defined so they are always matched and always rendered.
constexpr std::string_view k_harmony_texts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

status load_tokens(const gguf::file & file, vocab & v) {
    const std::vector<gguf::value> * tokens = nullptr;
    SKIPPY_TRY(find_array(file, k_key_tokens, {gguf::value_type::string}, tokens));
    if (tokens == nullptr) return bad(k_key_tokens, "missing (the file has no vocabulary)");
    if (tokens->empty()) return bad(k_key_tokens, "empty vocabulary");
    if (tokens->size() > static_cast<size_t>(std::numeric_limits<token_id>::max())) {
        return bad(k_key_tokens, "too many tokens");
    }
    const size_t n = tokens->size();

    const std::vector<gguf::value> * scores = nullptr;
    SKIPPY_TRY(find_array(file, k_key_scores, {gguf::value_type::f32, gguf::value_type::f64, gguf::value_type::i32},
                          scores));
    if (scores != nullptr && scores->size() != n) {
        return bad(k_key_scores, std::to_string(scores->size()) + " scores for " + std::to_string(n) + " tokens");
    }
    const std::vector<gguf::value> * types = nullptr;
    SKIPPY_TRY(find_array(file, k_key_token_type,
                          {gguf::value_type::i32, gguf::value_type::u32, gguf::value_type::i8, gguf::value_type::u8,
                           gguf::value_type::i16, gguf::value_type::u16, gguf::value_type::i64,
                           gguf::value_type::u64},
                          types));
    if (types != nullptr && types->size() != n) {
        return bad(k_key_token_type, std::to_string(types->size()) + " types for " + std::to_string(n) + " tokens");
    }

    v.texts.resize(n);
    v.scores.assign(n, 0.0f);
    v.kinds.assign(n, token_kind::normal);
    v.strip.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
        const std::string * text = (*tokens)[i].as_string();
        if (text == nullptr) return bad(k_key_tokens, "element " + std::to_string(i) + " is not a string");
        // An empty token could never be matched and would break the text -> id map;
        // llama.cpp gives it a placeholder text, so ids stay aligned.
        v.texts[i] = text->empty() ? "[EMPTY_" + std::to_string(i) + "]" : *text;
        if (scores != nullptr) {
            const gguf::value & s = (*scores)[i];
            if (auto f = s.as_float()) {
                // A NaN would make the SPM merge order undefined.
                if (std::isnan(*f)) return bad(k_key_scores, "token " + std::to_string(i) + " has a NaN score");
                v.scores[i] = static_cast<float>(*f);
            } else if (auto k = s.as_int()) {
                v.scores[i] = static_cast<float>(*k);
            }
        }
        if (types != nullptr) SKIPPY_TRY(read_kind((*types)[i], i, v.kinds[i]));
    }
    const text_index::duplicate d = v.ids_by_text.build(v.texts);
    if (d.second >= 0) {
        return bad(k_key_tokens, "duplicate token text '" + escape_bytes(v.texts[static_cast<size_t>(d.second)]) + "' (ids " +
                                     std::to_string(d.first) + " and " + std::to_string(d.second) + ")");
    }
    return status::ok();
}

// Every merge must be "left right" where left, right and left + right are all tokens,
// as Hugging Face requires; llama.cpp keeps the others, which can never apply.
status load_merges(const gguf::file & file, vocab & v) {
    const std::vector<gguf::value> * merges = nullptr;
    SKIPPY_TRY(find_array(file, k_key_merges, {gguf::value_type::string}, merges));
    if (merges == nullptr) return bad(k_key_merges, "missing (a BPE vocabulary needs its merges)");
    v.merges.reserve(merges->size());
    std::string joined;
    for (size_t i = 0; i < merges->size(); ++i) {
        const std::string * m = (*merges)[i].as_string();
        if (m == nullptr) return bad(k_key_merges, "element " + std::to_string(i) + " is not a string");
        const auto refuse = [&](std::string_view why) {
            return bad(k_key_merges, "merge " + std::to_string(i) + " '" + escape_bytes(*m) + "' " + std::string(why));
        };
        // The split rule of the tokenizer: the first space after the first byte, so a
        // left side may itself be a space.
        const size_t space = m->find(' ', 1);
        if (space == std::string::npos) return refuse("is not two pieces separated by a space");
        const std::string_view left = std::string_view(*m).substr(0, space);
        const std::string_view right = std::string_view(*m).substr(space + 1);
        bpe_merge merge;
        merge.left = v.find(left);
        if (merge.left < 0) return refuse("names a left piece that is not a token");
        merge.right = v.find(right);
        if (merge.right < 0) return refuse("names a right piece that is not a token");
        joined.assign(left);
        joined.append(right);
        merge.merged = v.find(joined);
        if (merge.merged < 0) return refuse("makes a piece that is not a token");
        v.merges.push_back(merge);
    }
    return status::ok();
}

// <arch>.vocab_size, when a file has it, is the model's vocabulary: the token list must
// be exactly that long, or ids would index past the embeddings (or leave rows unnamed).
status check_vocab_size(const gguf::file & file, const vocab & v) {
    const auto arch = file.get_string("general.architecture");
    if (!arch) return status::ok();
    const std::string key = *arch + ".vocab_size";
    const gguf::value * size = file.find(key);
    if (size == nullptr) return status::ok();
    const auto n = size->as_int();
    if (!n) return bad(escape_bytes(key), "expected an integer");
    if (*n != v.n_vocab()) {
        return bad(escape_bytes(key), std::to_string(*n) + " disagrees with the " + std::to_string(v.n_vocab()) +
                                          " entries of " + std::string(k_key_tokens));
    }
    return status::ok();
}

// A special id that is absent from the file and found by text instead: the first of
// `texts` that is a token, now a control token. -1 when none is.
token_id detect_by_text(vocab & v, std::span<const std::string_view> texts) {
    for (std::string_view text : texts) {
        const token_id id = v.find(text);
        if (id < 0) continue;
        v.kinds[id] = token_kind::control;
        return id;
    }
    return -1;
}

// Special ids skippy does not use but validates, so a hostile id is refused at load
// like the ones it does use (llama.cpp reads them all).
constexpr std::string_view k_other_id_keys[] = {
    "tokenizer.ggml.seperator_token_id",  // sic: the GGUF key is spelled so
    "tokenizer.ggml.padding_token_id",  "tokenizer.ggml.mask_token_id",     "tokenizer.ggml.cls_token_id",
    "tokenizer.ggml.fim_pre_token_id",  "tokenizer.ggml.fim_suf_token_id",  "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.prefix_token_id",   "tokenizer.ggml.suffix_token_id",   "tokenizer.ggml.middle_token_id",
};

status load_special_ids(const gguf::file & file, vocab & v, bool model_add_bos) {
    const int32_t n = v.n_vocab();
    // k_absent: no key, so found by text below; a key that says "none" (-1) stays none.
    constexpr token_id k_absent = -2;
    token_id eot = k_absent;
    token_id eom = k_absent;
    token_id fim_pad = k_absent;
    token_id fim_rep = k_absent;
    token_id fim_sep = k_absent;
    if (v.model == tokenizer_model::spm) {
        // llama.cpp's SentencePiece defaults, used when the keys are absent.
        v.bos = n > 1 ? 1 : -1;
        v.eos = n > 2 ? 2 : -1;
        v.unk = 0;
    }
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.bos_token_id", n, v.bos));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.eos_token_id", n, v.eos));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.unknown_token_id", n, v.unk));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.eot_token_id", n, eot));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.eom_token_id", n, eom));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.fim_pad_token_id", n, fim_pad));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.fim_rep_token_id", n, fim_rep));
    SKIPPY_TRY(read_token_id(file, "tokenizer.ggml.fim_sep_token_id", n, fim_sep));
    for (std::string_view key : k_other_id_keys) {
        token_id unused = -1;
        SKIPPY_TRY(read_token_id(file, key, n, unused));
    }
    if (eot == k_absent) eot = detect_by_text(v, k_eot_texts);
    if (eom == k_absent) eom = detect_by_text(v, k_eom_texts);
    if (fim_pad == k_absent) fim_pad = detect_by_text(v, k_fim_pad_texts);
    if (fim_rep == k_absent) fim_rep = detect_by_text(v, k_fim_rep_texts);
    if (fim_sep == k_absent) fim_sep = detect_by_text(v, k_fim_sep_texts);

    const gguf::value * add_bos_value = file.find(k_key_add_bos);
    if (add_bos_value != nullptr) {
        SKIPPY_TRY(read_optional_bool(file, k_key_add_bos, v.add_bos));
        if (v.add_bos && v.bos < 0) return bad(k_key_add_bos, "is true but the vocabulary has no BOS token");
    } else {
        v.add_bos = model_add_bos && v.bos >= 0;
    }

    // The end-of-generation set, in llama.cpp's order of rules: FIM tokens, the known
    // texts (forced to control), the harmony markers (user-defined), EOS / EOT / EOM.
    for (token_id id : {fim_pad, fim_rep, fim_sep}) {
        if (id >= 0) v.eog_ids.push_back(id);
    }
    for (std::string_view text : k_eog_texts) {
        const token_id id = v.find(text);
        if (id < 0) continue;
        v.eog_ids.push_back(id);
        v.kinds[id] = token_kind::control;
    }
    for (std::string_view text : k_harmony_texts) {
        if (const token_id id = v.find(text); id >= 0) v.kinds[id] = token_kind::user_defined;
    }
    for (token_id id : {v.eos, eot, eom}) {
        if (id >= 0) v.eog_ids.push_back(id);
    }
    std::sort(v.eog_ids.begin(), v.eog_ids.end());
    v.eog_ids.erase(std::unique(v.eog_ids.begin(), v.eog_ids.end()), v.eog_ids.end());

    // Harmony (and Solar Open) end a message with <|end|> and the answer with <|return|>
    // or a tool call with <|call|>: when both kinds of end are there, <|end|> only closes
    // one message of the answer, so it is not the end of generation; it becomes
    // user-defined (always rendered, always matched), as llama.cpp does.
    const auto eog_has = [&](std::string_view text) {
        const token_id id = v.find(text);
        return id >= 0 && std::binary_search(v.eog_ids.begin(), v.eog_ids.end(), id);
    };
    const bool has_call = eog_has("<|call|>") || eog_has("<|calls|>");
    if (eog_has("<|end|>") && has_call && (eog_has("<|return|>") || eog_has("<|flush|>"))) {
        const token_id end = v.find("<|end|>");
        v.eog_ids.erase(std::find(v.eog_ids.begin(), v.eog_ids.end(), end));
        v.kinds[end] = token_kind::user_defined;
    }
    return status::ok();
}

void build_special_list(const gguf::file & file, vocab & v) {
    for (token_id id = 0; id < v.n_vocab(); ++id) {
        const token_kind k = v.kinds[id];
        if (k == token_kind::control || k == token_kind::user_defined || k == token_kind::unknown) {
            v.special_ids.push_back(id);
        }
    }
    // Longest first, so a special token is matched before any shorter one inside it;
    // equal lengths by id, so the order never depends on the sort implementation.
    std::stable_sort(v.special_ids.begin(), v.special_ids.end(),
                     [&](token_id a, token_id b) { return v.texts[a].size() > v.texts[b].size(); });

    // llama.cpp strips the whitespace after Phi-3's special tokens (its chat template
    // writes "<|user|>\n"); it keys this on the model name.
    std::string name = file.get_string("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (token_id id : v.special_ids) v.strip[id] |= vocab::k_rstrip;
        if (token_id id = v.find("</s>"); id >= 0) v.strip[id] |= vocab::k_rstrip;
        for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
            if (token_id id = v.find(text); id >= 0) v.strip[id] &= static_cast<uint8_t>(~vocab::k_rstrip);
        }
    }
}

}  // namespace

result<vocab> load_vocab(const gguf::file & file) {
    vocab v;
    const gguf::value * model_value = file.find(k_key_model);
    if (model_value == nullptr) return bad(k_key_model, "missing (the file has no tokenizer)");
    const std::string * model_name = model_value->as_string();
    if (model_name == nullptr) return bad(k_key_model, "expected a string");

    bool model_add_bos = false;
    if (*model_name == "llama") {
        v.model = tokenizer_model::spm;
        v.add_space_prefix = true;
        model_add_bos = true;
        SKIPPY_TRY(read_optional_bool(file, k_key_add_prefix, v.add_space_prefix));
    } else if (*model_name == "gpt2") {
        v.model = tokenizer_model::bpe;
        const gguf::value * pre_value = file.find(k_key_pre);
        if (pre_value == nullptr) {
            // As llama.cpp: old conversions have no pre-tokenizer name; the default
            // regexes are a guess, so say so.
            SKIPPY_LOG_WARN("tokenizer: %s missing, using the default pre-tokenizer", std::string(k_key_pre).c_str());
            v.pre = "default";
        } else if (const std::string * pre = pre_value->as_string()) {
            v.pre = pre->empty() ? "default" : *pre;
        } else {
            return bad(k_key_pre, "expected a string");
        }
        const pre_style * style = find_pre_style(v.pre);
        if (style == nullptr) {
            return make_error(error_code::unsupported, "tokenizer.ggml.pre '" + escape_bytes(v.pre) +
                                                           "' is not supported (supported: " +
                                                           std::string(supported_pre_names()) + ")");
        }
        // Without add_bos_token no BPE vocabulary adds BOS, whatever its pre-tokenizer
        // (the rule skippy's CLI promises). llama.cpp defaults its llama-3 family to
        // BOS; converted llama-3 files carry add_bos_token, so they are unaffected.
    } else {
        return make_error(error_code::unsupported,
                          "tokenizer.ggml.model '" + escape_bytes(*model_name) + "' is not supported (supported: llama, gpt2)");
    }

    SKIPPY_TRY(load_tokens(file, v));
    SKIPPY_TRY(check_vocab_size(file, v));
    if (v.model == tokenizer_model::bpe) SKIPPY_TRY(load_merges(file, v));
    SKIPPY_TRY(load_special_ids(file, v, model_add_bos));
    build_special_list(file, v);

    v.pieces.resize(v.texts.size());
    for (size_t i = 0; i < v.texts.size(); ++i) v.pieces[i] = render_piece(v.model, v.texts[i], v.kinds[i]);
    return v;
}

}  // namespace skippy::tokenizer_detail
