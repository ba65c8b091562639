// Token masks: the trie walk (with its memo, bulk subtrees and mask cache) must give
// exactly the per-token answer, at every step of random walks through grammars.
#include "grammar_test_util.h"

#include <random>
#include <set>
#include <string>
#include <vector>

namespace skippy::grammar {
namespace {

using testing::must_compile;

token_trie_ptr must_build(std::vector<std::string> pieces, std::vector<token_id> eog) {
    auto t = token_trie::build(std::move(pieces), eog);
    EXPECT_TRUE(t.is_ok()) << t.error().to_string();
    return t.is_ok() ? *t : nullptr;
}

std::vector<token_id> allowed(matcher & m, const token_trie & vocab) {
    token_mask mask;
    status     st = m.allowed_tokens(vocab, mask);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(mask.n_vocab(), vocab.n_vocab());
    return mask.ids();
}

TEST(TokenTrie, BuildsFromPiecesWithDuplicatesAndEmptyOnes) {
    auto t = must_build({"a", "ab", "", "b", "ab", "abc"}, {2});
    ASSERT_TRUE(t);
    EXPECT_EQ(t->n_vocab(), 6);
    EXPECT_EQ(t->piece(4), "ab");
    EXPECT_TRUE(t->is_end_of_generation(2));
    EXPECT_FALSE(t->is_end_of_generation(1));
    EXPECT_FALSE(t->is_end_of_generation(99));
    EXPECT_EQ(t->n_nodes(), 5u);  // root, a, ab, abc, b
}

TEST(TokenTrie, RefusesEndOfGenerationIdsOutsideTheVocabulary) {
    auto t = token_trie::build({"a", "b"}, {2});
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.error().code(), error_code::invalid_argument);
    EXPECT_FALSE(token_trie::build({"a"}, {-1}).is_ok());
}

TEST(TokenMask, AllowsExactlyTheTokensThatFit) {
    auto g = must_compile(R"(root ::= "ab" | "ac" | "b")");
    //                     0    1     2      3    4    5 (control)  6 (end)
    auto v = must_build({"a", "ab", "abc", "b", "c", "", ""}, {6});
    matcher m(g);
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{0, 1, 3}));
    ASSERT_TRUE(m.advance_token(*v, 0).is_ok());
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{3, 4}));  // "b" and "c"
    ASSERT_TRUE(m.advance_token(*v, 4).is_ok());
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{6}));     // only the end
    EXPECT_TRUE(m.is_done());                                   // nothing else may follow
    ASSERT_TRUE(m.advance_token(*v, 6).is_ok());
    EXPECT_TRUE(m.is_done());
    EXPECT_TRUE(allowed(m, *v).empty());
    EXPECT_FALSE(m.advance_token(*v, 3).is_ok());
}

TEST(TokenMask, EndOfGenerationOnlyWhereTheGrammarMayEnd) {
    auto g = must_compile(R"(root ::= "a"+)");
    auto v = must_build({"a", "aa", "<eos>", "<eot>"}, {2, 3});
    matcher m(g);
    EXPECT_FALSE(m.accepts_token(*v, 2));
    EXPECT_EQ(m.advance_token(*v, 2).code(), error_code::invalid_argument);
    ASSERT_TRUE(m.advance_token(*v, 1).is_ok());
    EXPECT_TRUE(m.accepts_token(*v, 2));
    EXPECT_TRUE(m.accepts_token(*v, 3));
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{0, 1, 2, 3}));
}

TEST(TokenMask, BadIdsAndEmptyPiecesAreRefused) {
    auto g = must_compile(R"(root ::= "a"*)");
    auto v = must_build({"a", ""}, {});
    matcher m(g);
    EXPECT_FALSE(m.accepts_token(*v, -1));
    EXPECT_FALSE(m.accepts_token(*v, 2));
    EXPECT_FALSE(m.accepts_token(*v, 1));
    EXPECT_EQ(m.advance_token(*v, 7).code(), error_code::invalid_argument);
    EXPECT_EQ(m.advance_token(*v, 1).code(), error_code::invalid_argument);
    EXPECT_TRUE(m.advance_token(*v, 0).is_ok());
}

TEST(TokenMask, TokensMaySplitCharacters) {
    auto g = must_compile(R"(root ::= "日" [a-z])");  // 日 = E6 97 A5
    auto v = must_build({"\xE6", "\x97", "\xA5", "\xE6\x97", "\x97\xA5", "\xA5q", "\xE6\x97\xA5", "q", "\xE7"}, {});
    matcher m(g);
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{0, 3, 6}));
    ASSERT_TRUE(m.advance_token(*v, 0).is_ok());
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{1, 4}));
    ASSERT_TRUE(m.advance_token(*v, 1).is_ok());
    EXPECT_EQ(allowed(m, *v), (std::vector<token_id>{2, 5}));
    ASSERT_TRUE(m.advance_token(*v, 5).is_ok());
    EXPECT_TRUE(m.can_end());
}

