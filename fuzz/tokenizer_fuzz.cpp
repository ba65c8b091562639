// libFuzzer target for the tokenizers (src/tokenizer): SPM and byte-level BPE with
// every pre-tokenizer the shared vocabularies use.
//
// One source, two programs:
//   (default)                     tokenizer_fuzz: the fuzzer
//   SKIPPY_TOKENIZER_FUZZ_SEEDS   tokenizer_fuzz_seeds DIR: writes seeds
//
// The vocabularies are loaded once: the vocab-only GGUFs under $SKIPPY_TEST_DATA/vocab
// (default ../shared) when present, else the tokenizer of a synthetic model and a small
// BPE vocabulary made in process (said on stderr). An input's first byte picks the
// vocabulary (its index in k_vocab_names, modulo those loaded); the rest is any bytes,
// tokenized with and without special-token parsing. Beyond "no crash, no hang, no
// sanitizer report":
//   - every id is in [0, n_vocab);
//   - add_bos prepends exactly the BOS (when there is one) and changes nothing else;
//   - byte-level BPE: detokenizing gives back the input exactly when it is well-formed
//     UTF-8, else sanitize_utf8(input) (BPE tokenizes the sanitized text); with special
//     parsing, rendering the special tokens gives the same bytes (text holding a byte
//     the vocabulary has no token for is left out: that byte is dropped, as documented);
//   - SPM (docs/tokenizer.md, "Detokenization"): for well-formed UTF-8 s that matches
//     no special token, detokenize(tokenize(s), strip the space prefix) == s, where a
//     literal U+2581 in s comes back as the space it stands for (vocabularies with byte
//     tokens).
#include "gguf/gguf.h"

#if !defined(SKIPPY_TOKENIZER_FUZZ_SEEDS)
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"  // the GPT-2 byte alphabet, for the synthetic BPE vocabulary

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#else
#include "seed_files.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>
#endif

namespace {

using namespace skippy;

// The shared vocabularies: the three chat BPE ones, classic GPT-2, two pre-tokenizers
// with their own regexes, and two SPM ones (phi-3 strips whitespace around its special
// tokens).
constexpr const char * k_vocab_names[] = {"qwen3", "llama3", "gptoss", "gpt-2", "deepseek-coder", "starcoder",
                                          "llama-spm", "phi-3"};

std::string test_data_root() {
    const char * data = std::getenv("SKIPPY_TEST_DATA");
    return data && *data ? std::string(data) : std::string(SKIPPY_DEFAULT_TEST_DATA);
}

#if !defined(SKIPPY_TOKENIZER_FUZZ_SEEDS)

#define FUZZ_CHECK(cond)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            std::fprintf(stderr, "tokenizer_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, \
                         __LINE__);                                                             \
            std::abort();                                                                       \
        }                                                                                       \
    } while (0)

struct loaded_vocab {
    std::string                name;
    std::unique_ptr<tokenizer> tok;
    // SPM round trips only where every byte has a token to fall back to.
    bool                       spm_bytes = false;
    // BPE: bytes whose GPT-2 alphabet character is not a token. BPE drops such a byte
    // (docs/tokenizer.md, as llama.cpp does): starcoder lacks 0xF1 and others.
    std::array<bool, 256>      bpe_byte_missing{};
};

std::unique_ptr<tokenizer> tokenizer_of(std::span<const uint8_t> gguf_bytes, const std::string & what) {
    auto f = gguf::file::from_bytes(gguf_bytes);
    if (!f.is_ok()) {
        std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", what.c_str(), f.error().to_string().c_str());
        std::abort();
    }
    auto tok = tokenizer::from_gguf(**f);
    if (!tok.is_ok()) {
        std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", what.c_str(), tok.error().to_string().c_str());
        std::abort();
    }
    return std::move(tok).value();
}

