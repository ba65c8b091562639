// JSON schema → GBNF: the corpus's documents byte by byte, random constrained
// generation checked by an independent validator, the whitespace and shape policy, and
// the errors for what the converter refuses.
#include "grammar_test_util.h"
#include "random_generation.h"
#include "schema_corpus.h"
#include "schema_validator.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>

namespace skippy::grammar {
namespace {

using testing::matches;
using testing::must_compile;
using testing::ojson;
using testing::schema_corpus;
using testing::schema_validator;

grammar_ptr grammar_of(std::string_view schema_text, const json_schema_options & options = {}) {
    auto gbnf = gbnf_from_json_schema(std::string_view(schema_text), options);
    EXPECT_TRUE(gbnf.is_ok()) << gbnf.error().to_string() << "\n" << schema_text;
    if (!gbnf.is_ok()) return nullptr;
    return must_compile(*gbnf);
}

status schema_error(const char * schema_text, const json_schema_options & options = {}) {
    auto gbnf = gbnf_from_json_schema(std::string_view(schema_text), options);
    if (!gbnf.is_ok()) return gbnf.error();
    auto g = compile(*gbnf);
    return g.is_ok() ? status::ok() : g.error();
}

TEST(JsonSchemaCorpus, HasEnoughSchemas) {
    EXPECT_GE(schema_corpus().size(), 30u);
    std::set<std::string> names;
    for (const auto & c : schema_corpus()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

TEST(JsonSchemaCorpus, ValidDocumentsMatchAndInvalidOnesDoNot) {
    for (const auto & c : schema_corpus()) {
        SCOPED_TRACE(c.name);
        ojson schema = ojson::parse(c.schema);
        auto  g = grammar_of(c.schema);
        ASSERT_TRUE(g);
        schema_validator validator(schema);
        for (const std::string & doc : c.valid) {
            // The corpus itself: a valid document is valid JSON that validates.
            ojson value = ojson::parse(doc, nullptr, false);
            ASSERT_FALSE(value.is_discarded()) << doc;
            std::string why;
            ASSERT_TRUE(validator.validate(value, &why)) << doc << ": " << why;
            EXPECT_TRUE(matches(g, doc)) << doc;
        }
        for (const std::string & doc : c.invalid) {
            ojson value = ojson::parse(doc, nullptr, false);
            if (!value.is_discarded()) {
                ASSERT_FALSE(validator.validate(value)) << "the corpus calls valid " << doc << " invalid";
            }
            EXPECT_FALSE(matches(g, doc)) << doc;
        }
    }
}

// --- random constrained generation ---------------------------------------------------

// Single bytes, fragments of the corpus's documents, characters split across tokens,
// whitespace runs, a control token and an end-of-generation token.
std::vector<std::string> corpus_vocabulary() {
    std::set<std::string> pieces;
    for (int b = 1; b < 256; ++b) pieces.insert(std::string(1, char(b)));
    for (const auto & c : schema_corpus()) {
        for (const std::string & doc : c.valid) {
            std::string d = doc;
            for (size_t len = 2; len <= 6; ++len) {
                for (size_t i = 0; i + len <= d.size(); i += len - 1) pieces.insert(d.substr(i, len));
            }
        }
    }
    for (const char * p : {"  ", "\n", "\n  ", "\n    ", "é", "日本", "\xE6\x97", "\xA5", "😀", "\xF0\x9F", "\x98\x80",
                           "true", "false", "null", "\": \"", "\", \"", "\"}", "}]", "]}", "\": ", "\":"}) {
        pieces.insert(p);
    }
    std::vector<std::string> out(pieces.begin(), pieces.end());
    out.push_back("");  // control
    out.push_back("");  // end of generation (last)
    return out;
}

TEST(JsonSchemaGeneration, RandomAllowedTokensAlwaysMakeValidDocuments) {
    auto       pieces = corpus_vocabulary();
    const auto eos = token_id(pieces.size() - 1);
    auto       vocab_r = token_trie::build(pieces, {eos});
    ASSERT_TRUE(vocab_r.is_ok());
    const token_trie & vocab = **vocab_r;

    std::mt19937 rng(20240615);
    size_t       n_docs = 0, n_unfinished = 0, n_mask_checks = 0;
    for (const auto & c : schema_corpus()) {
        SCOPED_TRACE(c.name);
        ojson schema = ojson::parse(c.schema);
        auto  g = grammar_of(c.schema);
        ASSERT_TRUE(g);
        schema_validator validator(schema);
        for (int run = 0; run < 12; ++run) {
            matcher            m(g);
            testing::generation gen;
            testing::generate(m, vocab, rng, {}, gen);
            if (::testing::Test::HasFatalFailure()) return;
            n_mask_checks += gen.n_mask_checks;
            if (!gen.ended) {
                ++n_unfinished;
                continue;
            }
            ++n_docs;
            ojson value = ojson::parse(gen.text, nullptr, false);
            ASSERT_FALSE(value.is_discarded()) << "not JSON: " << gen.text;
            std::string why;
            EXPECT_TRUE(validator.validate(value, &why)) << gen.text << "\n" << why;
        }
    }
    EXPECT_GT(n_docs, n_unfinished * 10) << n_docs << " documents, " << n_unfinished << " unfinished";
    EXPECT_GT(n_mask_checks, 100u);
    std::printf("generated %zu documents (%zu unfinished), %zu mask checks\n", n_docs, n_unfinished, n_mask_checks);
}

// --- the shape policy ------------------------------------------------------------------

TEST(JsonSchemaPolicy, WhitespaceIsOneSpaceOrANewlineWithIndentation) {
    auto g = grammar_of(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false})");
    EXPECT_TRUE(matches(g, R"({"a": 1})"));
    EXPECT_TRUE(matches(g, "{\n\t\"a\":\n    1\n}"));
    EXPECT_TRUE(matches(g, "{\"a\":1}\n"));                       // trailing whitespace once
    EXPECT_FALSE(matches(g, "{\"a\":  1}"));                      // two spaces
    EXPECT_FALSE(matches(g, " {\"a\":1}"));                       // leading whitespace
    EXPECT_FALSE(matches(g, "{\n" + std::string(21, ' ') + "\"a\":1}"));  // indentation past 20
    EXPECT_FALSE(matches(g, "{\"a\":1}\n\n"));
}

TEST(JsonSchemaPolicy, PropertiesInSchemaOrder) {
    auto g = grammar_of(R"({"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "integer"}},
                           "required": ["a", "z"], "additionalProperties": false})");
    EXPECT_TRUE(matches(g, R"({"z":1,"a":2})"));
    EXPECT_FALSE(matches(g, R"({"a":2,"z":1})"));
    // nlohmann::json sorts keys: that order is what a json (not ordered_json) gives.
    nlohmann::json sorted = nlohmann::json::parse(R"({"properties": {"z": {}, "a": {}}})");
    auto text = gbnf_from_json_schema(nlohmann::ordered_json(sorted));
    ASSERT_TRUE(text.is_ok());
    EXPECT_LT(text->find("\"\\\"a\\\"\""), text->find("\"\\\"z\\\"\""));
}

