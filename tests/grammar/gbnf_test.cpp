// The GBNF parser and compiler: every construct, the errors with their positions, the
// limits, and the matcher's byte-level behaviour on small grammars.
#include "grammar_test_util.h"

#include <string>

namespace skippy::grammar {
namespace {

using testing::compile_error;
using testing::is_prefix;
using testing::matches;
using testing::must_compile;

TEST(GbnfSyntax, LiteralsSequencesAndAlternatives) {
    auto g = must_compile(R"(root ::= "ab" "c" | "x" | "")");
    EXPECT_TRUE(matches(g, "abc"));
    EXPECT_TRUE(matches(g, "x"));
    EXPECT_TRUE(matches(g, ""));
    EXPECT_FALSE(matches(g, "ab"));
    EXPECT_FALSE(matches(g, "abcx"));
    EXPECT_FALSE(matches(g, "y"));
}

TEST(GbnfSyntax, RuleReferencesInAnyOrder) {
    auto g = must_compile("root ::= greeting \" \" name\nname ::= \"bob\" | \"amy\"\ngreeting ::= \"hi\"\n");
    EXPECT_TRUE(matches(g, "hi bob"));
    EXPECT_TRUE(matches(g, "hi amy"));
    EXPECT_FALSE(matches(g, "hi tom"));
}

TEST(GbnfSyntax, GroupsNestAndRepeat) {
    auto g = must_compile(R"(root ::= ( "a" ( "b" | "c" ) )+ "." )");
    EXPECT_TRUE(matches(g, "ab."));
    EXPECT_TRUE(matches(g, "abacab."));
    EXPECT_FALSE(matches(g, "."));
    EXPECT_FALSE(matches(g, "aa."));
}

TEST(GbnfSyntax, StarPlusOptional) {
    auto star = must_compile(R"(root ::= "a"* "b")");
    EXPECT_TRUE(matches(star, "b"));
    EXPECT_TRUE(matches(star, "aaab"));
    auto plus = must_compile(R"(root ::= "a"+ "b")");
    EXPECT_FALSE(matches(plus, "b"));
    EXPECT_TRUE(matches(plus, "aab"));
    auto opt = must_compile(R"(root ::= "a"? "b")");
    EXPECT_TRUE(matches(opt, "b"));
    EXPECT_TRUE(matches(opt, "ab"));
    EXPECT_FALSE(matches(opt, "aab"));
}

TEST(GbnfSyntax, PostfixAppliesToTheWholeLiteral) {
    auto g = must_compile(R"(root ::= "ab"* "c")");
    EXPECT_TRUE(matches(g, "ababc"));
    EXPECT_FALSE(matches(g, "abbc"));
}

TEST(GbnfSyntax, BoundedRepetitions) {
    auto exact = must_compile(R"(root ::= [0-9]{3})");
    EXPECT_TRUE(matches(exact, "123"));
    EXPECT_FALSE(matches(exact, "12"));
    EXPECT_FALSE(matches(exact, "1234"));
    auto at_least = must_compile(R"(root ::= "x"{2,})");
    EXPECT_FALSE(matches(at_least, "x"));
    EXPECT_TRUE(matches(at_least, "xx"));
    EXPECT_TRUE(matches(at_least, "xxxxxxx"));
    auto range = must_compile(R"(root ::= "x"{1,3} "y"{0,2})");
    EXPECT_FALSE(matches(range, ""));
    EXPECT_TRUE(matches(range, "x"));
    EXPECT_TRUE(matches(range, "xxxyy"));
    EXPECT_FALSE(matches(range, "xxxx"));
    EXPECT_FALSE(matches(range, "xyyy"));
    auto zero = must_compile(R"(root ::= "a" "b"{0} "c"{ 0 , 0 })");
    EXPECT_TRUE(matches(zero, "a"));
    EXPECT_FALSE(matches(zero, "ab"));
}

TEST(GbnfSyntax, CharacterClasses) {
    auto g = must_compile(R"(root ::= [a-cx] [^a-z0-9] [-a] [a-])");
    EXPECT_TRUE(matches(g, "b!--"));
    EXPECT_TRUE(matches(g, "xZaa"));
    EXPECT_FALSE(matches(g, "da--"));
    EXPECT_FALSE(matches(g, "aa--"));
    EXPECT_FALSE(matches(g, "a5--"));
    auto neg = must_compile(R"(root ::= [^"]+)");
    EXPECT_TRUE(matches(neg, "h\xC3\xA9llo"));  // héllo: a negated class admits other code points
    EXPECT_FALSE(matches(neg, "a\"b"));
}

TEST(GbnfSyntax, AnyCharacter) {
    auto g = must_compile(R"(root ::= "<" . ">")");
    EXPECT_TRUE(matches(g, "<a>"));
    EXPECT_TRUE(matches(g, "<\xE2\x82\xAC>"));      // € (3 bytes)
    EXPECT_TRUE(matches(g, "<\xF0\x9F\x98\x80>"));  // 😀 (4 bytes)
    EXPECT_TRUE(matches(g, "<\n>"));
    EXPECT_FALSE(matches(g, "<>"));
    EXPECT_FALSE(matches(g, "<ab>"));
}

TEST(GbnfSyntax, Escapes) {
    auto g = must_compile(R"(root ::= "\n\t\r\\\"\[\]" "\x41" "\u00e9" "\U0001F600" [\x30-\x32] [\]])");
    EXPECT_TRUE(matches(g, "\n\t\r\\\"[]A\xC3\xA9\xF0\x9F\x98\x80" "1]"));
    EXPECT_FALSE(matches(g, "\n\t\r\\\"[]A\xC3\xA9\xF0\x9F\x98\x80" "3]"));
}