// Without the shared data: the SPM vocabulary make-model writes, and a GPT-2 style one
// with the whole byte alphabet (so the round trip holds) and a few merges.
std::vector<loaded_vocab> synthetic_vocabs() {
    std::vector<loaded_vocab> out;
    synthetic_model_options o;
    o.n_embd = 32;
    o.n_layer = 1;
    o.n_head = 2;
    o.n_head_kv = 1;
    o.n_ff = 32;
    o.n_vocab = 800;
    auto model = build_synthetic_model(o);
    FUZZ_CHECK(model.is_ok());
    out.push_back({"synthetic-spm", tokenizer_of(model->to_bytes(), "synthetic model"), true});

    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {  // GPT-2's byte alphabet, in byte order
        tokens.emplace_back(tokenizer_detail::gpt2_byte_to_utf8(static_cast<uint8_t>(b)));
    }
    const std::vector<std::string> merges = {"h e", "l l", "he ll", "\xc4\xa0 t", "\xc4\xa0t h"};
    for (const auto & m : merges) {
        const size_t sp = m.find(' ');
        tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    }
    tokens.push_back("<|endoftext|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    gguf::writer w;
    w.set("tokenizer.ggml.model", gguf::value::make_string("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::value::make_string("llama3"));
    w.set("tokenizer.ggml.tokens", gguf::value::make_string_array(tokens));
    w.set("tokenizer.ggml.token_type", gguf::value::make_i32_array(types));
    w.set("tokenizer.ggml.merges", gguf::value::make_string_array(merges));
    out.push_back({"synthetic-bpe", tokenizer_of(w.to_bytes(), "synthetic BPE vocabulary"), false});
    return out;
}

void note_missing_bytes(loaded_vocab & v) {
    if (v.tok->model() != tokenizer_model::bpe) return;
    int n_missing = 0;
    for (int b = 0; b < 256; ++b) {
        v.bpe_byte_missing[static_cast<size_t>(b)] = v.tok->find_token(tokenizer_detail::gpt2_byte_to_utf8(static_cast<uint8_t>(b))) < 0;
        n_missing += v.bpe_byte_missing[static_cast<size_t>(b)];
    }
    if (n_missing > 0) {
        std::fprintf(stderr, "tokenizer_fuzz: %s has no token for %d bytes; its round trip is checked on text without them\n",
                     v.name.c_str(), n_missing);
    }
}

std::vector<loaded_vocab> load_vocabs() {
    const std::string root = test_data_root();
    std::vector<loaded_vocab> out;
    for (const char * name : k_vocab_names) {
        const std::string path = root + "/vocab/ggml-vocab-" + name + ".gguf";
        const auto start = std::chrono::steady_clock::now();
        auto f = gguf::file::open(path);
        if (!f.is_ok()) continue;
        auto tok = tokenizer::from_gguf(**f);
        if (!tok.is_ok()) {
            std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", path.c_str(), tok.error().to_string().c_str());
            std::abort();
        }
        std::fprintf(stderr, "tokenizer_fuzz: loaded %s in %.1f s\n", name,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        loaded_vocab v{name, std::move(tok).value(), false};
        v.spm_bytes = v.tok->model() == tokenizer_model::spm && v.tok->find_token("<0x00>") >= 0 &&
                      v.tok->find_token("<0xFF>") >= 0;
        note_missing_bytes(v);
        out.push_back(std::move(v));
    }
    if (out.empty()) {
        std::fprintf(stderr, "tokenizer_fuzz: no vocabularies under %s/vocab (set SKIPPY_TEST_DATA); "
                             "fuzzing a synthetic model's SPM tokenizer and a small BPE one instead\n", root.c_str());
        return synthetic_vocabs();
    }
    std::fprintf(stderr, "tokenizer_fuzz: %zu vocabularies from %s/vocab\n", out.size(), root.c_str());
    return out;
}

// SPM renders U+2581 as a space: that is the one change its round trip makes.
std::string spm_expected(std::string_view text) {
    static constexpr std::string_view marker = "\xe2\x96\x81";
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text.substr(i, marker.size()) == marker) {
            out.push_back(' ');
            i += marker.size();
        } else {
            out.push_back(text[i++]);
        }
    }
    return out;
}

// SPM text that matched no special token: a user-defined one (matched even without
// special parsing) restarts the space prefix after it, and phi-3's eat the whitespace
// next to them, so their neighbourhood does not round trip.
bool plain_spm(const tokenizer & t, const std::vector<token_id> & ids) {
    for (token_id id : ids) {
        const token_kind k = t.kind(id);
        if (k != token_kind::normal && k != token_kind::byte) return false;
    }
    return true;
}

bool has_missing_byte(const loaded_vocab & v, std::string_view text) {
    for (char c : text) {
        if (v.bpe_byte_missing[static_cast<uint8_t>(c)]) return true;
    }
    return false;
}

// The BOS check tokenizes a third time; short inputs exercise it as well as long ones.
constexpr size_t k_max_bos_check_bytes = 256;

void check_vocab(const loaded_vocab & v, std::string_view text) {
    const tokenizer & t = *v.tok;
    const int32_t n_vocab = t.n_vocab();
    // SPM cuts characters by their lead byte without validating (as llama.cpp does), so
    // a broken sequence can swallow the U+2581 a space became, and its byte tokens give
    // the marker back as bytes: the round trip is promised for well-formed text only.
    const bool valid_utf8 = sanitize_utf8(text) == text;
    for (bool special : {false, true}) {
        const std::vector<token_id> ids = t.tokenize(text, false, special);
        for (token_id id : ids) FUZZ_CHECK(id >= 0 && id < n_vocab);
        if (!special && text.size() <= k_max_bos_check_bytes) {
            std::vector<token_id> with_bos = t.tokenize(text, true, false);
            if (t.bos() >= 0) {
                FUZZ_CHECK(!with_bos.empty() && with_bos.front() == t.bos());
                with_bos.erase(with_bos.begin());
            }
            FUZZ_CHECK(with_bos == ids);
        }
        if (t.model() == tokenizer_model::bpe) {
            const std::string expected = sanitize_utf8(text);
            if (has_missing_byte(v, expected)) continue;
            FUZZ_CHECK(t.detokenize(ids, special) == expected);
        } else if (v.spm_bytes && !special && valid_utf8 && plain_spm(t, ids)) {
            FUZZ_CHECK(t.detokenize(ids, false, true) == spm_expected(text));
        }
    }
}

#endif  // !SKIPPY_TOKENIZER_FUZZ_SEEDS

}  // namespace

#if !defined(SKIPPY_TOKENIZER_FUZZ_SEEDS)

namespace {
const std::vector<loaded_vocab> * g_vocabs = nullptr;
}  // namespace

// Loading is done here, before the per-input -timeout starts counting: a 200k-token
// vocabulary takes seconds to load under the sanitizers.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    g_vocabs = new std::vector<loaded_vocab>(load_vocabs());
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) return 0;
    // One vocabulary per input, picked by the first byte: eight per input made every
    // run eight times slower without finding more in any one of them.
    const loaded_vocab & v = (*g_vocabs)[data[0] % g_vocabs->size()];
    check_vocab(v, std::string_view(reinterpret_cast<const char *>(data) + 1, size - 1));
    return 0;
}