TEST(JsonSchemaPolicy, NumbersHaveBoundedDigits) {
    auto integer = grammar_of(R"({"type": "integer"})");
    EXPECT_TRUE(matches(integer, "1234567890123456"));
    EXPECT_FALSE(matches(integer, "12345678901234567"));
    auto number = grammar_of(R"({"type": "number"})");
    EXPECT_TRUE(matches(number, "1.1234567890123456e99"));
    EXPECT_FALSE(matches(number, "1.12345678901234567"));
    EXPECT_FALSE(matches(number, "1e123"));  // exponents of two digits: a double never overflows
}

TEST(JsonSchemaPolicy, EnumAndPatternStringsUseCanonicalEscapes) {
    auto e = grammar_of(R"({"enum": ["line\nbreak", "tab\there"]})");
    EXPECT_TRUE(matches(e, R"("line\nbreak")"));
    EXPECT_FALSE(matches(e, R"("line\u000abreak")"));
    auto p = grammar_of(R"({"type": "string", "pattern": "^a.b$"})");
    EXPECT_TRUE(matches(p, R"("a\"b")"));
    EXPECT_TRUE(matches(p, R"("a\u0001b")"));
    EXPECT_FALSE(matches(p, R"("a\u0022b")"));   // '"' as \u0022: not canonical
    EXPECT_FALSE(matches(p, R"("a\nb")"));       // '.' does not match a newline
}

TEST(JsonSchemaPolicy, SingleCharactersOfPatternsAndKeysUseCanonicalEscapes) {
    // A pattern's literal characters and the trie of known keys encode one character at
    // a time (a shorter path than a set's); quotes, backslashes and controls are escaped
    // the way a set's are, anything else is written raw.
    auto p = grammar_of(R"({"type": "string", "pattern": "^a\"\\\\é[\u0001\"]$"})");
    EXPECT_TRUE(matches(p, R"("a\"\\é\u0001")"));
    EXPECT_TRUE(matches(p, R"("a\"\\é\"")"));
    EXPECT_FALSE(matches(p, R"("a\u0022\\é\"")"));
    EXPECT_FALSE(matches(p, R"("a\"\\\u00e9\"")"));
    EXPECT_FALSE(matches(p, "\"a\\\"\\\\é\x01\""));  // a raw control character
    auto keys = grammar_of(
        R"({"type": "object", "properties": {"q\"k": {"type": "integer"}, "b\\": {"type": "integer"}},
            "additionalProperties": {"type": "integer"}})");
    EXPECT_TRUE(matches(keys, R"({"q\"k":1,"b\\":2,"q\"":3,"q\"kk":4,"b\\\\":5})"));
    EXPECT_FALSE(matches(keys, R"({"q\"k":1,"q\"k":2})"));
    EXPECT_FALSE(matches(keys, R"({"q\"k":1,"b\u005c":2})"));
}

TEST(JsonSchemaPolicy, ComplementsTakeEveryCharacterOnlyInItsCanonicalEncoding) {
    // A negated class, '.', and the characters after a known key's prefix hold every
    // character JSON escapes; those are written grouped (escape letters, \u00xx digits).
    // Every ASCII character, as nlohmann writes it, against its other encodings.
    struct one_char_grammar {
        grammar_ptr g;
        std::function<bool(uint32_t)> in_set;
    };
    std::vector<one_char_grammar> grammars = {
        {grammar_of(R"({"type": "string", "pattern": "^[^x]$"})"), [](uint32_t c) { return c != 'x'; }},
        {grammar_of(R"({"type": "string", "pattern": "^.$"})"), [](uint32_t c) { return c != '\n' && c != '\r'; }},
        {grammar_of(R"({"type": "string", "pattern": "^[^\"\\\\\t]$"})"),
         [](uint32_t c) { return c != '"' && c != '\\' && c != '\t'; }},
    };
    // Keys: after the known "k", any other one-character key.
    auto keys = grammar_of(R"({"type": "object", "properties": {"k": {"type": "integer"}},
                              "additionalProperties": {"type": "integer"}})");
    for (uint32_t c = 0; c < 0x80; ++c) {
        const std::string canonical = nlohmann::json(std::string(1, char(c))).dump();
        char lower[16], upper[16];
        std::snprintf(lower, sizeof lower, "\"\\u%04x\"", c);
        std::snprintf(upper, sizeof upper, "\"\\u%04X\"", c);
        for (size_t i = 0; i < grammars.size(); ++i) {
            EXPECT_EQ(matches(grammars[i].g, canonical), grammars[i].in_set(c)) << "grammar " << i << ", " << canonical;
            if (canonical != lower) EXPECT_FALSE(matches(grammars[i].g, lower)) << "grammar " << i << ", " << lower;
            if (canonical != upper) EXPECT_FALSE(matches(grammars[i].g, upper)) << "grammar " << i << ", " << upper;
        }
        EXPECT_EQ(matches(keys, "{\"k\":1," + canonical + ":1}"), c != 'k') << canonical;
        if (canonical != lower) EXPECT_FALSE(matches(keys, std::string("{\"k\":1,") + lower + ":1}")) << lower;
    }
}

TEST(JsonSchemaPolicy, ExtraPropertiesOnlyWhenAllowed) {
    // Absent additionalProperties: no extra properties are written.
    auto closed = grammar_of(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
    EXPECT_TRUE(matches(closed, R"({"a":1})"));
    EXPECT_FALSE(matches(closed, R"({"a":1,"b":2})"));
    auto open = grammar_of(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})");
    EXPECT_TRUE(matches(open, R"({"a":1,"b":[2],"ab":{}})"));
    EXPECT_FALSE(matches(open, R"({"a":1,"a":2})"));
    EXPECT_TRUE(matches(open, R"({"b":2})"));
}

TEST(JsonSchemaPolicy, JsonObjectModeIsAnyObject) {
    auto g = must_compile(gbnf_json_object());
    EXPECT_TRUE(matches(g, "{}"));
    EXPECT_TRUE(matches(g, R"({"a": [1, 2.5, "x", null, true, {"b": {}}]})"));
    EXPECT_TRUE(matches(g, R"({"\u00e9": 1})"));
    EXPECT_FALSE(matches(g, "[]"));
    EXPECT_FALSE(matches(g, "\"x\""));
    EXPECT_FALSE(matches(g, "{\"a\" 1}"));
}

TEST(JsonSchemaPolicy, OnlyRulesRootReachesAreWritten) {
    auto text = gbnf_from_json_schema(std::string_view(
        R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})"));
    ASSERT_TRUE(text.is_ok());
    // Each rule but root is referenced by some other rule's body.
    std::vector<std::string> names;
    for (size_t at = 0; (at = text->find(" ::= ", at)) != std::string::npos; at += 5) {
        size_t line = text->rfind('\n', at);
        names.push_back(text->substr(line == std::string::npos ? 0 : line + 1, at - (line == std::string::npos ? 0 : line + 1)));
    }
    ASSERT_GT(names.size(), 3u);
    for (const auto & n : names) {
        if (n == "root") continue;
        size_t uses = 0;
        for (size_t at = 0; (at = text->find(n, at)) != std::string::npos; at += n.size()) {
            bool whole = (at == 0 || std::string(" (\n").find((*text)[at - 1]) != std::string::npos) &&
                         (at + n.size() == text->size() || std::string(" )*+?{\n").find((*text)[at + n.size()]) != std::string::npos);
            uses += whole;
        }
        EXPECT_GE(uses, 2u) << n << " is written but never used\n" << *text;
    }
}

TEST(JsonSchemaPolicy, TheOutputIsDeterministic) {
    const auto & c = schema_corpus()[20];
    auto a = gbnf_from_json_schema(std::string_view(c.schema));
    auto b = gbnf_from_json_schema(std::string_view(c.schema));
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(*a, *b);
}

// --- what the converter refuses --------------------------------------------------------

void expect_refused(const char * schema, error_code code, std::string_view fragment,
                    const json_schema_options & options = {}) {
    status st = schema_error(schema, options);
    ASSERT_FALSE(st.is_ok()) << schema;
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.to_string() << "\nwanted: " << fragment;
}

TEST(JsonSchemaErrors, StrictModeNamesUnsupportedKeywords) {
    expect_refused(R"({"type": "object", "properties": {"a": {"type": "string", "contentSchema": {}, "foo": 1}}})",
                   error_code::unsupported, "#/properties/a: keyword(s) 'contentSchema', 'foo' not supported");
    expect_refused(R"({"type": "array", "uniqueItems": true})", error_code::unsupported, "uniqueItems");
    expect_refused(R"({"type": "number", "minimum": 0})", error_code::unsupported, "'minimum' on a number");
    expect_refused(R"({"type": "string", "format": "email"})", error_code::unsupported, "format 'email'");
    expect_refused(R"({"type": "string", "pattern": "^(a)\\1$"})", error_code::unsupported, "escape '\\1'");
    expect_refused(R"j({"type": "string", "pattern": "(?=a)"})j", error_code::unsupported, "lookaround");
    expect_refused(R"({"type": "string", "pattern": "a\\b"})", error_code::unsupported, "word boundary");
    expect_refused(R"({"type": "string", "pattern": "a$b"})", error_code::unsupported, "'$' before the end");
    expect_refused(R"({"type": "string", "pattern": "a{2}+"})", error_code::unsupported, "quantifier after");
    expect_refused(R"({"type": "string", "pattern": "x", "minLength": 2})", error_code::unsupported, "pattern together");
    expect_refused(R"({"type": "object", "minProperties": 1})", error_code::unsupported, "'minProperties'");
    expect_refused(R"({"$ref": "https://example.com/s.json"})", error_code::unsupported, "not local");
    expect_refused(R"({"enum": ["a"], "minLength": 3})", error_code::unsupported, "beside enum");
}

TEST(JsonSchemaErrors, LaxModeIgnoresWhatItCannotEnforce) {
    json_schema_options lax;
    lax.strict = false;
    auto g = grammar_of(R"({"type": "object", "properties": {"e": {"type": "string", "format": "email", "foo": 1},
                            "n": {"type": "number", "minimum": 0}, "p": {"type": "string", "pattern": "\\bx"},
                            "u": {"type": "array", "uniqueItems": true}},
                          "required": ["e", "n", "p", "u"], "minProperties": 1})",
                        lax);
    EXPECT_TRUE(matches(g, R"({"e":"not an email","n":-1,"p":"y","u":[1,1]})"));
    EXPECT_FALSE(matches(g, R"({"e":1,"n":-1,"p":"y","u":[1,1]})"));  // what it can enforce, it does
}