TEST(GbnfSyntax, RawUtf8InLiteralsAndClasses) {
    auto g = must_compile("root ::= \"日本\" [ä-ö]");
    EXPECT_TRUE(matches(g, "日本ö"));
    EXPECT_TRUE(matches(g, "日本ä"));
    EXPECT_FALSE(matches(g, "日本a"));
}

TEST(GbnfSyntax, CommentsAndLayout) {
    auto g = must_compile(R"(# leading comment
root ::= # after the arrow
    item   # trailing
  ( "," item )*   # the alternatives may continue on the next line
  | "none"

item ::= [a-z]+   # a word
)");
    EXPECT_TRUE(matches(g, "a,bc,d"));
    EXPECT_TRUE(matches(g, "none"));
    EXPECT_FALSE(matches(g, "a,"));
}

TEST(GbnfSyntax, NamesWithDashesDigitsAndUnderscores) {
    auto g = must_compile("root ::= a-1 b_2\na-1 ::= \"x\"\nb_2 ::= \"y\"");
    EXPECT_TRUE(matches(g, "xy"));
}

TEST(GbnfSyntax, RecursionThatIsNotLeftRecursion) {
    auto g = must_compile(R"g(root ::= "(" root ")" | "x")g");
    EXPECT_TRUE(matches(g, "x"));
    EXPECT_TRUE(matches(g, "(((x)))"));
    EXPECT_FALSE(matches(g, "((x)"));
    auto right = must_compile(R"(root ::= "a" root | "")");
    EXPECT_TRUE(matches(right, std::string(5000, 'a')));
}

TEST(GbnfSyntax, AmbiguousGrammarsStillMatch) {
    // Two ways to read "aa": the matcher keeps both stacks.
    auto g = must_compile(R"(root ::= x x
x ::= "a" | "aa" | "")");
    EXPECT_TRUE(matches(g, ""));
    EXPECT_TRUE(matches(g, "aaa"));
    EXPECT_TRUE(matches(g, "aaaa"));
    EXPECT_FALSE(matches(g, "aaaaa"));
}

TEST(GbnfSyntax, AlternativesThatCanNeverMatchAreDropped) {
    // `dead` derives no finite string, so "a" dead must not let "a" through.
    auto g = must_compile(R"(root ::= "a" dead | "b"
dead ::= "x" dead)");
    EXPECT_TRUE(matches(g, "b"));
    EXPECT_FALSE(is_prefix(g, "a"));
    auto empty_class = must_compile(R"(root ::= "a" [] | "c")");
    EXPECT_FALSE(is_prefix(empty_class, "a"));
    EXPECT_TRUE(matches(empty_class, "c"));
}

