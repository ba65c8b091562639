// Building the vocabulary trie, and the token mask.
#include "grammar/grammar.h"
#include "grammar/trie_data.h"
#include "grammar/utf8.h"

#include <algorithm>
#include <atomic>
#include <bit>

namespace skippy::grammar {

namespace {

using namespace detail::utf8;

std::atomic<uint64_t> next_trie_serial{1};

}  // namespace

result<token_trie_ptr> token_trie::build(std::vector<std::string> pieces,
                                         const std::vector<token_id> & end_of_generation_ids) {
    if (pieces.size() > size_t(INT32_MAX)) return make_error(error_code::invalid_argument, "vocabulary too large");
    auto d = std::make_unique<detail::trie_data>();
    const auto n_vocab = token_id(pieces.size());
    d->is_end_of_generation.assign(pieces.size(), 0);
    for (token_id id : end_of_generation_ids) {
        if (id < 0 || id >= n_vocab) {
            return make_error(error_code::invalid_argument, "end-of-generation id " + std::to_string(id) +
                                                                " outside the vocabulary of " + std::to_string(n_vocab));
        }
        d->is_end_of_generation[size_t(id)] = 1;
    }
    for (token_id id = 0; id < n_vocab; ++id) {
        if (d->is_end_of_generation[size_t(id)]) d->end_of_generation.push_back(id);
        else if (!pieces[size_t(id)].empty()) d->order.push_back(id);
    }
    d->pieces = std::move(pieces);
    const auto & p = d->pieces;
    std::stable_sort(d->order.begin(), d->order.end(), [&](token_id a, token_id b) { return p[size_t(a)] < p[size_t(b)]; });

    // Preorder construction without recursion (pieces may be long). A frame is a node
    // whose children are still being made from order[cursor, end).
    struct frame {
        uint32_t node, depth, cursor, end;
        uint64_t below[2];
        bool     below_non_ascii;
        uint8_t  utf8_ok;  // bit s: from decoder state s here, every token below is well-formed
    };
    std::vector<frame> stack;
    auto open_node = [&](uint8_t byte, uint32_t depth, uint32_t begin, uint32_t end) {
        auto v = uint32_t(d->nodes.size());
        detail::trie_node n;
        n.byte = byte;
        n.tok_begin = begin;
        n.tok_end = end;
        uint32_t here = begin;
        while (here < end && p[size_t(d->order[here])].size() == depth) ++here;
        n.tok_here_end = here;
        d->nodes.push_back(n);
        stack.push_back({v, depth, here, end, {0, 0}, false, 0xFF});
    };
    open_node(0, 0, 0, uint32_t(d->order.size()));
    while (!stack.empty()) {
        frame & f = stack.back();
        if (f.cursor == f.end) {
            detail::trie_node & n = d->nodes[f.node];
            n.sub_end = uint32_t(d->nodes.size());
            if ((f.utf8_ok & (1u << at_boundary)) && n.tok_end - n.tok_here_end >= detail::trie_bulk_min_tokens) {
                n.bulk = int32_t(d->bulk_sets.size());
                d->bulk_sets.push_back({{f.below[0], f.below[1]}, f.below_non_ascii});
            }
            uint8_t  byte = n.byte;
            uint64_t below[2] = {f.below[0], f.below[1]};
            bool     non_ascii = f.below_non_ascii;
            uint8_t  ok = f.utf8_ok;
            uint32_t node = f.node;
            stack.pop_back();
            if (!stack.empty() && node != 0) {
                frame & parent = stack.back();
                parent.below[0] |= below[0];
                parent.below[1] |= below[1];
                parent.below_non_ascii |= non_ascii;
                if (byte < 128) parent.below[byte >> 6] |= uint64_t{1} << (byte & 63);
                else parent.below_non_ascii = true;
                for (uint8_t st = 0; st < n_utf8_states; ++st) {
                    uint8_t next = utf8_next(st, byte);
                    if (next == utf8_error || !(ok & (1u << next))) parent.utf8_ok &= uint8_t(~(1u << st));
                }
            }
            continue;
        }
        // The next child: the run of tokens sharing the byte at this depth.
        uint32_t depth = f.depth;
        uint32_t begin = f.cursor;
        auto     byte = uint8_t(p[size_t(d->order[begin])][depth]);
        uint32_t end = begin + 1;
        while (end < f.end && uint8_t(p[size_t(d->order[end])][depth]) == byte) ++end;
        f.cursor = end;
        open_node(byte, depth + 1, begin, end);
    }
    d->serial = next_trie_serial.fetch_add(1);
    return token_trie_ptr(std::make_shared<token_trie>(std::move(d)));
}

token_trie::token_trie(std::unique_ptr<detail::trie_data> data) : data_(std::move(data)) {}
token_trie::~token_trie() = default;

int32_t token_trie::n_vocab() const { return int32_t(data_->pieces.size()); }
std::string_view token_trie::piece(token_id id) const { return data_->pieces[size_t(id)]; }
bool token_trie::is_end_of_generation(token_id id) const {
    return id >= 0 && id < n_vocab() && data_->is_end_of_generation[size_t(id)];
}
size_t token_trie::n_nodes() const { return data_->nodes.size(); }
uint64_t token_trie::serial() const { return data_->serial; }

void token_mask::reset(int32_t n_vocab) {
    n_vocab_ = n_vocab < 0 ? 0 : n_vocab;
    words_.assign((size_t(n_vocab_) + 63) / 64, 0);
}

int32_t token_mask::count() const {
    int32_t n = 0;
    for (uint64_t w : words_) n += std::popcount(w);
    return n;
}

std::vector<token_id> token_mask::ids() const {
    std::vector<token_id> out;
    out.reserve(size_t(count()));
    for (size_t i = 0; i < words_.size(); ++i) {
        uint64_t w = words_[i];
        while (w) {
            out.push_back(token_id(i * 64 + size_t(std::countr_zero(w))));
            w &= w - 1;
        }
    }
    return out;
}

}  // namespace skippy::grammar