TEST(TokenMask, OneMatcherWithTwoVocabularies) {
    auto g = must_compile(R"(root ::= "x" "y")");
    auto a = must_build({"x", "y", "xy"}, {});
    auto b = must_build({"y", "x"}, {});
    matcher m(g);
    EXPECT_EQ(allowed(m, *a), (std::vector<token_id>{0, 2}));
    EXPECT_EQ(allowed(m, *b), (std::vector<token_id>{1}));  // not the cached mask of `a`
    EXPECT_EQ(allowed(m, *a), (std::vector<token_id>{0, 2}));
}

// --- property: mask == per-token check ---------------------------------------------

const char * const walk_grammars[] = {
    // JSON (any value), with our whitespace.
    R"(root ::= value
value ::= ( object | array | string | number | "true" | "false" | "null" ) ws
object ::= "{" ws ( string ws ":" ws value ( "," ws string ws ":" ws value )* )? "}"
array ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\/bfnrtu] )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,5} ) ( "." [0-9]{1,4} )?
ws ::= ( " " | "\n" [ ]{0,4} )?)",
    // Arithmetic with nesting.
    R"g(root ::= expr
expr ::= term ( [-+*/] term )*
term ::= [0-9]+ | "(" expr ")" | "-" term)g",
    // Non-ASCII classes and literals.
    R"(root ::= ( [α-ω]+ " " | "日本" | [\u4e00-\u4e0f] | "😀"{1,3} | [a-c] )* ".")",
    // Ambiguous alternatives.
    R"(root ::= ( "ab" | "a" | "b" | "abc" )* "!" ( "x"? "xy" )?)",
};

std::vector<std::string> random_vocabulary(std::mt19937 & rng) {
    std::vector<std::string> pieces;
    for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    const std::vector<std::string> fragments = {
        "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "  ", "true", "false", "null", "\":", "\",", "{\"",
        "\"}", "],", "},", "0", "12", "3.", ".5", "-1", "(", ")", "+", "*", "ab", "abc", "bc", "!", "x", "xy",
        "日本", "日", "本", "😀", "😀😀", "α", "βγ", "ω ", "\xE6\x97", "\xA5\xE6", "\xF0\x9F", "\x98\x80",
        "\\n", "\\\"", "\\u", "ab\"", "a\\", "\xC3\xA9", "\xCE",
    };
    pieces.insert(pieces.end(), fragments.begin(), fragments.end());
    // Plenty of ASCII words, most of them plain letters, so that big subtrees go
    // through the bulk check (and some do not, for having a quote or a comma inside).
    std::uniform_int_distribution<int> len(2, 7), letter(0, 25), pick(0, 99);
    for (int i = 0; i < 1500; ++i) {
        std::string w;
        int         n = len(rng);
        bool        plain = pick(rng) < 85;
        for (int k = 0; k < n; ++k) {
            int p = plain ? 0 : pick(rng);
            w += p < 60 ? char('a' + letter(rng)) : p < 75 ? char('0' + letter(rng) % 10) : p < 85 ? ' ' : p < 93 ? '"' : ',';
        }
        pieces.push_back(w);
    }
    // Words with non-ASCII characters, some cut inside a character, some ill-formed.
    const char * const chars[] = {"é", "ß", "日", "本", "😀", "я", "æ", "ð", "", "À¯"};
    for (int i = 0; i < 600; ++i) {
        std::string w(1, char('a' + letter(rng)));
        int         n = len(rng);
        for (int k = 0; k < n; ++k) {
            int p = pick(rng);
            if (p < 50) w += char('a' + letter(rng));
            else if (p < 97) w += chars[size_t(p) % 6];
            else w += chars[6 + size_t(p) % 4];
        }
        pieces.push_back(w);
    }
    pieces.push_back("");  // a control token
    pieces.push_back("");  // end of generation
    return pieces;
}

struct walk_config {
    const char *   name;
    matcher_limits limits;
};