#else

namespace {

// Splits a .inp file like the vocabulary tests do: on "\n__ggml_vocab_test__\n".
std::vector<std::string> split_inputs(const std::string & text) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + sep.size()) {
        out.push_back(text.substr(start, at - start));
    }
    out.push_back(text.substr(start));
    return out;
}

}  // namespace

// The shared vocabularies' test strings (when present) and a few hand-written ones:
// special-token text, broken UTF-8, U+2581, long runs of whitespace and digits.
int main(int argc, char ** argv) {
    const char * dir_arg = skippy::fuzz_seeds::corpus_dir_arg(argc, argv);
    if (!dir_arg) return 2;
    const std::string dir = dir_arg;
    std::vector<std::string> seeds = {
        "Hello, world!",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<|start|>assistant<|channel|>final<|message|>ok<|return|>",
        "<s> </s><unk><|endoftext|><|end|>  \n\n<|user|>x<|assistant|>",
        "bad \xff\xfe utf-8 \xe2\x82 cut \xc0\xaf overlong \xed\xa0\x80 surrogate",
        "\xe2\x96\x81lead\xe2\x96\x81marker \xe2\x96\x81",
        "   \t\t\n\n\r\n  spaces   ",
        "1234567890 3.14159 1,000,000 0x1F",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xf0\x9f\x98\x80\xf0\x9f\xa6\x99",
        "don't I'LL we've 'S 're",
        std::string("nul\0byte", 8),
    };
    // Each hand-written string for every vocabulary; each shared test string for the
    // vocabulary it was written for.
    std::vector<std::string> all;
    for (const std::string & s : seeds) {
        for (size_t v = 0; v < std::size(k_vocab_names); ++v) all.push_back(std::string(1, static_cast<char>(v)) + s);
    }
    int n_shared = 0;
    const std::string root = test_data_root();
    for (size_t v = 0; v < std::size(k_vocab_names); ++v) {
        std::ifstream in(root + "/vocab/ggml-vocab-" + k_vocab_names[v] + ".gguf.inp", std::ios::binary);
        if (!in) continue;
        std::stringstream ss;
        ss << in.rdbuf();
        for (const std::string & s : split_inputs(ss.str())) {
            all.push_back(std::string(1, static_cast<char>(v)) + s);
            ++n_shared;
        }
    }
    bool ok = true;
    for (size_t i = 0; i < all.size(); ++i) {
        ok &= skippy::fuzz_seeds::write_seed_file(dir + "/seed-" + std::to_string(i), all[i]);
    }
    std::fprintf(stderr, "tokenizer_fuzz_seeds: wrote %zu seeds (%d from %s/vocab) to %s\n", all.size(), n_shared,
                 root.c_str(), dir.c_str());
    return ok ? 0 : 1;
}

#endif
