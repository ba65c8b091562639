#include "tokenizer/special_split.h"

namespace skippy::tokenizer_detail {

namespace {

// isspace() in the C locale, which is what llama.cpp's strip uses.
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

std::vector<text_fragment> split_special_tokens(std::string_view text, const vocab & v, bool parse_special) {
    std::vector<text_fragment> fragments;
    if (text.empty()) return fragments;
    fragments.push_back({-1, 0, text.size()});

    std::vector<text_fragment> next;
    for (token_id id : v.special_ids) {
        const token_kind kind = v.kinds[id];
        if (!parse_special && (kind == token_kind::control || kind == token_kind::unknown)) continue;
        const std::string & needle = v.texts[id];
        const bool lstrip = v.strip[id] & vocab::k_lstrip;
        const bool rstrip = v.strip[id] & vocab::k_rstrip;

        next.clear();
        bool changed = false;
        for (const text_fragment & fragment : fragments) {
            if (fragment.token >= 0 || fragment.length < needle.size()) {
                next.push_back(fragment);
                continue;
            }
            size_t begin = fragment.offset;
            size_t end = fragment.offset + fragment.length;
            while (begin < end) {
                const size_t match = text.substr(0, end).find(needle, begin);
                if (match == std::string_view::npos) break;
                changed = true;
                size_t left_end = match;
                if (lstrip) {
                    while (left_end > begin && is_ascii_space(text[left_end - 1])) --left_end;
                }
                if (left_end > begin) next.push_back({-1, begin, left_end - begin});
                next.push_back({id, 0, 0});
                begin = match + needle.size();
                if (rstrip) {
                    while (begin < end && is_ascii_space(text[begin])) ++begin;
                }
            }
            if (begin < end) next.push_back({-1, begin, end - begin});
        }
        if (changed) fragments.swap(next);
    }
    return fragments;
}

}  // namespace skippy::tokenizer_detail
