// GBNF text → parsed_grammar. Groups and repetitions become synthesized rules here, so
// that the matcher only ever sees terminals, rule references and alternative ends.
#include "grammar/parsed_grammar.h"
#include "grammar/utf8.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace skippy::grammar::detail {

std::string source_position(std::string_view source, size_t offset) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < offset && i < source.size(); ++i) {
        if (source[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return std::to_string(line) + ":" + std::to_string(col);
}

namespace {

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

using sequence = std::vector<symbol>;

class gbnf_parser {
public:
    gbnf_parser(std::string_view src, const grammar_limits & limits) : src_(src), limits_(limits) {}

    result<parsed_grammar> run() {
        if (src_.size() > limits_.max_text_bytes) {
            return make_error(error_code::invalid_argument,
                              "grammar is " + std::to_string(src_.size()) + " bytes, more than the limit of " +
                                  std::to_string(limits_.max_text_bytes));
        }
        skip_space();
        while (pos_ < src_.size()) {
            SKIPPY_TRY(parse_rule());
            skip_space();
        }
        if (!error_.is_ok()) return error_;
        return std::move(out_);
    }

private:
    std::string_view      src_;
    grammar_limits        limits_;
    size_t                pos_ = 0;
    parsed_grammar        out_;
    std::unordered_map<std::string, uint32_t> rule_ids_;
    std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_ids_;
    static constexpr uint32_t no_class = UINT32_MAX;
    std::array<uint32_t, 128> ascii_literal_class_ids_ = [] {
        std::array<uint32_t, 128> ids;
        ids.fill(no_class);
        return ids;
    }();
    size_t                n_symbols_ = 0;
    uint32_t              depth_ = 0;
    status                error_;

    status fail(size_t at, const std::string & what) const {
        return make_error(error_code::invalid_argument, "gbnf " + source_position(src_, at) + ": " + what);
    }

    bool at_end() const { return pos_ >= src_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

    // Spaces, tabs, newlines and # comments, from p: where they end. Newlines are plain
    // whitespace: a rule ends where the next `name ::=` starts (a superset of
    // llama.cpp's line rule).
    size_t space_end(size_t p) const {
        while (p < src_.size()) {
            char c = src_[p];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++p;
            } else if (c == '#') {
                while (p < src_.size() && src_[p] != '\n') ++p;
            } else {
                break;
            }
        }
        return p;
    }
    void skip_space() { pos_ = space_end(pos_); }

    std::string_view scan_name() {
        size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        return src_.substr(start, pos_ - start);
    }

    // True when the text at pos_ is `name ::=` (the start of the next rule).
    bool at_rule_start() const {
        size_t p = pos_;
        if (p >= src_.size() || !is_name_char(src_[p])) return false;
        while (p < src_.size() && is_name_char(src_[p])) ++p;
        p = space_end(p);
        return src_.substr(p, 3) == "::=";
    }

    status count_symbols(size_t n, size_t at) {
        if (n > limits_.max_symbols || n_symbols_ + n > limits_.max_symbols) {
            return fail(at, "grammar has more than " + std::to_string(limits_.max_symbols) + " elements");
        }
        n_symbols_ += n;
        return status::ok();
    }

    result<uint32_t> rule_id(std::string_view name, size_t at) {
        auto it = rule_ids_.find(std::string(name));
        if (it != rule_ids_.end()) return it->second;
        return new_rule(std::string(name), at, false);
    }

    result<uint32_t> new_rule(std::string name, size_t at, bool synthesized) {
        if (out_.rules.size() >= limits_.max_rules) {
            return fail(at, "grammar has more than " + std::to_string(limits_.max_rules) + " rules");
        }
        auto id = uint32_t(out_.rules.size());
        parsed_rule r;
        r.name = name;
        r.offset = at;
        r.synthesized = synthesized;
        out_.rules.push_back(std::move(r));
        if (!synthesized) rule_ids_.emplace(std::move(name), id);
        return id;
    }

    // A rule made for a group or a repetition, named after the rule it appears in.
    // Counts only the alternatives' ends: callers count the symbols they create.
    result<uint32_t> synth_rule(std::vector<sequence> alts, size_t at) {
        SKIPPY_TRY(count_symbols(alts.size(), at));
        std::string name = current_rule_name_ + "_" + std::to_string(out_.rules.size());
        SKIPPY_ASSIGN_OR_RETURN(uint32_t id, new_rule(std::move(name), at, true));
        out_.rules[id].alts = std::move(alts);
        out_.rules[id].defined = true;
        return id;
    }

    uint32_t class_id(char_class cls) {
        auto it = class_ids_.find(cls.ranges);
        if (it != class_ids_.end()) return it->second;
        auto id = uint32_t(out_.classes.size());
        class_ids_.emplace(cls.ranges, id);
        out_.classes.push_back(std::move(cls));
        return id;
    }

    symbol chars_symbol(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
        return {symbol_kind::chars, class_id(make_char_class(std::move(ranges), negated))};
    }

    // Literal characters are most of a grammar's symbols (every property name of a JSON
    // schema is one), so an ASCII one finds its class by its code point, without
    // building and normalizing its one-range class again. The id is the one
    // chars_symbol gave it the first time.
    symbol literal_symbol(uint32_t cp) {
        if (cp >= ascii_literal_class_ids_.size()) return chars_symbol({{cp, cp}}, false);
        uint32_t & id = ascii_literal_class_ids_[cp];
        if (id == no_class) id = chars_symbol({{cp, cp}}, false).index;
        return {symbol_kind::chars, id};
    }

    std::string current_rule_name_;

    status parse_rule() {
        size_t start = pos_;
        std::string_view name = scan_name();
        if (name.empty()) return fail(start, "expected a rule name");
        skip_space();
        if (src_.substr(pos_, 3) != "::=") return fail(pos_, "expected '::=' after rule name '" + std::string(name) + "'");
        pos_ += 3;
        SKIPPY_ASSIGN_OR_RETURN(uint32_t id, rule_id(name, start));
        if (out_.rules[id].defined) return fail(start, "rule '" + std::string(name) + "' is defined twice");
        out_.rules[id].defined = true;
        out_.rules[id].offset = start;
        current_rule_name_ = std::string(name);
        std::vector<sequence> alts;
        SKIPPY_TRY(parse_alternates(alts));
        SKIPPY_TRY(count_symbols(alts.size(), start));  // the ends; the symbols are counted as parsed
        out_.rules[id].alts = std::move(alts);
        if (!at_end() && !at_rule_start()) {
            if (peek() == ')') return fail(pos_, "unmatched ')'");
            return fail(pos_, "unexpected '" + std::string(1, peek()) + "'");
        }
        return status::ok();
    }

    status parse_alternates(std::vector<sequence> & alts) {
        alts.emplace_back();
        SKIPPY_TRY(parse_sequence(alts.back()));
        while (peek() == '|') {
            ++pos_;
            alts.emplace_back();
            SKIPPY_TRY(parse_sequence(alts.back()));
        }
        return status::ok();
    }

    // Items until '|', ')', the end, or the next rule. A postfix operator applies to
    // the item just before it (a whole literal, class, reference or group).
    status parse_sequence(sequence & seq) {
        skip_space();
        size_t item_start = seq.size();  // where the last item's symbols begin
        bool   have_item = false;
        while (!at_end()) {
            char   c = peek();
            size_t at = pos_;
            if (c == '|' || c == ')' || at_rule_start()) break;
            if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_item) return fail(at, std::string("'") + c + "' has nothing to repeat");
                SKIPPY_TRY(parse_postfix(seq, item_start));
            } else {
                item_start = seq.size();
                SKIPPY_TRY(parse_primary(seq));
                have_item = true;
            }
            skip_space();
        }
        return status::ok();
    }

    status parse_primary(sequence & seq) {
        size_t at = pos_;
        char   c = peek();
        if (c == '"') return parse_literal(seq);
        if (c == '[') {
            SKIPPY_ASSIGN_OR_RETURN(symbol s, parse_class());
            SKIPPY_TRY(count_symbols(1, at));
            seq.push_back(s);
            return status::ok();
        }
        if (c == '.') {
            ++pos_;
            SKIPPY_TRY(count_symbols(1, at));
            seq.push_back(chars_symbol({{0, max_code_point}}, false));
            return status::ok();
        }
        if (c == '(') {
            if (depth_ >= limits_.max_nesting_depth) {
                return fail(at, "groups nested deeper than " + std::to_string(limits_.max_nesting_depth));
            }
            ++pos_;
            ++depth_;
            std::vector<sequence> alts;
            SKIPPY_TRY(parse_alternates(alts));
            --depth_;
            if (peek() != ')') return fail(at, "'(' is never closed");
            ++pos_;
            // A group of one alternative splices into the sequence unless a postfix
            // follows (then it must stay one item).
            size_t after = pos_;
            skip_space();
            char next = peek();
            bool postfix = next == '*' || next == '+' || next == '?' || next == '{';
            pos_ = after;
            if (alts.size() == 1 && !postfix) {
                seq.insert(seq.end(), alts[0].begin(), alts[0].end());
                return status::ok();
            }
            SKIPPY_ASSIGN_OR_RETURN(uint32_t id, synth_rule(std::move(alts), at));
            SKIPPY_TRY(count_symbols(1, at));
            seq.push_back({symbol_kind::rule, id});
            return status::ok();
        }
        if (is_name_char(c)) {
            std::string_view name = scan_name();
            SKIPPY_ASSIGN_OR_RETURN(uint32_t id, rule_id(name, at));
            SKIPPY_TRY(count_symbols(1, at));
            seq.push_back({symbol_kind::rule, id});
            return status::ok();
        }
        if (c == '<') return fail(at, "token references (<...>) are not supported");
        return fail(at, "unexpected '" + std::string(1, c) + "'");
    }

    // After a backslash (pos_ at the escape letter). Returns the code point.
    result<uint32_t> parse_escape(size_t at) {
        char e = peek();
        if (at_end()) return fail(at, "escape at end of grammar");
        ++pos_;
        switch (e) {
            case 'n': return uint32_t('\n');
            case 'r': return uint32_t('\r');
            case 't': return uint32_t('\t');
            case '\\': case '"': case '[': case ']': case '-': case '^': return uint32_t(uint8_t(e));
            case 'x': case 'u': case 'U': {
                int      n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                uint32_t v = 0;
                for (int i = 0; i < n; ++i) {
                    int h = hex_value(peek());
                    if (h < 0) return fail(at, std::string("\\") + e + " needs " + std::to_string(n) + " hex digits");
                    v = (v << 4) | uint32_t(h);
                    ++pos_;
                }
                if (v > max_code_point) return fail(at, "code point above U+10FFFF");
                return v;
            }
            default:
                return fail(at, std::string("unknown escape '\\") + e + "'");
        }
    }

    // One character of a literal or class: an escape or a UTF-8 encoded code point.
    result<uint32_t> parse_char() {
        size_t at = pos_;
        if (peek() == '\\') {
            ++pos_;
            return parse_escape(at);
        }
        uint32_t cp = 0;
        size_t   n = decode_utf8(src_, pos_, cp);
        if (n == 0) return fail(at, "invalid UTF-8");
        pos_ += n;
        return cp;
    }

    status parse_literal(sequence & seq) {
        size_t at = pos_;
        ++pos_;  // opening quote
        // One symbol per character: reserve for the literal's bytes (an upper bound) up
        // front, growing geometrically still, so a long literal is not a string of
        // reallocations (the JSON-schema converter writes long ones, e.g. for enums).
        size_t close = pos_;
        while (close < src_.size() && src_[close] != '"') close += src_[close] == '\\' ? 2 : 1;
        size_t want = seq.size() + std::min(std::min(close, src_.size()) - pos_, limits_.max_symbols);
        if (want > seq.capacity()) seq.reserve(std::max(want, 2 * seq.capacity()));
        while (true) {
            if (at_end()) return fail(at, "string literal is never closed");
            if (peek() == '"') { ++pos_; break; }
            size_t char_at = pos_;
            SKIPPY_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
            if (cp >= 0xD800 && cp <= 0xDFFF) return fail(char_at, "a surrogate code point cannot be matched in UTF-8");
            SKIPPY_TRY(count_symbols(1, char_at));
            seq.push_back(literal_symbol(cp));
        }
        return status::ok();
    }

    result<symbol> parse_class() {
        size_t at = pos_;
        ++pos_;  // '['
        bool negated = false;
        if (peek() == '^') { negated = true; ++pos_; }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (true) {
            if (at_end()) return fail(at, "character class is never closed");
            if (peek() == ']') { ++pos_; break; }
            size_t item_at = pos_;
            SKIPPY_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
                ++pos_;
                SKIPPY_ASSIGN_OR_RETURN(hi, parse_char());
                if (hi < lo) return fail(item_at, "character range is reversed");
            }
            if (ranges.size() >= limits_.max_symbols) return fail(item_at, "character class too large");
            ranges.emplace_back(lo, hi);
        }
        return chars_symbol(std::move(ranges), negated);
    }

    // Applies the postfix operator at pos_ to the item seq[item_start, end).
    status parse_postfix(sequence & seq, size_t item_start) {
        size_t at = pos_;
        char   op = peek();
        ++pos_;
        uint32_t min = 0, max = 0;
        bool     bounded = true;
        if (op == '*') { min = 0; bounded = false; }
        else if (op == '+') { min = 1; bounded = false; }
        else if (op == '?') { min = 0; max = 1; }
        else {
            SKIPPY_TRY(parse_braces(at, min, max, bounded));
        }
        // The item as one symbol (its symbols move into a rule: already counted).
        symbol item;
        if (seq.size() - item_start == 1) {
            item = seq.back();
        } else {
            std::vector<sequence> alts(1, sequence(seq.begin() + long(item_start), seq.end()));
            SKIPPY_ASSIGN_OR_RETURN(uint32_t id, synth_rule(std::move(alts), at));
            item = {symbol_kind::rule, id};
            ++n_symbols_;
        }
        seq.resize(item_start);
        --n_symbols_;  // the item symbol leaves the sequence; its copies are counted below

        SKIPPY_TRY(count_symbols(min, at));
        seq.insert(seq.end(), min, item);
        if (!bounded) {
            // star ::= item star | ε  (right recursion: the matcher's stacks stay flat)
            SKIPPY_ASSIGN_OR_RETURN(uint32_t star, synth_rule({{}, {}}, at));
            out_.rules[star].alts[0] = {item, {symbol_kind::rule, star}};
            SKIPPY_TRY(count_symbols(3, at));
            seq.push_back({symbol_kind::rule, star});
        } else if (max > min) {
            // opt_k ::= item opt_{k+1} | ε, the innermost item | ε: up to max - min more.
            size_t n_opt = max - min;
            if (out_.rules.size() + n_opt > limits_.max_rules) {
                return fail(at, "repetition needs more than " + std::to_string(limits_.max_rules) + " rules");
            }
            uint32_t next = 0;
            for (size_t k = 0; k < n_opt; ++k) {
                SKIPPY_ASSIGN_OR_RETURN(uint32_t opt, synth_rule({{}, {}}, at));
                if (k == 0) out_.rules[opt].alts[0] = {item};
                else out_.rules[opt].alts[0] = {item, {symbol_kind::rule, next}};
                SKIPPY_TRY(count_symbols(k == 0 ? 1 : 2, at));
                next = opt;
            }
            SKIPPY_TRY(count_symbols(1, at));
            seq.push_back({symbol_kind::rule, next});
        }
        return status::ok();
    }

    result<uint32_t> parse_count(size_t at) {
        skip_space();
        if (peek() < '0' || peek() > '9') return fail(at, "expected a number in '{...}'");
        uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + uint64_t(peek() - '0');
            if (v > limits_.max_repetition) {
                return fail(at, "repetition count above the limit of " + std::to_string(limits_.max_repetition));
            }
            ++pos_;
        }
        skip_space();
        return uint32_t(v);
    }

    status parse_braces(size_t at, uint32_t & min, uint32_t & max, bool & bounded) {
        SKIPPY_ASSIGN_OR_RETURN(min, parse_count(at));
        bounded = true;
        max = min;
        if (peek() == ',') {
            ++pos_;
            skip_space();
            if (peek() == '}') {
                bounded = false;
            } else {
                SKIPPY_ASSIGN_OR_RETURN(max, parse_count(at));
                if (max < min) return fail(at, "repetition {m,n} with n < m");
            }
        }
        if (peek() != '}') return fail(at, "expected '}'");
        ++pos_;
        return status::ok();
    }
};

}  // namespace

result<parsed_grammar> parse_gbnf(std::string_view source, const grammar_limits & limits) {
    return gbnf_parser(source, limits).run();
}

}  // namespace skippy::grammar::detail