// --- errors -------------------------------------------------------------------------

void expect_error(std::string_view gbnf, std::string_view fragment) {
    status st = compile_error(gbnf);
    ASSERT_FALSE(st.is_ok()) << "compiled: " << gbnf;
    EXPECT_EQ(st.code(), error_code::invalid_argument) << st.to_string();
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.to_string() << "\nwanted: " << fragment;
}

TEST(GbnfErrors, SyntaxErrorsCarryLineAndColumn) {
    expect_error("root ::= \"a\"\nfoo := \"b\"", "2:5: unexpected ':'");
    expect_error("foo \"b\"", "1:5: expected '::='");
    expect_error("root ::= \"abc", "1:10: string literal is never closed");
    expect_error("root ::= [abc", "1:10: character class is never closed");
    expect_error("root ::= ( \"a\" ", "1:10: '(' is never closed");
    expect_error("root ::= \"a\" )", "1:14: unmatched ')'");
    expect_error("root ::= * \"a\"", "1:10: '*' has nothing to repeat");
    expect_error("root ::= \"\\q\"", "1:11: unknown escape '\\q'");
    expect_error("root ::= \"\\x4\"", "needs 2 hex digits");
    expect_error("root ::= \"\\U00110000\"", "above U+10FFFF");
    expect_error("root ::= \"\\uD800\"", "surrogate");
    expect_error("root ::= [z-a]", "1:11: character range is reversed");
    expect_error("root ::= \"a\"{3,2}", "n < m");
    expect_error("root ::= \"a\"{x}", "expected a number");
    expect_error("root ::= \"a\"{2", "expected '}'");
    expect_error("root ::= <[12]>", "token references");
    expect_error("root ::= \"\xC3\"", "invalid UTF-8");
    expect_error(" ::= \"a\"", "1:2: expected a rule name");
}

TEST(GbnfErrors, RuleErrors) {
    expect_error("root ::= missing", "1:10: rule 'missing' is never defined");
    expect_error("start ::= \"a\"", "no 'root' rule");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "2:1: rule 'root' is defined twice");
    expect_error("root ::= \"a\" root", "matches no string");
    expect_error("", "no 'root' rule");
}

TEST(GbnfErrors, LeftRecursionIsRefusedNamingTheCycle) {
    expect_error("root ::= root \"a\" | \"b\"", "left recursion");
    expect_error("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a", "'a' -> 'b' -> 'a'");
    // Through something that may be empty.
    expect_error("root ::= opt root \"x\" | \"y\"\nopt ::= \"\" | \"z\"", "left recursion");
    // A repetition of something that may match nothing would loop the same way.
    expect_error("root ::= ( \"a\"? )*", "left recursion");
}

TEST(GbnfErrors, LimitsAreErrorsNotAllocations) {
    grammar_limits limits;
    limits.max_text_bytes = 16;
    EXPECT_NE(compile_error("root ::= \"aaaaaaaaaaaaaaaaaaaaaaa\"", limits).message().find("bytes"), std::string::npos);

    limits = {};
    limits.max_nesting_depth = 3;
    EXPECT_TRUE(compile_error("root ::= (((\"a\")))", limits).is_ok());
    EXPECT_NE(compile_error("root ::= ((((\"a\"))))", limits).message().find("nested deeper"), std::string::npos);

    limits = {};
    EXPECT_NE(compile_error("root ::= \"a\"{10001}").message().find("repetition count"), std::string::npos);
    EXPECT_NE(compile_error("root ::= \"a\"{99999999999999999999}").message().find("repetition count"),
              std::string::npos);

    limits.max_symbols = 1000;
    EXPECT_NE(compile_error("root ::= \"a\"{600} \"b\"{600}", limits).message().find("elements"), std::string::npos);
    // Nested repetitions repeat a reference to the inner rule: they stay small.
    EXPECT_TRUE(compile_error("root ::= ( \"a\"{100} ){100}", limits).is_ok());
    limits = {};
    limits.max_rules = 50;
    EXPECT_NE(compile_error("root ::= \"a\"{0,100}", limits).message().find("rules"), std::string::npos);

    // Deep nesting in the default limits: an error, not a stack overflow.
    std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    EXPECT_FALSE(compile_error(deep).is_ok());
}

