// JSON schema `pattern` (ECMA-262 syntax) → GBNF over JSON-encoded characters, for the
// subset that translates exactly: literals, escapes, classes, '.', groups, alternation,
// greedy or lazy quantifiers, ^ at the start and $ at the end of a top-level branch.
// Everything else (backreferences, lookaround, word boundaries, flags, properties) is
// refused: matching it would need more than a context-free grammar, or guessing.
#include "grammar/gbnf_text.h"
#include "grammar/utf8.h"

namespace skippy::grammar::detail {

namespace {

constexpr uint32_t max_regex_depth = 32;
constexpr uint32_t max_regex_repeat = 1000;

const cp_ranges digit_set = {{'0', '9'}};
const cp_ranges word_set = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const cp_ranges space_set = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                             {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                             {0xFEFF, 0xFEFF}};
const cp_ranges line_terminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class regex_translator {
public:
    regex_translator(std::string_view p, const std::string & any_char) : p_(p), any_char_(any_char) {}

    result<std::string> run() {
        std::vector<std::string> branches;
        while (true) {
            bool start_anchor = false, end_anchor = false;
            if (peek() == '^') { ++pos_; start_anchor = true; }
            SKIPPY_ASSIGN_OR_RETURN(std::string body, parse_concat(0, &end_anchor));
            std::string branch;
            if (!start_anchor) branch += any_char_ + "* ";
            branch += body;
            if (!end_anchor) branch += " " + any_char_ + "*";
            branches.push_back("(" + branch + ")");
            if (at_end()) break;
            if (peek() == '|') { ++pos_; continue; }
            if (peek() == ')') return unsupported("unmatched ')'");
            return unsupported("unexpected character");
        }
        std::string out;
        for (size_t i = 0; i < branches.size(); ++i) out += (i ? " | " : "") + branches[i];
        return branches.size() == 1 ? out : "(" + out + ")";
    }

private:
    std::string_view   p_;
    const std::string & any_char_;
    size_t             pos_ = 0;

    bool at_end() const { return pos_ >= p_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }

    status unsupported(const std::string & what) const {
        return make_error(error_code::unsupported,
                          "pattern: " + what + " at offset " + std::to_string(pos_) + " is not supported");
    }

    result<std::string> parse_alternation(uint32_t depth) {
        std::vector<std::string> alts;
        while (true) {
            SKIPPY_ASSIGN_OR_RETURN(std::string c, parse_concat(depth, nullptr));
            alts.push_back(c.empty() ? "\"\"" : c);
            if (peek() != '|') break;
            ++pos_;
        }
        std::string out;
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
        return "(" + out + ")";
    }

    // Items until '|', ')' or the end. At the top level (end_anchor set) a '$' that
    // ends the branch anchors it.
    result<std::string> parse_concat(uint32_t depth, bool * end_anchor) {
        std::string out;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                ++pos_;
                if (end_anchor && (at_end() || peek() == '|')) {
                    *end_anchor = true;
                    break;
                }
                --pos_;
                return unsupported("'$' before the end of the pattern");
            }
            if (peek() == '^') return unsupported("'^' after the start of the pattern");
            SKIPPY_ASSIGN_OR_RETURN(std::string atom, parse_atom(depth));
            SKIPPY_ASSIGN_OR_RETURN(std::string item, parse_quantifier(std::move(atom)));
            if (!out.empty()) out += ' ';
            out += item;
        }
        return out;
    }