TEST(TokenMaskProperty, MaskEqualsPerTokenCheckAlongRandomWalks) {
    std::mt19937 rng(1234);
    auto         pieces = random_vocabulary(rng);
    const auto   eos = token_id(pieces.size() - 1);
    auto         vocab = must_build(pieces, {eos});
    ASSERT_TRUE(vocab);

    matcher_limits tiny;
    tiny.memo_budget_bytes = 64 << 10;  // compacts often, also in the middle of walks
    matcher_limits no_cache;
    no_cache.max_cached_masks = 0;
    const walk_config configs[] = {{"default", {}}, {"tiny memo", tiny}, {"no mask cache", no_cache}};

    size_t   n_checked = 0;
    uint64_t n_bulk = 0, n_compactions = 0, n_cache_hits = 0;
    for (const char * text : walk_grammars) {
        auto g = must_compile(text);
        ASSERT_TRUE(g);
        for (int walk = 0; walk < 6; ++walk) {
            std::vector<matcher> ms;
            for (const auto & c : configs) ms.emplace_back(g, c.limits);
            for (int step = 0; step < 60; ++step) {
                token_mask mask;
                ASSERT_TRUE(ms[0].allowed_tokens(*vocab, mask).is_ok());
                for (size_t c = 1; c < ms.size(); ++c) {
                    token_mask other;
                    ASSERT_TRUE(ms[c].allowed_tokens(*vocab, other).is_ok()) << configs[c].name;
                    ASSERT_EQ(other.words(), mask.words()) << configs[c].name << " step " << step;
                }
                // Brute force: every token on its own.
                for (token_id id = 0; id < vocab->n_vocab(); ++id) {
                    ASSERT_EQ(mask.test(id), ms[0].accepts_token(*vocab, id))
                        << text << "\nstep " << step << " token " << id << " '" << vocab->piece(id) << "'";
                }
                ++n_checked;
                auto ids = mask.ids();
                ASSERT_FALSE(ids.empty()) << "a live state always has a way on";
                // Prefer going on; end now and then.
                token_id next = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
                if (mask.test(eos) && (step > 40 || rng() % 8 == 0)) next = eos;
                for (auto & m : ms) ASSERT_TRUE(m.advance_token(*vocab, next).is_ok());
                if (next == eos) break;
            }
            n_bulk += ms[0].stats().n_bulk_subtrees;
            n_compactions += ms[1].stats().n_compactions;
            n_cache_hits += ms[0].stats().n_mask_cache_hits;
        }
    }
    EXPECT_GT(n_checked, 50u);
    EXPECT_GT(n_bulk, 0u);        // the walks went through every path of the mask code
    EXPECT_GT(n_compactions, 0u);
    EXPECT_GT(n_cache_hits, 0u);
}

