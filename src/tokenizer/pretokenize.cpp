#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

namespace skippy::tokenizer_detail {

namespace {

// GPT-2's word pattern: contractions, letters, numbers, other symbols (each with an
// optional leading space), and whitespace where a trailing run leaves its last space to
// the next word. llama.cpp writes it without the final "|\s+" and its hand-written
// matcher behaves as if it were there; a lone whitespace no alternative takes would
// become a word of its own anyway.
constexpr std::string_view k_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 (tiktoken cl100k style): case-insensitive contractions, a letter run that may
// take one leading non-letter, numbers in groups of at most three, symbols that keep
// their trailing newlines, and newline runs kept apart from other whitespace.
constexpr std::string_view k_llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3's pattern with every digit its own word.
constexpr std::string_view k_qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// gpt-4o (tiktoken o200k, as llama.cpp writes it): a word is a run of "upper" letters then
// "lower" ones, or the reverse, where a letter other than ASCII a-z counts as upper and
// one other than ASCII A-Z as lower (so any non-ASCII letter is both), with one optional
// leading non-letter and a trailing contraction; numbers in threes; symbol runs keep
// their newlines and slashes. Unlike the tiktoken original, combining marks (\p{M}) are
// not part of a word: llama.cpp's pattern leaves them out, so "\u0926\u0941" splits.
constexpr std::string_view k_gpt4o =
    R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const pre_style k_default_style{
    "default",
    {
        // Punctuation and ASCII symbol runs first, then GPT-2 words, then digit runs,
        // then ASCII digits in threes.
        R"([\p{P}\$\+<=>\^~\|]+)", k_gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]",
    },
    false,
};

const pre_style k_gpt2_style{"gpt-2", {k_gpt2}, false};

const pre_style k_llama3_style{"llama-3", {k_llama3}, true};

// dbrx and smaug use Llama 3's pattern but llama.cpp does not give them ignore_merges.
const pre_style k_llama3_plain_style{"llama-3 (dbrx/smaug)", {k_llama3}, false};

const pre_style k_qwen2_style{"qwen2", {k_qwen2}, false};

const pre_style k_gpt4o_style{"gpt-4o", {k_gpt4o}, false};

const pre_style k_falcon_style{
    "falcon",
    {R"([\p{P}\$\+<=>\^~\|`]+)", k_gpt2, "[0-9][0-9][0-9]"},
    false,
};

// Every digit its own word, then GPT-2 words.
const pre_style k_starcoder_style{"starcoder", {R"(\p{N})", k_gpt2}, false};

// DeepSeek Coder's cascade: each CR and LF alone, then letter runs and punctuation runs
// (each with at most one leading whitespace), then runs of CJK ideographs / Hangul, then
// single digits. What no pattern matches stays between the matches as its own word, so
// for instance "   Hello" becomes "  " + " Hello".
const pre_style k_deepseek_coder_style{
    "deepseek-coder",
    {
        "[\\r\\n]",
        R"(\s?\p{L}+)",
        R"(\s?\p{P}+)",
        // U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF, as in llama.cpp.
        R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
        R"(\p{N})",
    },
    false,
};

struct pre_name {
    std::string_view  name;
    const pre_style * style;
};

// tokenizer.ggml.pre values and the style llama.cpp uses for each (llama-vocab.cpp).
const pre_name k_pre_names[] = {
    {"default", &k_default_style},
    {"gpt-2", &k_gpt2_style},
    {"phi-2", &k_gpt2_style},
    {"mpt", &k_gpt2_style},
    {"olmo", &k_gpt2_style},
    {"jais", &k_gpt2_style},
    {"trillion", &k_gpt2_style},
    {"gigachat", &k_gpt2_style},
    {"jina-es", &k_gpt2_style},
    {"jina-de", &k_gpt2_style},
    {"jina-v1-en", &k_gpt2_style},
    {"jina-v2-es", &k_gpt2_style},
    {"jina-v2-de", &k_gpt2_style},
    {"jina-v2-code", &k_gpt2_style},
    {"roberta-bpe", &k_gpt2_style},
    {"llama3", &k_llama3_style},
    {"llama-v3", &k_llama3_style},
    {"llama-bpe", &k_llama3_style},
    {"falcon3", &k_llama3_style},
    {"falcon-h1", &k_llama3_style},
    {"pixtral", &k_llama3_style},
    {"dbrx", &k_llama3_plain_style},
    {"smaug-bpe", &k_llama3_plain_style},
    {"qwen2", &k_qwen2_style},
    {"deepseek-r1-qwen", &k_qwen2_style},
    {"stablelm2", &k_qwen2_style},
    {"hunyuan", &k_qwen2_style},
    {"megrez", &k_qwen2_style},
    {"gpt-4o", &k_gpt4o_style},
    {"llama4", &k_gpt4o_style},
    {"falcon", &k_falcon_style},
    {"starcoder", &k_starcoder_style},
    {"refact", &k_starcoder_style},
    {"command-r", &k_starcoder_style},
    {"smollm", &k_starcoder_style},
    {"codeshell", &k_starcoder_style},
    {"exaone", &k_starcoder_style},
    {"minerva-7b", &k_starcoder_style},
    {"deepseek-coder", &k_deepseek_coder_style},
};

}  // namespace

