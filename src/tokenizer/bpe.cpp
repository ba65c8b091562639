#include "tokenizer/bpe.h"

#include "base/escape.h"
#include "tokenizer/unicode.h"

#include <queue>

namespace skippy::tokenizer_detail {

namespace {

// A piece of the word being merged: [offset, offset + n_bytes), in a doubly linked list
// over the initial characters. n_bytes == 0 marks a piece merged into its left neighbour.
struct bpe_symbol {
    int      prev;
    int      next;
    size_t   offset;
    size_t   n_bytes;
    token_id id;  // the piece's token, or -1 (then it takes part in no merge)
};

struct bpe_bigram {
    int      left;
    int      right;
    int32_t  rank;
    token_id merged;
    size_t   n_bytes;  // of the merged text; a mismatch later means a side has changed
};

uint64_t merge_key(token_id left, token_id right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

// splitmix64's finaliser: every key bit reaches the low bits the table uses.
uint64_t merge_hash(uint64_t key) {
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
    return key ^ (key >> 31);
}

// std::priority_queue keeps the "largest" on top: the lowest rank, and for equal ranks
// the leftmost pair.
struct bpe_bigram_order {
    bool operator()(const bpe_bigram & a, const bpe_bigram & b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

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
    size_t capacity = 16;
    while (capacity < 2 * merges.size()) capacity *= 2;
    merge_slots_.assign(capacity, merge_slot{});
    merge_mask_ = capacity - 1;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const bpe_merge & m = merges[rank];
        const uint64_t key = merge_key(m.left, m.right);
        for (uint64_t at = merge_hash(key) & merge_mask_;; at = (at + 1) & merge_mask_) {
            merge_slot & slot = merge_slots_[at];
            if (slot.value.rank < 0) {
                slot = {key, {static_cast<int32_t>(rank), m.merged}};
                break;
            }
            if (slot.key == key) break;  // a duplicated merge keeps its first (best) rank
        }
    }
}

bpe_tokenizer::ranked_merge bpe_tokenizer::find_merge(token_id left, token_id right) const {
    const uint64_t key = merge_key(left, right);
    for (uint64_t at = merge_hash(key) & merge_mask_;; at = (at + 1) & merge_mask_) {
        const merge_slot & slot = merge_slots_[at];
        if (slot.value.rank < 0 || slot.key == key) return slot.value;
    }
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
    std::vector<bpe_symbol> symbols;
    std::priority_queue<bpe_bigram, std::vector<bpe_bigram>, bpe_bigram_order> queue;
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
            symbols.push_back({index - 1, pos + n == word.size() ? -1 : index + 1, pos, n, v.find(std::string_view(word).substr(pos, n))});
            pos += n;
        }

        const std::string_view w = word;
        // Merges are found by the pieces' ids: a merge's pieces are tokens (load_vocab
        // checks), so a piece without a token takes part in none, as by text.
        const auto try_add_bigram = [&](int left, int right) {
            if (left < 0 || right < 0) return;
            const bpe_symbol & l = symbols[left];
            const bpe_symbol & r = symbols[right];
            if (l.id < 0 || r.id < 0) return;
            const ranked_merge m = find_merge(l.id, r.id);
            if (m.rank < 0) return;
            queue.push({left, right, m.rank, m.merged, l.n_bytes + r.n_bytes});
        };
        for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

        while (!queue.empty()) {
            const bpe_bigram top = queue.top();
            queue.pop();
            bpe_symbol & left = symbols[top.left];
            bpe_symbol & right = symbols[top.right];
            // Stale entry: one side was merged away or grew since this pair was queued.
            // (A left symbol only grows by absorbing `right`, so equal lengths mean the
            // pair still spells the same two pieces.)
            if (left.n_bytes == 0 || right.n_bytes == 0 || left.n_bytes + right.n_bytes != top.n_bytes) continue;
            left.n_bytes += right.n_bytes;
            left.id = top.merged;  // same pieces (checked above), so the same merge
            right.n_bytes = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = top.left;
            try_add_bigram(left.prev, top.left);
            try_add_bigram(top.left, left.next);
        }

        for (int i = 0; i != -1; i = symbols[i].next) {
            const std::string_view piece = w.substr(symbols[i].offset, symbols[i].n_bytes);
            if (symbols[i].id >= 0) {  // merged pieces are tokens; unmerged ones were looked up
                out.push_back(symbols[i].id);
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