TEST(TokenMaskProperty, NonAsciiSubtreesAreAllowedWholeWhenEveryCharacterLoops) {
    auto g = must_compile(R"(root ::= "\"" [^"\\]* "\"")");
    // Words of letters and well-formed non-ASCII characters, some cut at the end.
    std::mt19937             rng(11);
    std::vector<std::string> pieces;
    for (int b = 1; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    const char * const chars[] = {"é", "ß", "日", "本", "😀", "я"};
    for (int i = 0; i < 2000; ++i) {
        std::string w(1, char('a' + rng() % 3));
        for (int k = 0, n = int(rng() % 6); k <= n; ++k) w += rng() % 2 ? std::string(1, char('a' + rng() % 26)) : chars[rng() % 6];
        if (rng() % 5 == 0) w.pop_back();  // now ends inside a character (or one letter shorter)
        pieces.push_back(w);
    }
    pieces.push_back("a\xC0\xAF");  // ill-formed
    auto    vocab = must_build(pieces, {});
    matcher m(g);
    ASSERT_TRUE(m.advance("\"").is_ok());
    token_mask mask;
    ASSERT_TRUE(m.allowed_tokens(*vocab, mask).is_ok());
    for (token_id id = 0; id < vocab->n_vocab(); ++id) ASSERT_EQ(mask.test(id), m.accepts_token(*vocab, id)) << id;
    EXPECT_GT(m.stats().n_bulk_subtrees, 20u);
    EXPECT_FALSE(mask.test(token_id(pieces.size() - 1)));
}

TEST(TokenMaskProperty, RepeatedStatesComeFromTheCacheWithTheSameAnswer) {
    auto g = must_compile(R"(root ::= "\"" [a-z ]* "\"")");
    std::mt19937 rng(7);
    auto         vocab = must_build(random_vocabulary(rng), {});
    matcher      m(g);
    ASSERT_TRUE(m.advance("\"").is_ok());
    token_mask first, again;
    ASSERT_TRUE(m.allowed_tokens(*vocab, first).is_ok());
    ASSERT_TRUE(m.advance("abc").is_ok());  // the same grammar state
    ASSERT_TRUE(m.allowed_tokens(*vocab, again).is_ok());
    EXPECT_EQ(first.words(), again.words());
    EXPECT_GT(first.count(), 500);
    EXPECT_EQ(m.stats().n_mask_cache_hits, 1u);
}

// A step that a limit stopped is not the grammar refusing the byte: after reset(),
// which clears the failure and keeps the memo, the matcher must answer as a fresh one
// does. json_schema_fuzzer found the opposite (an empty mask for a live state) once its
// two walks shared a matcher: the failed step's dead_state had been kept in a state's
// transition row.
TEST(TokenMask, AStepALimitStoppedIsNotRememberedAfterReset) {
    // The loop state gets a dense row of transitions once it has been stepped often
    // (the 'a' tokens); then '~' is first computed from it, and the 26 stacks after
    // it pass max_stacks. That step must not be remembered as "'~' refused": after
    // reset() the matcher either meets the limit again or allows '~'.
    grammar_ptr g = must_compile(R"(root ::= [a-z]* "~" t
t ::= [a] | [b] | [c] | [d] | [e] | [f] | [g] | [h] | [i] | [j] | [k] | [l] | [m] | [n] | [o] | [p] | [q] | [r] | [s] | [t] | [u] | [v] | [w] | [x] | [y] | [z]
)");
    ASSERT_TRUE(g);
    std::vector<std::string> pieces;
    for (int b = 0; b < 128; ++b) pieces.push_back(std::string(1, char(b)));
    pieces.push_back("");
    auto vocab = must_build(pieces, {token_id(pieces.size() - 1)});
    ASSERT_TRUE(vocab);
    matcher_limits limits;
    limits.max_stacks = 8;
    matcher    m(g, limits);
    token_mask mask;
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.advance_token(*vocab, token_id('a')).is_ok());
    EXPECT_FALSE(m.allowed_tokens(*vocab, mask).is_ok());  // '~': 26 stacks
    m.reset();
    if (m.allowed_tokens(*vocab, mask).is_ok()) {
        EXPECT_TRUE(mask.test(token_id('~')));
        EXPECT_TRUE(mask.test(token_id('q')));
    } else {
        EXPECT_FALSE(m.error().is_ok());
    }
}

TEST(TokenMask, AfterALimitAndResetTheMatcherAnswersAsAFreshOne) {
    const char * schema = R"({"t":"string","pattern":"^8888888              nlnnnnnnnnnnnnnn                )"
                          R"(                                sv\\S*\\S*[a::zr*[?\\S*\\[og)s?\\S*\\S*[a:zr*[og)?\\number*[og)s?\\S*[a:z]{1,3} "})";
    json_schema_options options;
    options.strict = false;
    auto gbnf = gbnf_from_json_schema(std::string_view(schema), options);
    ASSERT_TRUE(gbnf.is_ok()) << gbnf.error().to_string();
    grammar_ptr g = must_compile(*gbnf);
    ASSERT_TRUE(g);
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
    for (const char * p : {"ab", "\":", "{\"", "12", "  ", "\n", "é", "日本", "😀"}) pieces.push_back(p);
    pieces.push_back("");
    auto vocab = must_build(pieces, {token_id(pieces.size() - 1)});
    ASSERT_TRUE(vocab);
    matcher_limits limits;
    limits.max_stacks = 8;
    limits.max_work_per_call = 200000;
    limits.memo_budget_bytes = 1u << 20;
    limits.max_cached_masks = 4;

    int n_resets_after_a_limit = 0;
    for (uint32_t seed = 0; seed < 40; ++seed) {
        std::mt19937          rng(seed);
        matcher               m(g, limits);
        token_mask            mask;
        std::vector<token_id> taken;
        // Walk until a limit stops the matcher (or the grammar ends).
        for (int step = 0; step < 200 && m.error().is_ok(); ++step) {
            if (!m.allowed_tokens(*vocab, mask).is_ok()) break;
            std::vector<token_id> ids = mask.ids();
            ASSERT_FALSE(ids.empty());
            token_id pick = ids[rng() % ids.size()];
            if (vocab->is_end_of_generation(pick) || !m.advance_token(*vocab, pick).is_ok()) break;
            taken.push_back(pick);
        }
        if (m.error().is_ok()) continue;
        ++n_resets_after_a_limit;
        // The same tokens again, up to where the limit struck, against a matcher with
        // the default limits (which none of this reaches).
        m.reset();
        matcher    reference(g);
        token_mask reference_mask;
        for (size_t i = 0; i <= taken.size(); ++i) {
            ASSERT_TRUE(reference.allowed_tokens(*vocab, reference_mask).is_ok());
            if (!m.allowed_tokens(*vocab, mask).is_ok()) break;  // the limit again
            ASSERT_EQ(mask.ids(), reference_mask.ids()) << "seed " << seed << ", after " << i << " tokens";
            if (i == taken.size()) break;
            ASSERT_TRUE(reference.advance_token(*vocab, taken[i]).is_ok());
            ASSERT_TRUE(m.advance_token(*vocab, taken[i]).is_ok()) << "seed " << seed << ", token " << i;
        }
    }
    EXPECT_GT(n_resets_after_a_limit, 0) << "no walk hit a limit: the test checks nothing";
}

}  // namespace
}  // namespace skippy::grammar
