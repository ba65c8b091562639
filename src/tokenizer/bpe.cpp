#include "tokenizer/bpe.h"

#include "base/escape.h"
#include "tokenizer/unicode.h"

#include <queue>

namespace skippy::tokenizer_detail {

namespace {

// A piece of the word being merged: [offset, offset + n_bytes), in a doubly linked list
// over the initial characters. n_bytes == 0 marks a piece merged into its left neighbour.
struct symbol {
    int    prev;
    int    next;
    size_t offset;
    size_t n_bytes;
};

struct bigram {
    int     left;
    int     right;
    int32_t rank;
    size_t  n_bytes;  // of the merged text; a mismatch later means a side has changed
};

// std::priority_queue keeps the "largest" on top: the lowest rank, and for equal ranks
// the leftmost pair.
struct bigram_order {
    bool operator()(const bigram & a, const bigram & b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

size_t bpe_tokenizer::merge_pair_hash::operator()(const merge_pair & p) const {
    const size_t h1 = std::hash<std::string_view>{}(p.left);
    const size_t h2 = std::hash<std::string_view>{}(p.right);
    return h1 ^ (h2 + 0x9e3779b97f4a7c15ull + (h1 << 6) + (h1 >> 2));
}

result<std::unique_ptr<tokenizer>> bpe_tokenizer::create(std::unique_ptr<const vocab> v) {
    const pre_style * style = find_pre_style(v->pre);
    if (style == nullptr) {
        return make_error(error_code::unsupported, "tokenizer.ggml.pre '" + escape_bytes(v->pre) + "' is not supported");
    }
    SKIPPY_ASSIGN_OR_RETURN(auto pre, pretokenizer::create(*style));
    return std::unique_ptr<tokenizer>(new bpe_tokenizer(std::move(v), std::move(pre)));
}

bpe_tokenizer::bpe_tokenizer(std::unique_ptr<const vocab> v, std::unique_ptr<pretokenizer> pre)
    : tokenizer(std::move(v)), pre_(std::move(pre)) {
    const auto & merges = vocabulary().merges;
    ranks_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string_view m = merges[rank];
        // Split at the first space after the first byte, as llama.cpp does (so a left
        // side may itself be a space); load_vocab refused merges without one.
        const size_t space = m.find(' ', 1);
        if (space == std::string_view::npos) continue;
        // emplace keeps the first (best) rank of a duplicated merge.
        ranks_.emplace(merge_pair{m.substr(0, space), m.substr(space + 1)}, static_cast<int32_t>(rank));
    }
}

int32_t bpe_tokenizer::merge_rank(std::string_view left, std::string_view right) const {
    const auto it = ranks_.find(merge_pair{left, right});
    return it == ranks_.end() ? -1 : it->second;
}

void bpe_tokenizer::encode_text(std::string_view text, bool /*after_special*/, std::vector<token_id> & out) const {
    const auto & v = vocabulary();

    // PCRE2 in UTF mode needs well-formed input; llama.cpp also turns each bad byte into
    // U+FFFD before splitting.
    std::string sanitized;
    if (!is_valid_utf8(text)) {
        sanitized = sanitize_utf8(text);
        text = sanitized;
    }
    std::vector<std::string_view> words;
    pre_->split(text, words);

    std::string         word;
    std::vector<symbol> symbols;
    std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
    for (std::string_view raw_word : words) {
        word.clear();
        for (char c : raw_word) word.append(gpt2_byte_to_utf8(static_cast<uint8_t>(c)));

        if (pre_->style().ignore_merges) {
            if (const token_id id = v.find(word); id >= 0) {
                out.push_back(id);
                continue;
            }
        }

        symbols.clear();
        for (size_t pos = 0; pos < word.size();) {
            const size_t n = std::min(utf8_lead_length(static_cast<uint8_t>(word[pos])), word.size() - pos);
            const int index = static_cast<int>(symbols.size());
            symbols.push_back({index - 1, pos + n == word.size() ? -1 : index + 1, pos, n});
            pos += n;
        }

        const std::string_view w = word;
        const auto try_add_bigram = [&](int left, int right) {
            if (left < 0 || right < 0) return;
            const symbol & l = symbols[left];
            const symbol & r = symbols[right];
            const int32_t rank = merge_rank(w.substr(l.offset, l.n_bytes), w.substr(r.offset, r.n_bytes));
            if (rank < 0) return;
            queue.push({left, right, rank, l.n_bytes + r.n_bytes});
        };
        for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

        while (!queue.empty()) {
            const bigram top = queue.top();
            queue.pop();
            symbol & left = symbols[top.left];
            symbol & right = symbols[top.right];
            // Stale entry: one side was merged away or grew since this pair was queued.
            // (A left symbol only grows by absorbing `right`, so equal lengths mean the
            // pair still spells the same two pieces.)
            if (left.n_bytes == 0 || right.n_bytes == 0 || left.n_bytes + right.n_bytes != top.n_bytes) continue;
            left.n_bytes += right.n_bytes;
            right.n_bytes = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = top.left;
            try_add_bigram(left.prev, top.left);
            try_add_bigram(top.left, left.next);
        }

        for (int i = 0; i != -1; i = symbols[i].next) {
            const std::string_view piece = w.substr(symbols[i].offset, symbols[i].n_bytes);
            const token_id id = v.find(piece);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // Only a broken vocabulary lacks a merged piece or an alphabet character;
            // llama.cpp then tries each byte of the spelling on its own and drops the
            // ones that are not tokens either.
            for (char c : piece) {
                if (const token_id byte_id = v.find(std::string_view(&c, 1)); byte_id >= 0) out.push_back(byte_id);
            }
        }
    }
}

}  // namespace skippy::tokenizer_detail