TEST(GbnfErrors, RepetitionsMultiplyWithinTheLimits) {
    // 10 x 10 x 10 copies: fine under the default limits, and it matches exactly.
    auto g = must_compile(R"(root ::= ( ( "a"{10} ){10} ){10})");
    EXPECT_TRUE(matches(g, std::string(1000, 'a')));
    EXPECT_FALSE(matches(g, std::string(999, 'a')));
}

// --- the matcher on bytes ------------------------------------------------------------

TEST(Matcher, PartialCharactersCarryAcrossCalls) {
    auto g = must_compile(R"(root ::= "é" "€" "😀")");
    matcher m(g);
    std::string text = "é€😀";
    // Every split of the bytes into two calls.
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        matcher mm(g);
        ASSERT_TRUE(mm.advance(text.substr(0, cut)).is_ok()) << cut;
        EXPECT_EQ(mm.can_end(), cut == text.size()) << cut;
        ASSERT_TRUE(mm.advance(text.substr(cut)).is_ok()) << cut;
        EXPECT_TRUE(mm.can_end());
    }
}

TEST(Matcher, APartialCharacterMustBeAbleToBecomeAllowed) {
    auto g = must_compile(R"(root ::= [a-z] | "é")");
    matcher m(g);
    EXPECT_TRUE(m.accepts("\xC3"));       // may become é
    EXPECT_FALSE(m.accepts("\xC4"));      // U+0100..U+013F: none allowed
    EXPECT_FALSE(m.accepts("\xE2"));      // 3-byte characters: none allowed
    EXPECT_FALSE(m.accepts("\xC3\xA8"));  // è
    EXPECT_TRUE(m.accepts("\xC3\xA9"));
}

TEST(Matcher, InvalidUtf8IsNeverAccepted) {
    auto g = must_compile("root ::= .*");
    matcher m(g);
    EXPECT_TRUE(m.accepts("abc\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
    EXPECT_FALSE(m.accepts("\x80"));              // stray continuation byte
    EXPECT_FALSE(m.accepts("\xC0\xAF"));          // overlong '/'
    EXPECT_FALSE(m.accepts("\xC1"));              // only ever overlong
    EXPECT_FALSE(m.accepts("\xE0\x80"));          // overlong 3-byte start
    EXPECT_FALSE(m.accepts("\xED\xA0\x80"));      // surrogate U+D800
    EXPECT_FALSE(m.accepts("\xF4\x90\x80\x80"));  // above U+10FFFF
    EXPECT_FALSE(m.accepts("\xF5"));
    EXPECT_FALSE(m.accepts("\xFF"));
    EXPECT_FALSE(m.accepts("\xC3\x41"));          // a lead byte followed by ASCII
    EXPECT_TRUE(m.accepts("\xF4\x8F\xBF\xBF"));   // U+10FFFF itself
}

TEST(Matcher, CanEndAndIsDone) {
    auto g = must_compile(R"(root ::= "a" "b"?)");
    matcher m(g);
    EXPECT_FALSE(m.can_end());
    ASSERT_TRUE(m.advance("a").is_ok());
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.is_done());  // "b" may still come
    ASSERT_TRUE(m.advance("b").is_ok());
    EXPECT_TRUE(m.is_done());
    EXPECT_FALSE(m.accepts("b"));
}

TEST(Matcher, ARejectedAdvanceLeavesTheStateAlone) {
    auto g = must_compile(R"(root ::= "abc")");
    matcher m(g);
    ASSERT_TRUE(m.advance("a").is_ok());
    status st = m.advance("bx");
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_TRUE(m.error().is_ok());  // not a failure of the matcher
    EXPECT_TRUE(m.advance("bc").is_ok());
    EXPECT_TRUE(m.can_end());
    m.reset();
    EXPECT_FALSE(m.can_end());
    EXPECT_TRUE(m.accepts("abc"));
}

TEST(Matcher, TooManyStacksFailsTheMatcher) {
    // Each 'a' may start or continue any of many overlapping readings.
    auto g = must_compile(R"(root ::= x*
x ::= "a" | "aa" | "aaa" | "a" x "b")");
    matcher_limits limits;
    limits.max_stacks = 16;
    matcher m(g, limits);
    status st = m.advance(std::string(40, 'a'));
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("parse stacks"), std::string::npos) << st.to_string();
    EXPECT_FALSE(m.error().is_ok());
    EXPECT_FALSE(m.accepts(""));
    EXPECT_FALSE(m.advance("").is_ok());
    m.reset();
    EXPECT_TRUE(m.error().is_ok());
    EXPECT_TRUE(m.advance("a").is_ok());
}

