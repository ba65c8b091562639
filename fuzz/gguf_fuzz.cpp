// libFuzzer target for the GGUF reader (src/gguf) and the metadata checks a load runs on
// what it returns: model_hparams::from_gguf and the tokenizer's vocabulary load.
//
// The input is a whole GGUF image, parsed from memory (gguf::file::from_bytes, the same
// parser file::open runs on the mapped file). Beyond "no crash, no sanitizer report, no
// allocation past -malloc_limit_mb" (a header claiming 2^40 tensors or a 2^60-byte
// string must be refused before anything is allocated):
//   - what the reader accepts is self-consistent: the data section starts inside the
//     file at the declared alignment, every tensor's bytes lie inside the file and
//     match its shape, and every key and tensor name is found again by its lookup;
//   - accepted hyper-parameters satisfy the bounds the forward pass sizes buffers by;
//   - an accepted vocabulary has ids in range everywhere it hands out ids (BOS, EOS,
//     UNK, end of generation, lookups by text, tokenize output).
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

using namespace skippy;

#define FUZZ_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "gguf_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, \
                         __LINE__);                                                       \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

void check_file(const gguf::file & f) {
    const size_t alignment = f.alignment();
    FUZZ_CHECK(alignment >= 1 && (alignment & (alignment - 1)) == 0);
    // The data section may start past the end only when there are no tensors to hold.
    FUZZ_CHECK(f.tensors().empty() || f.data_offset() <= f.size_bytes());
    for (const auto & [key, v] : f.metadata()) FUZZ_CHECK(f.find(key) == &v);
    for (const auto & t : f.tensors()) {
        FUZZ_CHECK(f.find_tensor(t.name) == &t);
        FUZZ_CHECK(!t.dims.empty() && t.dims.size() <= 4);
        for (int64_t d : t.dims) FUZZ_CHECK(d >= 1);
        FUZZ_CHECK(t.offset % alignment == 0);
        FUZZ_CHECK(t.offset <= f.size_bytes() - f.data_offset());
        FUZZ_CHECK(t.n_bytes <= f.size_bytes() - f.data_offset() - t.offset);
        FUZZ_CHECK(t.n_rows() >= 1);
    }
}

void check_hparams(const gguf::file & f) {
    auto hp = model_hparams::from_gguf(f);
    if (!hp.is_ok()) return;
    FUZZ_CHECK(hp->n_embd >= 1 && hp->n_layer >= 1 && hp->n_head >= 1 && hp->n_head_kv >= 1);
    FUZZ_CHECK(hp->n_ff >= 1 && hp->n_ctx_train >= 1 && hp->head_dim >= 1 && hp->n_vocab >= 1);
    FUZZ_CHECK(hp->n_head % hp->n_head_kv == 0);
    FUZZ_CHECK(static_cast<int64_t>(hp->n_head) * hp->head_dim <= int64_t{1} << 16);
    FUZZ_CHECK(hp->layer_kinds.size() == static_cast<size_t>(hp->n_layer));
    FUZZ_CHECK(hp->rope.n_rot >= 2 && hp->rope.n_rot % 2 == 0 && hp->rope.n_rot <= hp->head_dim);
    FUZZ_CHECK(hp->rms_eps > 0 && hp->rope.freq_base > 0);
    FUZZ_CHECK(hp->moe.n_expert_used <= hp->moe.n_expert || hp->moe.n_expert == 0);
}

void check_tokenizer(const gguf::file & f) {
    auto tok = tokenizer::from_gguf(f);
    if (!tok.is_ok()) return;
    const tokenizer & t = **tok;
    const int32_t n_vocab = t.n_vocab();
    FUZZ_CHECK(n_vocab >= 1);
    const auto in_range = [n_vocab](token_id id) { return id >= 0 && id < n_vocab; };
    for (token_id id : {t.bos(), t.eos(), t.unk()}) FUZZ_CHECK(id == -1 || in_range(id));
    FUZZ_CHECK(!t.add_bos_default() || t.bos() != -1);
    const auto & eog = t.end_of_generation_ids();
    FUZZ_CHECK(std::is_sorted(eog.begin(), eog.end()));
    for (token_id id : eog) FUZZ_CHECK(in_range(id) && t.is_end_of_generation(id));
    // The first tokens: every one is found again by its text (texts are unique), and
    // rendering never reads out of bounds. Bounded so a big vocabulary stays fast.
    const int32_t n_walk = std::min<int32_t>(n_vocab, 512);
    for (token_id id = 0; id < n_walk; ++id) {
        FUZZ_CHECK(t.find_token(t.token_text(id)) == id);
        (void)t.token_to_piece(id, true);
        (void)t.kind(id);
    }
    FUZZ_CHECK(t.token_text(n_vocab).empty() && t.token_to_piece(-1, true).empty());
    for (bool special : {false, true}) {
        for (token_id id : t.tokenize("Hello, world! <s></s><|im_end|> \xff\xfe 123", true, special)) {
            FUZZ_CHECK(in_range(id));
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    auto f = gguf::file::from_bytes(std::span<const uint8_t>(data, size));
    if (!f.is_ok()) {
        FUZZ_CHECK(!f.error().message().empty());
        return 0;
    }
    check_file(**f);
    check_hparams(**f);
    check_tokenizer(**f);
    return 0;
}
