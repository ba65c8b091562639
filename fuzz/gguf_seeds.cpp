// Writes the GGUF fuzzer's seed corpus: a tiny synthetic model of every architecture
// `skippy make-model` builds (its own writer, so the seeds match the current format),
// each one's metadata alone (a vocabulary-only file, like those under
// $SKIPPY_TEST_DATA/vocab), and a small byte-level BPE vocabulary with merges.
// Usage: gguf_fuzz_seeds DIR
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "seed_files.h"
#include "tokenizer/tokenizer.h"

#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace skippy;

// The same metadata without tensors: what a vocabulary-only GGUF holds.
result<std::vector<uint8_t>> metadata_only(const std::vector<uint8_t> & model_bytes) {
    SKIPPY_ASSIGN_OR_RETURN(auto f, gguf::file::from_bytes(model_bytes));
    gguf::writer w;
    for (const auto & [key, v] : f->metadata()) w.set(key, v);
    return w.to_bytes();
}

// A GPT-2 style vocabulary: the printable ASCII alphabet, a few merged pieces and the
// merges that make them, and two control tokens.
std::vector<uint8_t> bpe_vocab() {
    std::vector<std::string> tokens;
    for (char c = '!'; c <= '~'; ++c) tokens.emplace_back(1, c);
    tokens.push_back("\xc4\xa0");  // the byte alphabet's space
    const std::vector<std::string> merges = {"h e", "l l", "he ll", "o \xc4\xa0", "\xc4\xa0 w"};
    for (const auto & m : merges) {
        const size_t sp = m.find(' ');
        tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    }
    tokens.push_back("<|endoftext|>");
    tokens.push_back("<|im_end|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types[types.size() - 2] = 3;
    types[types.size() - 1] = 3;
    gguf::writer w;
    w.set("tokenizer.ggml.model", gguf::value::make_string("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::value::make_string("qwen2"));
    w.set("tokenizer.ggml.tokens", gguf::value::make_string_array(tokens));
    w.set("tokenizer.ggml.token_type", gguf::value::make_i32_array(types));
    w.set("tokenizer.ggml.merges", gguf::value::make_string_array(merges));
    w.set("tokenizer.ggml.eos_token_id", gguf::value::make_u32(static_cast<uint32_t>(tokens.size() - 2)));
    return w.to_bytes();
}

// A seed the loader refuses would leave the fuzzer's checks on accepted files unreached.
bool loads(const std::string & name, const std::vector<uint8_t> & bytes, bool model) {
    auto f = gguf::file::from_bytes(bytes);
    status st = f.is_ok() ? status::ok() : f.error();
    if (st.is_ok() && model) {
        auto hp = model_hparams::from_gguf(**f);
        if (!hp.is_ok()) st = hp.error();
    }
    if (st.is_ok()) {
        auto tok = tokenizer::from_gguf(**f);
        if (!tok.is_ok()) st = tok.error();
    }
    if (!st.is_ok()) std::fprintf(stderr, "gguf_fuzz_seeds: %s does not load: %s\n", name.c_str(), st.to_string().c_str());
    return st.is_ok();
}

bool write_file(const std::string & path, const std::vector<uint8_t> & bytes) {
    return fuzz_seeds::write_seed_file(path, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
}

}  // namespace

int main(int argc, char ** argv) {
    const char * dir_arg = fuzz_seeds::corpus_dir_arg(argc, argv);
    if (!dir_arg) return 2;
    const std::string dir = dir_arg;
    const std::vector<uint8_t> bpe = bpe_vocab();
    bool ok = loads("vocab_bpe", bpe, false) && write_file(dir + "/vocab_bpe", bpe);
    int n = 1;
    for (const char * arch : {"llama", "llama3", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe"}) {
        // Small enough to stay under the fuzzer's -max_len with room to grow.
        synthetic_model_options o;
        o.arch = arch;
        o.n_embd = 32;
        o.n_layer = 1;
        o.n_head = 2;
        o.n_head_kv = 1;
        o.n_ff = 32;
        o.n_expert = 2;
        o.n_expert_used = 1;
        o.n_vocab = 267;
        o.type = "F16";
        auto w = build_synthetic_model(o);
        if (!w.is_ok()) {
            std::fprintf(stderr, "gguf_fuzz_seeds: %s: %s\n", arch, w.error().message().c_str());
            ok = false;
            continue;
        }
        const std::vector<uint8_t> bytes = w->to_bytes();
        auto meta = metadata_only(bytes);
        ok &= meta.is_ok() && loads(std::string("model_") + arch, bytes, true) &&
              loads(std::string("vocab_") + arch, *meta, false) && write_file(dir + "/model_" + arch, bytes) &&
              write_file(dir + "/vocab_" + arch, *meta);
        n += 2;
    }
    std::fprintf(stderr, "gguf_fuzz_seeds: wrote %d seeds to %s\n", n, dir.c_str());
    return ok ? 0 : 1;
}
