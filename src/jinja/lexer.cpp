#include "jinja/lexer.h"

#include "jinja/py_text.h"

#include <cmath>
#include <cstdlib>

namespace skippy::jinja::detail {

std::string normalize_source(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        char c = source[i];
        if (c == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += c;
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

namespace {

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

class lexer {
public:
    lexer(const program & prog, const parse_options & opts) : p_(prog), s_(prog.source), o_(opts) {}

    result<std::vector<token>> run() {
        while (pos_ < s_.size()) SKIPPY_TRY(root());
        push(tok::eof, static_cast<uint32_t>(s_.size()));
        return std::move(out_);
    }

private:
    const program &       p_;
    const std::string &   s_;
    const parse_options & o_;
    size_t                pos_ = 0;
    bool                  line_starting_ = true;
    std::vector<token>    out_;
    std::vector<char>     balance_;

    status fail(size_t at, const std::string & msg) const {
        return make_error(error_code::invalid_data, p_.where(static_cast<uint32_t>(at)) + ": " + msg);
    }

    token & push(tok kind, size_t at, std::string text = {}) {
        token t;
        t.kind = kind;
        t.pos = static_cast<uint32_t>(at);
        t.text = std::move(text);
        out_.push_back(std::move(t));
        return out_.back();
    }

    bool starts(size_t at, std::string_view what) const { return s_.compare(at, what.size(), what) == 0; }

    // Length of the Python-whitespace run at `at`.
    size_t space_run(size_t at) const {
        size_t i = at;
        while (i < s_.size()) {
            size_t j = i;
            if (!text::is_space(text::decode(s_, j))) break;
            i = j;
        }
        return i - at;
    }

    // Applies a begin tag's whitespace control to the text before it.
    std::string_view control_text(std::string_view text, char modifier, bool lstrip_applies) const {
        if (modifier == '-') {
            size_t e = text.size();
            while (e > 0) {
                // rstrip by code point: step back over one UTF-8 sequence.
                size_t b = e - 1;
                while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
                size_t k = b;
                if (!text::is_space(text::decode(text, k))) break;
                e = b;
            }
            return text.substr(0, e);
        }
        if (modifier != '+' && o_.lstrip_blocks && lstrip_applies) {
            size_t nl = text.rfind('\n');
            size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
            if (l_pos > 0 || line_starting_) {
                std::string_view tail = text.substr(l_pos);
                bool all_space = !tail.empty();
                for (size_t i = 0; i < tail.size() && all_space;) all_space = text::is_space(text::decode(tail, i));
                if (all_space) return text.substr(0, l_pos);
            }
        }
        return text;
    }

    // Block-tag end at `at` ("+%}", "-%}" + spaces, "%}" + one newline when trim_blocks);
    // returns its length, 0 when there is none.
    size_t block_end_at(size_t at, std::string_view close) const {
        if (starts(at, "+") && starts(at + 1, close)) return 1 + close.size();
        if (starts(at, "-") && starts(at + 1, close)) return 1 + close.size() + space_run(at + 1 + close.size());
        if (starts(at, close)) {
            size_t n = close.size();
            if (o_.trim_blocks && at + n < s_.size() && s_[at + n] == '\n') ++n;
            return n;
        }
        return 0;
    }

    status root() {
        size_t p = pos_;
        while (true) {
            p = s_.find('{', p);
            if (p == std::string::npos || p + 1 >= s_.size()) break;
            char k = s_[p + 1];
            if (k == '{' || k == '%' || k == '#') break;
            ++p;
        }
        if (p == std::string::npos || p + 1 >= s_.size()) {
            push(tok::data, pos_, s_.substr(pos_));
            pos_ = s_.size();
            return status::ok();
        }
        char kind = s_[p + 1];
        char modifier = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
        std::string_view text(s_.data() + pos_, p - pos_);
        text = control_text(text, modifier, kind != '{');
        if (!text.empty()) push(tok::data, pos_, std::string(text));
        size_t after = p + 2 + (modifier ? 1 : 0);
        line_starting_ = false;
        if (kind == '#') return comment(p, after);
        if (kind == '%') {
            size_t raw_len = raw_begin_at(after);
            if (raw_len) return raw(p, after + raw_len);
            push(tok::block_begin, p);
            return tag(after, "%}", tok::block_end);
        }
        push(tok::var_begin, p);
        return tag(after, "}}", tok::var_end);
    }

    status comment(size_t begin, size_t at) {
        for (size_t i = at; i < s_.size(); ++i) {
            if (s_[i] != '+' && s_[i] != '-' && s_[i] != '#') continue;
            size_t n = 0;
            if (starts(i, "+#}")) n = 3;
            else if (starts(i, "-#}")) n = 3 + space_run(i + 3);
            else if (starts(i, "#}")) n = 2 + ((o_.trim_blocks && i + 2 < s_.size() && s_[i + 2] == '\n') ? 1 : 0);
            if (n == 0) continue;
            pos_ = i + n;
            line_starting_ = s_[pos_ - 1] == '\n';
            return status::ok();
        }
        return fail(begin, "missing end of comment tag");
    }

    // "\s* raw \s* (-%}\s* | %})" right after "{%" and its modifier; its length or 0.
    size_t raw_begin_at(size_t at) const {
        size_t i = at + space_run(at);
        if (!starts(i, "raw")) return 0;
        i += 3;
        size_t ws = space_run(i);
        if (ws == 0 && i < s_.size() && s_[i] != '-' && s_[i] != '%') return 0;
        i += ws;
        if (starts(i, "-%}")) return i + 3 + space_run(i + 3) - at;
        if (starts(i, "%}")) return i + 2 - at;
        return 0;
    }

    status raw(size_t begin, size_t body) {
        for (size_t p = s_.find("{%", body); p != std::string::npos; p = s_.find("{%", p + 1)) {
            char modifier = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
            size_t i = p + 2 + (modifier ? 1 : 0);
            i += space_run(i);
            if (!starts(i, "endraw")) continue;
            i += 6;
            i += space_run(i);
            size_t n = block_end_at(i, "%}");
            if (n == 0) continue;
            std::string_view text(s_.data() + body, p - body);
            line_starting_ = s_[body - 1] == '\n';  // how the raw begin tag's match ended
            text = control_text(text, modifier, true);
            if (!text.empty()) push(tok::data, body, std::string(text));
            pos_ = i + n;
            line_starting_ = s_[pos_ - 1] == '\n';
            return status::ok();
        }
        return fail(begin, "missing end of raw directive");
    }

    status tag(size_t at, std::string_view close, tok end_kind) {
        size_t i = at;
        size_t begin = at;
        while (true) {
            if (i >= s_.size()) {
                return fail(begin, std::string("unexpected end of template, expected '") + std::string(close) + "'");
            }
            if (balance_.empty()) {
                size_t n = 0;
                if (end_kind == tok::block_end) n = block_end_at(i, close);
                else if (starts(i, "-}}")) n = 3 + space_run(i + 3);
                else if (starts(i, "}}")) n = 2;
                if (n) {
                    push(end_kind, i);
                    pos_ = i + n;
                    line_starting_ = s_[pos_ - 1] == '\n';
                    return status::ok();
                }
            }
            size_t ws = space_run(i);
            if (ws) { i += ws; continue; }
            SKIPPY_ASSIGN_OR_RETURN(size_t n, one_token(i));
            i += n;
        }
    }

    // Digits with single underscores between them ((\d+_)*\d+); returns the length.
    size_t digits_at(size_t i) const {
        size_t j = i;
        if (j >= s_.size() || !is_ascii_digit(s_[j])) return 0;
        while (true) {
            while (j < s_.size() && is_ascii_digit(s_[j])) ++j;
            if (j + 1 < s_.size() && s_[j] == '_' && is_ascii_digit(s_[j + 1])) { ++j; continue; }
            return j - i;
        }
    }

    size_t float_at(size_t i) const {
        if (i > 0 && s_[i - 1] == '.') return 0;
        size_t n = digits_at(i);
        if (n == 0) return 0;
        size_t j = i + n;
        auto exponent = [&](size_t k) -> size_t {
            if (k >= s_.size() || (s_[k] != 'e' && s_[k] != 'E')) return 0;
            size_t m = k + 1;
            if (m < s_.size() && (s_[m] == '+' || s_[m] == '-')) ++m;
            size_t d = digits_at(m);
            return d ? m + d - k : 0;
        };
        if (j < s_.size() && s_[j] == '.') {
            size_t f = digits_at(j + 1);
            if (f) {
                size_t k = j + 1 + f;
                return k + exponent(k) - i;
            }
        }
        size_t e = exponent(j);
        return e ? j + e - i : 0;
    }

    size_t integer_at(size_t i, int & base) const {
        base = 10;
        if (s_[i] == '0' && i + 1 < s_.size()) {
            char x = static_cast<char>(s_[i + 1] | 0x20);
            int b = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 0;
            if (b) {
                auto ok = [&](char c) { return b == 16 ? is_hex_digit(c) : (c >= '0' && c < static_cast<char>('0' + b)); };
                size_t j = i + 2;
                size_t n_digits = 0;
                while (j < s_.size()) {
                    if (s_[j] == '_' && j + 1 < s_.size() && ok(s_[j + 1])) { j += 2; ++n_digits; continue; }
                    if (!ok(s_[j])) break;
                    ++j;
                    ++n_digits;
                }
                if (n_digits) { base = b; return j - i; }
            }
        }
        if (s_[i] == '0') {
            size_t j = i + 1;
            while (j < s_.size()) {
                if (s_[j] == '0') { ++j; continue; }
                if (s_[j] == '_' && j + 1 < s_.size() && s_[j + 1] == '0') { j += 2; continue; }
                break;
            }
            return j - i;
        }
        return digits_at(i);
    }

    size_t name_at(size_t i) const {
        size_t j = i;
        while (j < s_.size()) {
            char c = s_[j];
            if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_ascii_digit(c)) { ++j; continue; }
            if (static_cast<unsigned char>(c) < 0x80) break;
            size_t k = j;
            if (!text::is_word(text::decode(s_, k))) break;
            j = k;
        }
        return j - i;
    }

    result<size_t> one_token(size_t i) {
        char c = s_[i];
        if (is_ascii_digit(c)) {
            if (size_t n = float_at(i)) {
                std::string digits;
                for (size_t k = i; k < i + n; ++k)
                    if (s_[k] != '_') digits += s_[k];
                push(tok::floating, i, digits).fval = std::strtod(digits.c_str(), nullptr);
                return n;
            }
            int base = 10;
            size_t n = integer_at(i, base);
            std::string digits;
            for (size_t k = i + (base == 10 ? 0 : 2); k < i + n; ++k)
                if (s_[k] != '_') digits += s_[k];
            errno = 0;
            unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
            if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
                return make_error(error_code::unsupported, p_.where(static_cast<uint32_t>(i)) + ": integer literal too large");
            push(tok::integer, i, std::string(s_.substr(i, n))).ival = static_cast<int64_t>(v);
            return n;
        }
        if (size_t n = name_at(i)) {
            push(tok::name, i, s_.substr(i, n));
            return n;
        }
        if (c == '\'' || c == '"') return string_literal(i);
        static const char * two[] = {"//", "**", "==", "!=", "<=", ">="};
        for (const char * op : two) {
            if (starts(i, op)) { push(tok::op, i, op); return size_t(2); }
        }
        if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) != std::string_view::npos) {
            if (c == '(' || c == '[' || c == '{') {
                balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
            } else if (c == ')' || c == ']' || c == '}') {
                if (balance_.empty()) return fail(i, std::string("unexpected '") + c + "'");
                if (balance_.back() != c)
                    return fail(i, std::string("unexpected '") + c + "', expected '" + balance_.back() + "'");
                balance_.pop_back();
            }
            push(tok::op, i, std::string(1, c));
            return size_t(1);
        }
        size_t k = i;
        char32_t cp = text::decode(s_, k);
        std::string shown;
        text::append_utf8(shown, cp);
        return fail(i, "unexpected char " + text::repr(shown));
    }

    // A quoted literal, decoded as Python's "unicode-escape" codec does.
    result<size_t> string_literal(size_t i) {
        char q = s_[i];
        size_t j = i + 1;
        while (j < s_.size() && s_[j] != q) j += s_[j] == '\\' ? 2 : 1;
        if (j >= s_.size()) return fail(i, "unterminated string literal");
        std::string_view body(s_.data() + i + 1, j - i - 1);
        std::string out;
        for (size_t k = 0; k < body.size();) {
            if (body[k] != '\\') { out += body[k++]; continue; }
            if (k + 1 >= body.size()) return fail(i, "\\ at end of string");
            char e = body[k + 1];
            k += 2;
            switch (e) {
                case '\n': break;  // line continuation
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'v': out += '\v'; break;
                case 'x': case 'u': case 'U': {
                    size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    if (k + n > body.size()) return fail(i, std::string("truncated \\") + e + " escape");
                    uint32_t cp = 0;
                    for (size_t d = 0; d < n; ++d) {
                        char h = body[k + d];
                        if (!is_hex_digit(h)) return fail(i, std::string("truncated \\") + e + " escape");
                        cp = cp * 16 + static_cast<uint32_t>(is_ascii_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
                    }
                    if (cp > 0x10FFFF) return fail(i, "illegal Unicode character");
                    if (cp >= 0xD800 && cp <= 0xDFFF)
                        return make_error(error_code::unsupported,
                                          p_.where(static_cast<uint32_t>(i)) + ": a lone surrogate in a string literal");
                    text::append_utf8(out, cp);
                    k += n;
                    break;
                }
                case 'N':
                    return make_error(error_code::unsupported,
                                      p_.where(static_cast<uint32_t>(i)) + ": \\N{...} escapes are not supported");
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t cp = static_cast<uint32_t>(e - '0');
                        for (int d = 0; d < 2 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++d)
                            cp = cp * 8 + static_cast<uint32_t>(body[k++] - '0');
                        text::append_utf8(out, cp);
                    } else if (static_cast<unsigned char>(e) >= 0x80) {
                        // jinja2 escapes non-ASCII as \xNN / \uNNNN / \UNNNNNNNN before decoding,
                        // so a backslash before one keeps that spelling as text.
                        size_t m = k - 1;
                        char32_t cp = text::decode(body, m);
                        char buf[16];
                        if (cp < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
                        else if (cp < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
                        else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
                        out += buf;
                        k = m;
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        push(tok::string, i, std::move(out));
        return j + 1 - i;
    }
};

}  // namespace

result<std::vector<token>> lex(const program & prog, const parse_options & opts) {
    lexer l(prog, opts);
    return l.run();
}

}  // namespace skippy::jinja::detail