const pre_style * find_pre_style(std::string_view pre) {
    for (const auto & entry : k_pre_names) {
        if (entry.name == pre) return entry.style;
    }
    return nullptr;
}

std::string_view supported_pre_names() {
    static const std::string names = [] {
        std::string s;
        for (const auto & entry : k_pre_names) {
            if (!s.empty()) s += ", ";
            s += entry.name;
        }
        return s;
    }();
    return names;
}

struct pretokenizer::compiled {
    pcre2_code * code = nullptr;
    ~compiled() { pcre2_code_free(code); }
};

pretokenizer::pretokenizer(const pre_style & style) : style_(style) {}

pretokenizer::~pretokenizer() = default;

result<std::unique_ptr<pretokenizer>> pretokenizer::create(const pre_style & style) {
    std::unique_ptr<pretokenizer> pre(new pretokenizer(style));
    for (std::string_view pattern : style.patterns) {
        int        error = 0;
        PCRE2_SIZE error_offset = 0;
        auto       regex = std::make_unique<compiled>();
        // UCP makes \s and the \p classes Unicode-aware; DOLLAR_ENDONLY keeps '$' from
        // matching before a final newline.
        regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
        if (regex->code == nullptr) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof(message));
            return make_error(error_code::internal, "pre-tokenizer regex '" + std::string(pattern) + "' at offset " +
                                                        std::to_string(error_offset) + ": " +
                                                        reinterpret_cast<const char *>(message));
        }
        // JIT is only a speed-up: when unavailable the interpreter gives the same matches.
        (void) pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
        pre->regexes_.push_back(std::move(regex));
    }
    return pre;
}

namespace {

struct match_data_deleter {
    void operator()(pcre2_match_data * md) const { pcre2_match_data_free(md); }
};

// Finds the next match in `word` at or after `start`. Returns false when there is none
// (or PCRE2 gives up, e.g. on a resource limit: the rest then stays one word, which
// still tokenizes, just less finely).
bool next_match(const pcre2_code * code, pcre2_match_data * md, std::string_view word, size_t start,
                size_t & match_begin, size_t & match_end) {
    const auto * subject = reinterpret_cast<PCRE2_SPTR>(word.data());
    // The text was validated once (it is sanitized before splitting), so skip PCRE2's
    // per-call UTF check, which would make splitting quadratic.
    int rc = pcre2_match(code, subject, word.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // The JIT's small default stack ran out (very long runs); the interpreter keeps
        // its backtracking state on the heap.
        rc = pcre2_match(code, subject, word.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) return false;
    const PCRE2_SIZE * ovector = pcre2_get_ovector_pointer(md);
    match_begin = ovector[0];
    match_end = ovector[1];
    return match_end > match_begin && match_begin >= start && match_end <= word.size();
}

}  // namespace

void pretokenizer::split(std::string_view text, std::vector<std::string_view> & words) const {
    words.clear();
    if (text.empty()) return;
    words.push_back(text);
    std::vector<std::string_view> next;
    for (const auto & regex : regexes_) {
        std::unique_ptr<pcre2_match_data, match_data_deleter> md(
            pcre2_match_data_create_from_pattern(regex->code, nullptr));
        if (!md) continue;  // out of memory: keep the current cut
        next.clear();
        for (std::string_view word : words) {
            size_t done = 0;  // end of the last word emitted from `word`
            size_t match_begin = 0;
            size_t match_end = 0;
            while (done < word.size() && next_match(regex->code, md.get(), word, done, match_begin, match_end)) {
                if (match_begin > done) next.push_back(word.substr(done, match_begin - done));
                next.push_back(word.substr(match_begin, match_end - match_begin));
                done = match_end;
            }
            if (done < word.size()) next.push_back(word.substr(done));
        }
        words.swap(next);
    }
}

}  // namespace skippy::tokenizer_detail