    result<uint32_t> parse_number() {
        if (peek() < '0' || peek() > '9') return unsupported("a '{' that is not a quantifier");
        uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + uint64_t(peek() - '0');
            if (v > max_regex_repeat) return unsupported("a repetition count above " + std::to_string(max_regex_repeat));
            ++pos_;
        }
        return uint32_t(v);
    }

    result<std::string> parse_quantifier(std::string atom) {
        char c = peek();
        std::string q;
        if (c == '*' || c == '+' || c == '?') {
            ++pos_;
            q = std::string(1, c);
        } else if (c == '{') {
            ++pos_;
            SKIPPY_ASSIGN_OR_RETURN(uint32_t min, parse_number());
            q = "{" + std::to_string(min);
            if (peek() == ',') {
                ++pos_;
                q += ",";
                if (peek() != '}') {
                    SKIPPY_ASSIGN_OR_RETURN(uint32_t max, parse_number());
                    if (max < min) return unsupported("a repetition {m,n} with n < m");
                    q += std::to_string(max);
                }
            }
            if (peek() != '}') return unsupported("an unclosed '{'");
            ++pos_;
            q += "}";
        } else {
            return atom;
        }
        if (peek() == '?') ++pos_;  // lazy: the same set of strings
        if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') {
            return unsupported("a quantifier after a quantifier");
        }
        return "(" + atom + ")" + q;
    }

    result<std::string> encode(const cp_ranges & set) {
        std::string e = json_encoded_char(set);
        if (e.empty()) return unsupported("a character set that matches nothing");
        return e;
    }

    result<std::string> parse_atom(uint32_t depth) {
        char c = peek();
        if (c == '(') {
            if (depth >= max_regex_depth) return unsupported("groups nested deeper than " + std::to_string(max_regex_depth));
            ++pos_;
            if (peek() == '?') {
                if (peek(1) == ':') {
                    pos_ += 2;
                } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
                    // A named group: only its name is extra.
                    pos_ += 2;
                    while (!at_end() && peek() != '>') ++pos_;
                    if (at_end()) return unsupported("an unclosed group name");
                    ++pos_;
                } else {
                    return unsupported("lookaround or inline flags '(?'");
                }
            }
            SKIPPY_ASSIGN_OR_RETURN(std::string inner, parse_alternation(depth + 1));
            if (peek() != ')') return unsupported("an unclosed '('");
            ++pos_;
            return inner;
        }
        if (c == '[') return parse_class();
        if (c == '.') {
            ++pos_;
            return encode(complement(line_terminators));
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') return unsupported("a quantifier with nothing to repeat");
        if (c == '\\') {
            ++pos_;
            cp_ranges set;
            SKIPPY_TRY(parse_escape(set, false));
            return encode(set);
        }
        uint32_t cp = 0;
        size_t   n = decode_utf8(p_, pos_, cp);
        if (n == 0) return make_error(error_code::invalid_argument, "pattern: invalid UTF-8");
        pos_ += n;
        return encode({{cp, cp}});
    }

    // After a backslash. Adds the escape's characters to `set`.
    status parse_escape(cp_ranges & set, bool in_class) {
        if (at_end()) return unsupported("a trailing backslash");
        char e = peek();
        ++pos_;
        auto add = [&](const cp_ranges & r) { set.insert(set.end(), r.begin(), r.end()); };
        switch (e) {
            case 'd': add(digit_set); return status::ok();
            case 'D': add(complement(digit_set)); return status::ok();
            case 'w': add(word_set); return status::ok();
            case 'W': add(complement(word_set)); return status::ok();
            case 's': add(space_set); return status::ok();
            case 'S': add(complement(space_set)); return status::ok();
            case 't': add({{'\t', '\t'}}); return status::ok();
            case 'n': add({{'\n', '\n'}}); return status::ok();
            case 'r': add({{'\r', '\r'}}); return status::ok();
            case 'f': add({{'\f', '\f'}}); return status::ok();
            case 'v': add({{'\v', '\v'}}); return status::ok();
            case '0':
                if (peek() >= '0' && peek() <= '9') return unsupported("an octal escape");
                add({{0, 0}});
                return status::ok();
            case 'b':
                if (in_class) { add({{'\b', '\b'}}); return status::ok(); }
                return unsupported("a word boundary '\\b'");
            case 'x': case 'u': {
                int      n = e == 'x' ? 2 : 4;
                uint32_t v = 0;
                for (int i = 0; i < n; ++i) {
                    int h = hex_digit(peek());
                    if (h < 0) return unsupported(std::string("a malformed '\\") + e + "' escape");
                    v = (v << 4) | uint32_t(h);
                    ++pos_;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return unsupported("a surrogate escape");
                add({{v, v}});
                return status::ok();
            }
            default:
                break;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            --pos_;
            return unsupported(std::string("the escape '\\") + e + "'");
        }
        uint32_t cp = uint8_t(e);
        if (cp >= 0x80) {
            --pos_;
            size_t n = decode_utf8(p_, pos_, cp);
            if (n == 0) return make_error(error_code::invalid_argument, "pattern: invalid UTF-8");
            pos_ += n;
        }
        add({{cp, cp}});
        return status::ok();
    }

    // One class member (a character or an escape); `single` says whether it was one
    // character (so that it may start or end a range).
    status parse_class_atom(cp_ranges & set, bool & single, uint32_t & cp) {
        if (peek() == '\\') {
            ++pos_;
            cp_ranges s;
            SKIPPY_TRY(parse_escape(s, true));
            single = s.size() == 1 && s[0].first == s[0].second;
            cp = s[0].first;
            set.insert(set.end(), s.begin(), s.end());
            return status::ok();
        }
        size_t n = decode_utf8(p_, pos_, cp);
        if (n == 0) return make_error(error_code::invalid_argument, "pattern: invalid UTF-8");
        pos_ += n;
        single = true;
        set.emplace_back(cp, cp);
        return status::ok();
    }

    result<std::string> parse_class() {
        ++pos_;  // '['
        bool negated = false;
        if (peek() == '^') { negated = true; ++pos_; }
        cp_ranges set;
        while (true) {
            if (at_end()) return unsupported("an unclosed '['");
            if (peek() == ']') { ++pos_; break; }
            cp_ranges item;
            bool      single = false;
            uint32_t  lo = 0;
            SKIPPY_TRY(parse_class_atom(item, single, lo));
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
                if (!single) return unsupported("a class escape as a range end");
                ++pos_;
                cp_ranges hi_item;
                bool      hi_single = false;
                uint32_t  hi = 0;
                SKIPPY_TRY(parse_class_atom(hi_item, hi_single, hi));
                if (!hi_single) return unsupported("a class escape as a range end");
                if (hi < lo) return make_error(error_code::invalid_argument, "pattern: a reversed character range");
                set.emplace_back(lo, hi);
            } else {
                set.insert(set.end(), item.begin(), item.end());
            }
        }
        return encode(negated ? complement(set) : set);
    }
};

}  // namespace

result<std::string> regex_to_gbnf(std::string_view pattern, const std::string & any_char) {
    if (pattern.size() > 4096) return make_error(error_code::unsupported, "pattern: longer than 4096 bytes");
    return regex_translator(pattern, any_char).run();
}

}  // namespace skippy::grammar::detail