TEST(JsonSchemaErrors, MalformedSchemasAreInvalid) {
    expect_refused("[1, 2]", error_code::invalid_argument, "must be an object or a boolean");
    expect_refused("not json", error_code::invalid_argument, "not valid JSON");
    expect_refused(R"({"type": "strin"})", error_code::invalid_argument, "unknown type 'strin'");
    expect_refused(R"({"type": 5})", error_code::invalid_argument, "'type' must be");
    expect_refused(R"({"enum": []})", error_code::invalid_argument, "non-empty");
    expect_refused(R"({"type": "string", "enum": [1, 2]})", error_code::invalid_argument, "no enum/const value");
    expect_refused(R"({"$ref": "#/$defs/missing"})", error_code::invalid_argument, "points at nothing");
    expect_refused(R"({"type": "array", "minItems": 3, "maxItems": 2})", error_code::invalid_argument, "minItems");
    expect_refused(R"({"type": "integer", "minimum": 5, "maximum": 4})", error_code::invalid_argument, "no integer");
    expect_refused(R"({"type": "string", "minLength": -1})", error_code::invalid_argument, "non-negative");
    expect_refused(R"({"type": "object", "required": ["x"], "additionalProperties": false})",
                   error_code::invalid_argument, "required property 'x'");
    expect_refused(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", error_code::invalid_argument, "disjoint");
    expect_refused(R"({"properties": {"a": false}, "required": ["a"]})", error_code::invalid_argument, "schema false");
    expect_refused(R"({"type": "string", "pattern": "[z-a]"})", error_code::invalid_argument, "reversed");
}

TEST(JsonSchemaErrors, SelfReferenceWithoutProgressIsLeftRecursion) {
    expect_refused(R"({"$ref": "#"})", error_code::invalid_argument, "matches no string");
    expect_refused(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", error_code::invalid_argument, "left recursion");
}

TEST(JsonSchemaErrors, DeepSchemasHitTheDepthLimit) {
    std::string deep;
    for (int i = 0; i < 200; ++i) deep += R"({"type": "array", "items": )";
    deep += "{}";
    for (int i = 0; i < 200; ++i) deep += "}";
    expect_refused(deep.c_str(), error_code::invalid_argument, "nested deeper");
    json_schema_options tight;
    tight.max_depth = 2;
    expect_refused(R"({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {}}}})",
                   error_code::invalid_argument, "nested deeper", tight);
}

TEST(JsonSchemaErrors, CountsAboveTheRepetitionLimit) {
    expect_refused(R"({"type": "array", "minItems": 20000})", error_code::unsupported, "minItems above 10000");
    expect_refused(R"({"type": "string", "maxLength": 20000})", error_code::unsupported, "maxLength above 10000");
    json_schema_options lax;
    lax.strict = false;
    auto g = grammar_of(R"({"type": "string", "maxLength": 20000})", lax);
    EXPECT_TRUE(matches(g, "\"" + std::string(300, 'x') + "\""));
}

TEST(JsonSchemaErrors, MergedCopiesCannotMultiplyWithoutBound) {
    // Each level refers twice to the next with a sibling keyword, so each reference is
    // visited as a merged copy: 2^40 visits without a bound.
    std::string schema = R"({"$ref": "#/$defs/d0", "$defs": {)";
    for (int i = 0; i < 40; ++i) {
        std::string next = "#/$defs/d" + std::to_string(i + 1);
        schema += "\"d" + std::to_string(i) + "\": {\"anyOf\": [{\"$ref\": \"" + next + "\", \"type\": \"object\"}, {\"$ref\": \"" +
                  next + "\", \"type\": \"object\", \"title\": \"b\"}]}, ";
    }
    schema += R"("d40": {"type": "object"}}})";
    expect_refused(schema.c_str(), error_code::invalid_argument, "expansions");
}

TEST(JsonSchemaErrors, RuleCountIsBounded) {
    json_schema_options small;
    small.max_rules = 10;
    std::string schema = R"({"type": "object", "properties": {)";
    for (int i = 0; i < 30; ++i) schema += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\": {\"type\": \"integer\", \"minimum\": " + std::to_string(i) + "}";
    schema += "}}";
    expect_refused(schema.c_str(), error_code::invalid_argument, "rules", small);
}

// --- integer ranges against a brute force ----------------------------------------------

TEST(JsonSchemaIntegers, RangesMatchExactlyTheirIntegers) {
    const std::pair<int, int> ranges[] = {{0, 0}, {-3, 3}, {7, 93}, {10, 1000}, {-1000, -10}, {99, 101}, {-250, 3050},
                                          {1, 9}, {100, 199}, {123, 4567}};
    for (auto [lo, hi] : ranges) {
        std::string schema = R"({"type": "integer", "minimum": )" + std::to_string(lo) + R"(, "maximum": )" +
                             std::to_string(hi) + "}";
        auto g = grammar_of(schema.c_str());
        ASSERT_TRUE(g);
        for (int v = lo - 60; v <= hi + 60; ++v) {
            ASSERT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << schema << " value " << v;
        }
        // No leading zeros, no "-0".
        EXPECT_FALSE(matches(g, "0" + std::to_string(std::abs(hi))));
        EXPECT_FALSE(matches(g, "-0"));
    }
}

TEST(JsonSchemaIntegers, OneSidedAndExtremeBounds) {
    auto at_least = grammar_of(R"({"type": "integer", "minimum": -42})");
    for (int v = -100; v <= 100; ++v) ASSERT_EQ(matches(at_least, std::to_string(v)), v >= -42) << v;
    EXPECT_TRUE(matches(at_least, "9999999999999999"));
    auto at_most = grammar_of(R"({"type": "integer", "maximum": 57})");
    for (int v = -100; v <= 100; ++v) ASSERT_EQ(matches(at_most, std::to_string(v)), v <= 57) << v;
    EXPECT_TRUE(matches(at_most, "-9999999999999999"));
    auto big = grammar_of(R"({"type": "integer", "minimum": 999999999999999990, "maximum": 1000000000000000000})");
    EXPECT_TRUE(matches(big, "999999999999999995"));
    EXPECT_TRUE(matches(big, "1000000000000000000"));
    EXPECT_FALSE(matches(big, "1000000000000000001"));
    auto fractional = grammar_of(R"({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 4.5})");
    EXPECT_FALSE(matches(fractional, "1"));
    EXPECT_TRUE(matches(fractional, "2"));
    EXPECT_TRUE(matches(fractional, "4"));
    EXPECT_FALSE(matches(fractional, "5"));
    auto draft4 = grammar_of(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})");
    EXPECT_FALSE(matches(draft4, "0"));
    EXPECT_TRUE(matches(draft4, "1"));
}

}  // namespace
}  // namespace skippy::grammar