TEST(Matcher, AStartThatHitsALimitFailsUntilReset) {
    // 64 alternatives of root at once, with room for only 8 stacks.
    std::string text = "root ::= x\nx ::= [a-z]";
    for (int i = 0; i < 63; ++i) text += " | \"" + std::string(1, char('A' + i % 26)) + std::to_string(i) + "\"";
    auto           g = must_compile(text);
    matcher_limits limits;
    limits.max_stacks = 8;
    matcher m(g, limits);
    EXPECT_FALSE(m.error().is_ok());
    EXPECT_FALSE(m.accepts("a"));
    token_mask mask;
    auto       vocab = token_trie::build({"a"}, {});
    ASSERT_TRUE(vocab.is_ok());
    EXPECT_FALSE(m.allowed_tokens(**vocab, mask).is_ok());
    m.reset();  // the same limits fail again: never a silently dead matcher
    EXPECT_FALSE(m.error().is_ok());
    EXPECT_FALSE(m.allowed_tokens(**vocab, mask).is_ok());
}

TEST(Matcher, TheWorkLimitStopsAnExpensiveCall) {
    auto g = must_compile(R"(root ::= x*
x ::= "a" | "aa" | "a" x "b")");
    matcher_limits limits;
    limits.max_work_per_call = 50;
    matcher m(g, limits);
    status st = m.advance(std::string(200, 'a'));
    EXPECT_EQ(st.code(), error_code::invalid_argument);
    EXPECT_NE(st.message().find("expansion steps"), std::string::npos) << st.to_string();
}

TEST(Matcher, ATinyMemoBudgetCompactsButGivesTheSameAnswers) {
    auto g = must_compile(R"(root ::= item ( "," item )*
item ::= "[" ( item ( "," item )* )? "]" | [a-z]+)");
    matcher_limits tiny;
    tiny.memo_budget_bytes = 16 << 10;
    matcher small(g, tiny);
    matcher big(g);
    std::string text = "[a,[bc,[d]],[[[[e]]]],f],[[],[g,h]]";
    for (size_t i = 0; i < text.size(); ++i) {
        std::string_view c(&text[i], 1);
        for (std::string_view probe : {"[", "]", ",", "x", "]]", ",[", "[]"}) {
            EXPECT_EQ(small.accepts(probe), big.accepts(probe)) << i << " " << probe;
        }
        ASSERT_TRUE(small.advance(c).is_ok()) << i << " " << small.error().to_string();
        ASSERT_TRUE(big.advance(c).is_ok());
        EXPECT_EQ(small.can_end(), big.can_end());
    }
    EXPECT_TRUE(small.can_end());
    EXPECT_LT(small.memo_bytes(), big.memo_bytes() + (16 << 10));
}

TEST(Matcher, MovesKeepTheState) {
    auto g = must_compile(R"(root ::= "ab")");
    matcher m(g);
    ASSERT_TRUE(m.advance("a").is_ok());
    matcher moved = std::move(m);
    EXPECT_TRUE(moved.advance("b").is_ok());
    EXPECT_TRUE(moved.can_end());
}

}  // namespace
}  // namespace skippy::grammar
