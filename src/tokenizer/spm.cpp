#include "tokenizer/spm.h"

#include "tokenizer/unicode.h"

#include <cstdio>
#include <queue>

namespace skippy::tokenizer_detail {

namespace {

// A piece of the text being merged: [offset, offset + n_bytes), in a doubly linked list
// over the initial characters. n_bytes == 0 marks a piece merged into its left neighbour.
struct symbol {
    int    prev;
    int    next;
    size_t offset;
    size_t n_bytes;
};

struct bigram {
    int    left;
    int    right;
    float  score;
    size_t n_bytes;  // of the merged text; a mismatch later means a side has changed
};

// std::priority_queue keeps the "largest" on top: the highest score, and for equal
// scores the leftmost pair (llama.cpp's order, which the test vectors depend on).
struct bigram_order {
    bool operator()(const bigram & a, const bigram & b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

spm_tokenizer::spm_tokenizer(std::unique_ptr<const vocab> v) : tokenizer(std::move(v)) {
    for (int b = 0; b < 256; ++b) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
        token_id id = vocabulary().find(hex);
        if (id < 0) id = vocabulary().find(std::string(1, static_cast<char>(b)));
        if (id < 0) id = vocabulary().unk;
        byte_tokens_[b] = id;
    }
}

void spm_tokenizer::encode_text(std::string_view text, bool after_special, std::vector<token_id> & out) const {
    constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // U+2581
    const auto & v = vocabulary();

    std::string s;
    s.reserve(text.size() + 8);
    if (v.add_space_prefix && after_special) s.append(k_space_marker);
    for (char c : text) {
        if (c == ' ') {
            s.append(k_space_marker);
        } else {
            s.push_back(c);
        }
    }
    if (s.empty()) return;

    // Characters by their lead byte, unvalidated: invalid UTF-8 still ends up as bytes.
    std::vector<symbol> symbols;
    symbols.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const size_t n = std::min(utf8_lead_length(static_cast<uint8_t>(s[pos])), s.size() - pos);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({index - 1, pos + n == s.size() ? -1 : index + 1, pos, n});
        pos += n;
    }

    std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
    const auto try_add_bigram = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const size_t n_bytes = symbols[left].n_bytes + symbols[right].n_bytes;
        const token_id id = v.find(std::string_view(s).substr(symbols[left].offset, n_bytes));
        if (id < 0) return;
        queue.push({left, right, v.scores[id], n_bytes});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

    while (!queue.empty()) {
        const bigram top = queue.top();
        queue.pop();
        symbol & left = symbols[top.left];
        symbol & right = symbols[top.right];
        // Stale entry: one side was merged away or grew since this pair was queued.
        if (left.n_bytes == 0 || right.n_bytes == 0 || left.n_bytes + right.n_bytes != top.n_bytes) continue;
        left.n_bytes += right.n_bytes;
        right.n_bytes = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.left;
        try_add_bigram(left.prev, top.left);
        try_add_bigram(top.left, left.next);
    }

    // Every merged piece is a token (a pair is queued only if its text is one), so only
    // single characters can be missing from the vocabulary. llama.cpp's "resegment"
    // step therefore reduces to this lookup.
    for (int i = 0; i != -1; i = symbols[i].next) {
        const std::string_view piece = std::string_view(s).substr(symbols[i].offset, symbols[i].n_bytes);
        const token_id id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {
            const token_id byte_id = byte_tokens_[static_cast<uint8_t>(c)];
            if (byte_id >= 0) out.push_back(byte_id);
        }
    }
}

}  // namespace skippy::tokenizer_detail
