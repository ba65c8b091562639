// The vocabulary as a byte trie (internal to src/grammar).
//
// Nodes are in preorder, so a node's subtree is the index range [v, sub_end) and its
// first child (if any) is v + 1, the next sibling of a child c is nodes[c].sub_end.
// Token ids sorted by their bytes (`order`) line up with the nodes: the tokens whose
// bytes start with node v's prefix are order[tok_begin, tok_end), those ending exactly
// at v come first, order[tok_begin, tok_here_end).
//
//   pieces "a" "ab" "b"      nodes: 0 root  1 'a'  2 'b' (under 'a')  3 'b'
//                            order: [a, ab, b]; node 1: tokens [0,2), here [0,1)
#pragma once

#include "grammar/grammar.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace skippy::grammar::detail {

struct bulk_set {
    uint64_t ascii[2] = {0, 0};  // the ASCII bytes below
    bool     non_ascii = false;  // some character below is not ASCII
};

struct trie_node {
    uint32_t sub_end = 0;
    uint32_t tok_begin = 0;
    uint32_t tok_here_end = 0;
    uint32_t tok_end = 0;
    // For a subtree big enough to be worth a bulk check, whose tokens all continue
    // with well-formed UTF-8 from a character boundary here: index into bulk_sets of
    // the bytes below this node (not its own); else -1.
    int32_t  bulk = -1;
    uint8_t  byte = 0;
};

struct trie_data {
    std::vector<std::string>             pieces;
    std::vector<trie_node>               nodes;
    std::vector<token_id>                order;
    std::vector<bulk_set>                bulk_sets;
    std::vector<token_id>                end_of_generation;  // ascending, unique
    std::vector<uint8_t>                 is_end_of_generation;
    uint64_t                             serial = 0;
};

// Subtrees with at least this many tokens below the node get a bulk set.
constexpr uint32_t trie_bulk_min_tokens = 4;

}  // namespace skippy::grammar::detail
