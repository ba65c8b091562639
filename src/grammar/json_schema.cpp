// JSON schema → GBNF. The grammar writes JSON in one shape per value: properties in
// the schema's order, our whitespace policy between tokens (docs/grammar.md), and
// canonical escapes wherever exactness needs one encoding per string (enum and const
// values, pattern-constrained strings, the keys of additional properties).
//
// Every rule a schema value turns into ends with `ws`, the whitespace that may follow
// any JSON token; so a value's rule can be followed directly by ',' ']' '}' or the end.
#include "grammar/gbnf_text.h"
#include "grammar/grammar.h"
#include "grammar/utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

namespace skippy::grammar {

namespace {

using ojson = nlohmann::ordered_json;
using detail::cp_ranges;
using detail::gbnf_literal;

// Always ignored: they describe values without constraining them.
const std::set<std::string> annotation_keywords = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "$defs", "definitions",
};

// What the converter enforces (some only in part: see the checks where they are used).
const std::set<std::string> supported_keywords = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "uniqueItems",
};

const char * const all_types[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

// The fixed rules, written once each when first used.
struct primitive {
    const char * name;
    const char * body;
    std::vector<const char *> uses;
};

const std::vector<primitive> & primitives() {
    static const std::vector<primitive> table = {
        {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
        {"hex", "[0-9a-fA-F]", {}},
        // One character of a JSON string: any code point but '"', '\' and controls, or an
        // escape; a \u escape is never a lone surrogate (nlohmann and most parsers refuse
        // those), so a pair counts as one character like the code point it encodes.
        {"char",
         R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex | [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex ) ))",
         {"hex"}},
        {"string", R"("\"" char* "\"")", {"char"}},
        {"int-part", R"("0" | [1-9] [0-9]{0,15})", {}},
        {"integer", R"("-"? int-part)", {"int-part"}},
        {"number", R"("-"? int-part ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)", {"int-part"}},
        {"boolean", R"("true" | "false")", {}},
        {"null", R"("null")", {}},
        {"value", R"(( object | array | string | number | boolean | null ) ws)",
         {"object", "array", "string", "number", "boolean", "null", "ws"}},
        {"object", R"("{" ws ( string ws ":" ws value ( "," ws string ws ":" ws value )* )? "}")",
         {"ws", "string", "value"}},
        {"array", R"("[" ws ( value ( "," ws value )* )? "]")", {"ws", "value"}},
        // Canonical key characters (the encoding nlohmann's dump writes).
        {"key-char", R"([^"\\\x00-\x1F] | "\\" ["\\bfnrt] | "\\u00" ( "0" [0-7bef] | "1" [0-9a-f] ))", {}},
        // Formats (docs/grammar.md): RFC 3339 date, time, date-time; RFC 4122 uuid.
        {"year", "[0-9]{4}", {}},
        {"leap-year",
         R"([0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "00" | "0" [48] | [2468] [048] | [13579] [26] ) "00")",
         {}},
        {"date",
         R"(year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leap-year "-02-29")",
         {"year", "leap-year"}},
        {"time",
         R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
         {}},
        {"date-time", R"(date "T" time)", {"date", "time"}},
        {"uuid", R"(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})", {"hex"}},
    };
    return table;
}

const std::set<std::string> supported_formats = {"date", "time", "date-time", "uuid"};

std::string sanitize_name(std::string_view s) {
    std::string out;
    for (char c : s) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) out += c;
        else if (!out.empty() && out.back() != '-') out += '-';
        if (out.size() >= 40) break;
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? "x" : out;
}

std::string paren(const std::string & e) { return "( " + e + " )"; }

// expr repeated [min, max] times (max < 0: no maximum).
std::string repeat(const std::string & expr, int64_t min, int64_t max) {
    if (max == 0) return "";
    std::string e = paren(expr);
    if (min == 0 && max == 1) return e + "?";
    if (max < 0) {
        if (min == 0) return e + "*";
        if (min == 1) return e + "+";
        return e + "{" + std::to_string(min) + ",}";
    }
    if (min == max) return e + "{" + std::to_string(min) + "}";
    return e + "{" + std::to_string(min) + "," + std::to_string(max) + "}";
}

// Digit strings of lo's length between lo and hi (same length, leading zeros allowed).
std::string digits_between(const std::string & lo, const std::string & hi) {
    if (lo.empty()) return "";
    if (lo == hi) return gbnf_literal(lo);
    const size_t n = lo.size();
    const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    const bool lo_zeros = rest_lo.find_first_not_of('0') == std::string::npos;
    const bool hi_nines = rest_hi.find_first_not_of('9') == std::string::npos;
    auto any_digits = [](size_t k) { return k == 0 ? std::string() : std::string(" [0-9]") + (k > 1 ? "{" + std::to_string(k) + "}" : ""); };
    auto digit_range = [](char a, char b) {
        return a == b ? gbnf_literal(std::string(1, a)) : "[" + std::string(1, a) + "-" + std::string(1, b) + "]";
    };
    if (lo[0] == hi[0]) return gbnf_literal(std::string(1, lo[0])) + " " + paren(digits_between(rest_lo, rest_hi));
    std::vector<std::string> alts;
    char mid_lo = char(lo[0] + 1), mid_hi = char(hi[0] - 1);
    if (lo_zeros) mid_lo = lo[0];
    else alts.push_back(gbnf_literal(std::string(1, lo[0])) + " " + paren(digits_between(rest_lo, std::string(n - 1, '9'))));
    if (hi_nines) mid_hi = hi[0];
    if (mid_lo <= mid_hi) alts.push_back(digit_range(mid_lo, mid_hi) + any_digits(n - 1));
    if (!hi_nines) alts.push_back(gbnf_literal(std::string(1, hi[0])) + " " + paren(digits_between(std::string(n - 1, '0'), rest_hi)));
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out;
}

// Decimal naturals in [a, b], without leading zeros.
std::string naturals_between(uint64_t a, uint64_t b) {
    std::string sa = std::to_string(a), sb = std::to_string(b);
    std::vector<std::string> alts;
    for (size_t len = sa.size(); len <= sb.size(); ++len) {
        std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
        std::string hi = len == sb.size() ? sb : std::string(len, '9');
        alts.push_back(paren(digits_between(lo, hi)));
    }
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out;
}

// Naturals >= a with at most max(16, digits of a) digits (our integer length policy).
std::string naturals_from(uint64_t a) {
    std::string sa = std::to_string(a);
    size_t max_len = std::max<size_t>(16, sa.size());
    std::string out = paren(digits_between(sa, std::string(sa.size(), '9')));
    if (max_len > sa.size()) {
        size_t extra_min = sa.size(), extra_max = max_len - 1;
        out += " | [1-9] [0-9]{" + std::to_string(extra_min) + "," + std::to_string(extra_max) + "}";
    }
    return out;
}

bool is_integer_valued(const ojson & v) {
    if (v.is_number_integer()) return true;
    if (v.is_number_float()) {
        double d = v.get<double>();
        return std::isfinite(d) && std::floor(d) == d;
    }
    return false;
}

std::string json_type_of(const ojson & v) {
    switch (v.type()) {
        case ojson::value_t::object: return "object";
        case ojson::value_t::array: return "array";
        case ojson::value_t::string: return "string";
        case ojson::value_t::boolean: return "boolean";
        case ojson::value_t::null: return "null";
        default: return is_integer_valued(v) ? "integer" : "number";
    }
}

// The JSON pointer token for a key ("a/b" → "a~1b").
std::string pointer_token(const std::string & key) {
    std::string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

class schema_converter {
public:
    schema_converter(const ojson & root, const json_schema_options & options) : root_(root), options_(options) {}

    result<std::string> run() {
        SKIPPY_ASSIGN_OR_RETURN(std::string root_expr, visit(root_, "#", "root", 0));
        // Only the rules root reaches (an optional property's rules for the case where
        // nothing precedes it may go unused, for instance).
        std::set<std::string> reached;
        std::vector<std::string> todo = references(root_expr);
        while (!todo.empty()) {
            std::string name = std::move(todo.back());
            todo.pop_back();
            if (!rules_.count(name) || !reached.insert(name).second) continue;
            for (auto & r : references(rules_.at(name))) todo.push_back(std::move(r));
        }
        std::string out = "root ::= " + root_expr + "\n";
        for (const auto & name : order_) {
            if (reached.count(name)) out += name + " ::= " + rules_.at(name) + "\n";
        }
        return out;
    }

    // The rule names a GBNF body mentions (outside literals and classes).
    static std::vector<std::string> references(const std::string & body) {
        std::vector<std::string> out;
        for (size_t i = 0; i < body.size();) {
            char c = body[i];
            if (c == '"' || c == '[') {
                const char close = c == '"' ? '"' : ']';
                for (++i; i < body.size() && body[i] != close; ++i) {
                    if (body[i] == '\\') ++i;
                }
                ++i;
            } else if (std::isalnum(uint8_t(c)) || c == '-' || c == '_') {
                size_t start = i;
                while (i < body.size() && (std::isalnum(uint8_t(body[i])) || body[i] == '-' || body[i] == '_')) ++i;
                out.push_back(body.substr(start, i - start));
            } else if (c == '{') {
                while (i < body.size() && body[i] != '}') ++i;  // a repetition count
            } else {
                ++i;
            }
        }
        return out;
    }

private:
    const ojson &               root_;
    json_schema_options         options_;
    std::map<std::string, std::string> rules_;  // name → body
    std::vector<std::string>    order_;
    std::unordered_map<std::string, std::string> body_names_;
    std::unordered_map<std::string, std::string> ref_names_;  // pointer → rule
    std::set<std::string>       used_primitives_;
    std::set<std::string>       taken_;  // rule names handed out
    size_t                      n_visits_ = 0;  // schemas visited (inlined copies count each time)

    status invalid(const std::string & path, const std::string & what) const {
        return make_error(error_code::invalid_argument, "json schema " + path + ": " + what);
    }
    status unsupported(const std::string & path, const std::string & what) const {
        return make_error(error_code::unsupported, "json schema " + path + ": " + what);
    }

    std::string fresh_name(const std::string & hint) {
        std::string base = sanitize_name(hint);
        std::string name = base;
        for (int i = 1; taken_.count(name) || name == "root" || is_primitive(name); ++i) {
            name = base + "-" + std::to_string(i);
        }
        taken_.insert(name);
        return name;
    }

    static bool is_primitive(const std::string & name) {
        for (const auto & p : primitives()) {
            if (name == p.name) return true;
        }
        return false;
    }

    result<std::string> add_rule(const std::string & hint, const std::string & body) {
        auto it = body_names_.find(body);
        if (it != body_names_.end()) return it->second;
        if (rules_.size() >= options_.max_rules) {
            return make_error(error_code::invalid_argument,
                              "json schema: needs more than " + std::to_string(options_.max_rules) + " rules");
        }
        std::string name = fresh_name(hint);
        rules_[name] = body;
        order_.push_back(name);
        body_names_.emplace(body, name);
        return name;
    }

    // Makes the primitive rule `name` (and what it uses) part of the output.
    std::string use(const std::string & name) {
        if (used_primitives_.insert(name).second) {
            for (const auto & p : primitives()) {
                if (name != p.name) continue;
                rules_[name] = p.body;
                order_.push_back(name);
                for (const char * dep : p.uses) use(dep);
            }
        }
        return name;
    }

    std::string ws() { return use("ws"); }

    result<std::string> literal_value(const ojson & v, const std::string & path) {
        std::string text;
        try {
            text = v.dump(-1, ' ', false, ojson::error_handler_t::strict);
        } catch (const nlohmann::json::exception &) {
            return invalid(path, "a value that is not valid UTF-8");
        }
        return gbnf_literal(text);
    }

    // Keywords outside what we enforce: an error in strict mode, ignored otherwise.
    status check_keywords(const ojson & s, const std::string & path) {
        if (!options_.strict) return status::ok();
        std::string unknown;
        for (auto it = s.begin(); it != s.end(); ++it) {
            if (annotation_keywords.count(it.key()) || supported_keywords.count(it.key())) continue;
            unknown += (unknown.empty() ? "'" : ", '") + it.key() + "'";
        }
        if (!unknown.empty()) return unsupported(path, "keyword(s) " + unknown + " not supported");
        return status::ok();
    }

    result<const ojson *> resolve_ref(const std::string & ref, const std::string & path) {
        if (ref.empty() || ref[0] != '#') return unsupported(path, "$ref '" + ref + "' is not local (only '#...' refs)");
        const ojson * at = &root_;
        size_t        i = 1;
        if (i < ref.size() && ref[i] != '/') return unsupported(path, "$ref '" + ref + "' (anchors are not supported)");
        while (i < ref.size()) {
            size_t      next = ref.find('/', i + 1);
            std::string raw = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
            std::string token;
            for (size_t k = 0; k < raw.size(); ++k) {
                if (raw[k] == '~' && k + 1 < raw.size() && (raw[k + 1] == '0' || raw[k + 1] == '1')) {
                    token += raw[k + 1] == '0' ? '~' : '/';
                    ++k;
                } else if (raw[k] == '%' && k + 2 < raw.size() && std::isxdigit(uint8_t(raw[k + 1])) &&
                           std::isxdigit(uint8_t(raw[k + 2]))) {
                    token += char(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
                    k += 2;
                } else {
                    token += raw[k];
                }
            }
            if (at->is_object() && at->contains(token)) {
                at = &(*at)[token];
            } else if (at->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                       token.size() < 10 && std::stoul(token) < at->size()) {
                at = &(*at)[std::stoul(token)];
            } else {
                return invalid(path, "$ref '" + ref + "' points at nothing");
            }
            if (next == std::string::npos) break;
            i = next;
        }
        return at;
    }

    result<std::string> visit_ref(const std::string & ref, const std::string & path, uint32_t depth) {
        auto it = ref_names_.find(ref);
        if (it != ref_names_.end()) return it->second;
        SKIPPY_ASSIGN_OR_RETURN(const ojson * target, resolve_ref(ref, path));
        std::string hint = "ref-" + ref.substr(ref.rfind('/') == std::string::npos ? 1 : ref.rfind('/') + 1);
        // The name is taken before the body is known, so a recursive ref finds it.
        std::string name = fresh_name(hint);
        rules_[name] = "";
        order_.push_back(name);
        ref_names_.emplace(ref, name);
        SKIPPY_ASSIGN_OR_RETURN(std::string body, visit(*target, ref, name, depth + 1));
        rules_[name] = body;
        return name;
    }

    // Merges the schemas of an allOf (or a schema and the siblings of its anyOf)
    // where the result is exactly their intersection; refuses the rest.
    result<ojson> merge(const ojson & a_in, const ojson & b_in, const std::string & path, uint32_t depth) {
        SKIPPY_ASSIGN_OR_RETURN(ojson a, deref(a_in, path, depth));
        SKIPPY_ASSIGN_OR_RETURN(ojson b, deref(b_in, path, depth));
        if (a.is_boolean() || b.is_boolean()) {
            if (a == ojson(false) || b == ojson(false)) return invalid(path, "allOf with a false schema admits nothing");
            return a.is_boolean() ? b : a;
        }
        if (!a.is_object() || !b.is_object()) return invalid(path, "a schema must be an object or a boolean");
        // additionalProperties of one side judges the other side's properties too.
        for (int side = 0; side < 2; ++side) {
            const ojson & x = side ? b : a;
            const ojson & y = side ? a : b;
            if (x.contains("additionalProperties") && x["additionalProperties"] != ojson(true) && y.contains("properties")) {
                for (auto it = y["properties"].begin(); it != y["properties"].end(); ++it) {
                    if (!x.contains("properties") || !x["properties"].contains(it.key())) {
                        return unsupported(path, "allOf where additionalProperties of one part would judge "
                                                 "property '" + it.key() + "' of another");
                    }
                }
            }
        }
        ojson out = a;
        for (auto it = b.begin(); it != b.end(); ++it) {
            const std::string & k = it.key();
            if (!out.contains(k)) {
                out[k] = it.value();
            } else if (out[k] == it.value() || annotation_keywords.count(k)) {
                continue;
            } else if (k == "properties" && out[k].is_object() && it.value().is_object()) {
                for (auto p = it.value().begin(); p != it.value().end(); ++p) {
                    if (!out[k].contains(p.key())) out[k][p.key()] = p.value();
                    else if (out[k][p.key()] != p.value()) out[k][p.key()] = ojson{{"allOf", ojson::array({out[k][p.key()], p.value()})}};
                }
            } else if (k == "required" && out[k].is_array() && it.value().is_array()) {
                for (const auto & r : it.value()) {
                    if (std::find(out[k].begin(), out[k].end(), r) == out[k].end()) out[k].push_back(r);
                }
            } else if (k == "type") {
                SKIPPY_ASSIGN_OR_RETURN(std::vector<std::string> ta, types_of(out, path));
                SKIPPY_ASSIGN_OR_RETURN(std::vector<std::string> tb, types_of(b, path));
                ojson both = ojson::array();
                for (const auto & t : ta) {
                    for (const auto & u : tb) {
                        if (t == u || (t == "integer" && u == "number")) both.push_back(t);
                        else if (t == "number" && u == "integer") both.push_back(u);
                    }
                }
                if (both.empty()) return invalid(path, "allOf of disjoint types admits nothing");
                out[k] = both.size() == 1 ? both[0] : both;
            } else {
                return unsupported(path, "allOf with two different '" + k + "'");
            }
        }
        return out;
    }

    // A schema with a top-level $ref replaced by its target (merged with siblings).
    result<ojson> deref(const ojson & s, const std::string & path, uint32_t depth) {
        if (depth > options_.max_depth) return invalid(path, "schema nested deeper than " + std::to_string(options_.max_depth));
        if (!s.is_object() || !s.contains("$ref")) return s;
        if (!s["$ref"].is_string()) return invalid(path, "$ref must be a string");
        SKIPPY_ASSIGN_OR_RETURN(const ojson * target, resolve_ref(s["$ref"].get<std::string>(), path));
        ojson rest = s;
        rest.erase("$ref");
        return merge(*target, rest, path, depth + 1);
    }

    result<std::vector<std::string>> types_of(const ojson & s, const std::string & path) {
        std::vector<std::string> out;
        const ojson & t = s["type"];
        auto add = [&](const ojson & v) -> status {
            if (!v.is_string()) return invalid(path, "'type' must be a string or an array of strings");
            auto name = v.get<std::string>();
            if (std::find(std::begin(all_types), std::end(all_types), name) == std::end(all_types)) {
                return invalid(path, "unknown type '" + name + "'");
            }
            if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
            return status::ok();
        };
        if (t.is_array()) {
            for (const auto & v : t) SKIPPY_TRY(add(v));
            if (out.empty()) return invalid(path, "an empty 'type' list admits nothing");
        } else {
            SKIPPY_TRY(add(t));
        }
        return out;
    }

    // A value of `s`, as a GBNF expression ending with ws.
    result<std::string> visit(const ojson & s, const std::string & path, const std::string & name, uint32_t depth) {
        // Merged schemas ($ref with siblings, anyOf siblings) are visited as copies, which
        // nesting could multiply: bound the work, not only the depth.
        if (++n_visits_ > 5 * options_.max_rules) {
            return invalid(path, "schema needs more than " + std::to_string(5 * options_.max_rules) + " expansions");
        }
        if (depth > options_.max_depth) {
            return invalid(path, "schema nested deeper than " + std::to_string(options_.max_depth));
        }
        if (s.is_boolean()) {
            if (!s.get<bool>()) return invalid(path, "the schema false admits nothing");
            return use("value");
        }
        if (!s.is_object()) return invalid(path, "a schema must be an object or a boolean");
        SKIPPY_TRY(check_keywords(s, path));

        if (s.contains("$ref")) {
            if (!s["$ref"].is_string()) return invalid(path, "$ref must be a string");
            bool siblings = false;
            for (auto it = s.begin(); it != s.end(); ++it) {
                if (it.key() != "$ref" && !annotation_keywords.count(it.key())) siblings = true;
            }
            if (!siblings) return visit_ref(s["$ref"].get<std::string>(), path, depth);
            SKIPPY_ASSIGN_OR_RETURN(ojson merged, deref(s, path, depth));
            return visit(merged, path, name, depth + 1);
        }
        if (s.contains("allOf")) {
            const ojson & all = s["allOf"];
            if (!all.is_array() || all.empty()) return invalid(path, "allOf must be a non-empty array");
            ojson merged = s;
            merged.erase("allOf");
            for (size_t i = 0; i < all.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(merged, merge(merged, all[i], path + "/allOf/" + std::to_string(i), depth + 1));
            }
            return visit(merged, path, name, depth + 1);
        }
        for (const char * key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            const ojson & any = s[key];
            if (!any.is_array() || any.empty()) return invalid(path, std::string(key) + " must be a non-empty array");
            ojson siblings = s;
            siblings.erase(key);
            bool has_siblings = false;
            for (auto it = siblings.begin(); it != siblings.end(); ++it) {
                if (!annotation_keywords.count(it.key())) has_siblings = true;
            }
            std::string body;
            for (size_t i = 0; i < any.size(); ++i) {
                std::string sub = path + "/" + key + "/" + std::to_string(i);
                ojson branch = any[i];
                if (has_siblings) {
                    SKIPPY_ASSIGN_OR_RETURN(branch, merge(siblings, any[i], sub, depth + 1));
                }
                SKIPPY_ASSIGN_OR_RETURN(std::string alt, visit(branch, sub, name + "-" + std::to_string(i), depth + 1));
                body += (i ? " | " : "") + alt;
            }
            return add_rule(name, body);
        }
        if (s.contains("const")) return constant_values({s["const"]}, s, path, name);
        if (s.contains("enum")) {
            if (!s["enum"].is_array() || s["enum"].empty()) return invalid(path, "enum must be a non-empty array");
            std::vector<ojson> values(s["enum"].begin(), s["enum"].end());
            return constant_values(values, s, path, name);
        }

        std::vector<std::string> types;
        if (s.contains("type")) {
            SKIPPY_ASSIGN_OR_RETURN(types, types_of(s, path));
        } else {
            // No type: the keywords present say which kind of value they constrain;
            // writing only that kind is a subset of what the schema admits.
            static const std::vector<std::pair<const char *, std::vector<const char *>>> hints = {
                {"object", {"properties", "additionalProperties", "required"}},
                {"array", {"items", "prefixItems", "minItems", "maxItems"}},
                {"string", {"minLength", "maxLength", "pattern", "format"}},
                {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
            };
            for (const auto & [type, keys] : hints) {
                for (const char * k : keys) {
                    if (s.contains(k) && (types.empty() || types.back() != type)) types.push_back(type);
                }
            }
            if (types.empty()) return use("value");
        }
        if (types.size() > 1) {
            std::string body;
            for (size_t i = 0; i < types.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(std::string alt, visit_type(s, types[i], path, name + "-" + types[i], depth));
                body += (i ? " | " : "") + alt;
            }
            return add_rule(name, body);
        }
        return visit_type(s, types[0], path, name, depth);
    }

    result<std::string> constant_values(const std::vector<ojson> & values, const ojson & s, const std::string & path,
                                        const std::string & name) {
        for (auto it = s.begin(); it != s.end(); ++it) {
            const std::string & k = it.key();
            if (k == "enum" || k == "const" || k == "type" || annotation_keywords.count(k)) continue;
            if (options_.strict) return unsupported(path, "'" + k + "' beside enum/const");
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            SKIPPY_ASSIGN_OR_RETURN(types, types_of(s, path));
        }
        std::string body;
        size_t      n = 0;
        for (const auto & v : values) {
            if (!types.empty()) {
                std::string t = json_type_of(v);
                bool        ok = std::find(types.begin(), types.end(), t) != types.end() ||
                          (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
                if (!ok) continue;
            }
            SKIPPY_ASSIGN_OR_RETURN(std::string lit, literal_value(v, path));
            body += (n++ ? " | " : "") + lit;
        }
        if (n == 0) return invalid(path, "no enum/const value has the schema's type");
        return add_rule(name, paren(body) + " " + ws());
    }

    result<std::string> visit_type(const ojson & s, const std::string & type, const std::string & path,
                                   const std::string & name, uint32_t depth) {
        if (type == "object") return visit_object(s, path, name, depth);
        if (type == "array") return visit_array(s, path, name, depth);
        if (type == "string") return visit_string(s, path, name);
        if (type == "integer") return visit_integer(s, path, name);
        if (type == "number") {
            for (const char * k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
                if (s.contains(k) && options_.strict) {
                    return unsupported(path, std::string("'") + k + "' on a number that may be fractional (use integer)");
                }
            }
            return use("number") + " " + ws();
        }
        if (type == "boolean") return use("boolean") + " " + ws();
        return use("null") + " " + ws();
    }

    // --- objects ---------------------------------------------------------------------

    // Keys (canonical JSON strings, quotes included) that are none of `keys`: a trie of
    // the keys, each node allowing the key to end (unless a key ends there), to go on
    // with a child's character, or to leave the trie with any other character.
    result<std::string> key_not_in(const std::vector<std::string> & keys, const std::string & name) {
        struct trie_node {
            std::map<uint32_t, size_t> children;
            bool                       is_key = false;
        };
        std::vector<trie_node> nodes(1);
        for (const auto & k : keys) {
            size_t at = 0;
            for (size_t i = 0; i < k.size();) {
                uint32_t cp = 0;
                size_t   n = detail::decode_utf8(k, i, cp);
                if (n == 0) return invalid(name, "a property name that is not valid UTF-8");
                i += n;
                auto it = nodes[at].children.find(cp);
                if (it == nodes[at].children.end()) {
                    nodes.emplace_back();
                    it = nodes[at].children.emplace(cp, nodes.size() - 1).first;
                }
                at = it->second;
            }
            nodes[at].is_key = true;
        }
        if (nodes.size() > options_.max_rules) return invalid(name, "property names too long for additionalProperties");
        const std::string any = use("key-char");
        std::vector<std::string> node_rule(nodes.size());
        for (size_t v = 0; v < nodes.size(); ++v) node_rule[v] = fresh_name(name + "-key-" + std::to_string(v));
        for (size_t v = 0; v < nodes.size(); ++v) {
            std::string body;
            auto alt = [&](const std::string & a) { body += (body.empty() ? "" : " | ") + a; };
            if (!nodes[v].is_key) alt("\"\\\"\"");
            cp_ranges taken;
            for (auto [cp, child] : nodes[v].children) {
                alt(detail::json_encoded_char({{cp, cp}}) + " " + node_rule[child]);
                taken.emplace_back(cp, cp);
            }
            std::string other = detail::json_encoded_char(detail::complement(taken));
            if (!other.empty()) alt(other + " " + any + "* \"\\\"\"");
            rules_[node_rule[v]] = body.empty() ? "[]" : body;
            order_.push_back(node_rule[v]);
        }
        return "\"\\\"\" " + node_rule[0];
    }

    result<std::string> visit_object(const ojson & s, const std::string & path, const std::string & name, uint32_t depth) {
        static const ojson empty_object = ojson::object();
        const ojson & props = s.contains("properties") ? s["properties"] : empty_object;
        if (!props.is_object()) return invalid(path, "properties must be an object");
        std::set<std::string> required;
        std::vector<std::string> required_order;
        if (s.contains("required")) {
            if (!s["required"].is_array()) return invalid(path, "required must be an array");
            for (const auto & r : s["required"]) {
                if (!r.is_string()) return invalid(path, "required must list strings");
                if (required.insert(r.get<std::string>()).second) required_order.push_back(r.get<std::string>());
            }
        }
        const ojson * additional = nullptr;  // nullptr: none allowed
        if (s.contains("additionalProperties")) {
            const ojson & a = s["additionalProperties"];
            if (!a.is_boolean() && !a.is_object()) return invalid(path, "additionalProperties must be a boolean or a schema");
            if (a != ojson(false)) additional = &a;
        }

        struct prop {
            std::string key;
            const ojson * schema;
            bool          required;
        };
        std::vector<prop> list;
        std::vector<std::string> declared;
        for (auto it = props.begin(); it != props.end(); ++it) {
            declared.push_back(it.key());
            if (it.value() == ojson(false)) {
                if (required.count(it.key())) return invalid(path, "required property '" + it.key() + "' has schema false");
                continue;
            }
            list.push_back({it.key(), &it.value(), required.count(it.key()) > 0});
        }
        for (const auto & r : required_order) {
            if (props.contains(r)) continue;
            // Required but not declared: it must be there, judged by additionalProperties.
            if (!additional) return invalid(path, "required property '" + r + "' is not allowed (no such property)");
            declared.push_back(r);
            list.push_back({r, additional, true});
        }

        const std::string w = ws();
        std::vector<std::string> kv(list.size());
        for (size_t i = 0; i < list.size(); ++i) {
            std::string sub = path + "/properties/" + pointer_token(list[i].key);
            SKIPPY_ASSIGN_OR_RETURN(std::string value, visit(*list[i].schema, sub, name + "-" + list[i].key, depth + 1));
            SKIPPY_ASSIGN_OR_RETURN(std::string key, literal_value(ojson(list[i].key), sub));
            SKIPPY_ASSIGN_OR_RETURN(kv[i], add_rule(name + "-" + list[i].key + "-kv",
                                                    key + " " + w + " \":\" " + w + " " + value));
        }
        std::string extra_kv;
        if (additional) {
            std::string key;
            if (declared.empty()) {
                key = use("string");
            } else {
                SKIPPY_ASSIGN_OR_RETURN(key, key_not_in(declared, name));
            }
            SKIPPY_ASSIGN_OR_RETURN(std::string value, visit(*additional, path + "/additionalProperties",
                                                             name + "-additional", depth + 1));
            SKIPPY_ASSIGN_OR_RETURN(extra_kv, add_rule(name + "-additional-kv", key + " " + w + " \":\" " + w + " " + value));
        }

        // after[i]: properties i.. when one is already written (each needs a comma);
        // first[i]: the same when none is written yet. Required ones cannot be skipped.
        const size_t n = list.size();
        std::vector<std::string> after(n + 1), first(n + 1);
        after[n] = additional ? paren("\",\" " + w + " " + extra_kv) + "*" : "";
        first[n] = additional ? paren(extra_kv + " " + paren("\",\" " + w + " " + extra_kv) + "*") + "?" : "";
        for (size_t k = n; k-- > 0;) {
            std::string comma_kv = "\",\" " + w + " " + kv[k];
            std::string a = (list[k].required ? comma_kv : paren(comma_kv) + "?") + " " + after[k + 1];
            SKIPPY_ASSIGN_OR_RETURN(after[k], add_rule(name + "-after-" + std::to_string(k), a));
            std::string f = kv[k] + " " + after[k + 1];
            if (!list[k].required) f += " | " + (first[k + 1].empty() ? "\"\"" : first[k + 1]);
            SKIPPY_ASSIGN_OR_RETURN(first[k], add_rule(name + "-first-" + std::to_string(k), f));
        }
        return add_rule(name, "\"{\" " + w + " " + first[0] + " \"}\" " + w);
    }

    // --- arrays ----------------------------------------------------------------------

    // A count (minItems, maxLength, ...). Counts become repetitions, which compile()
    // bounds (grammar_limits::max_repetition): above that a minimum is unsupported, and
    // so is a maximum in strict mode; lax mode drops the maximum (-1: none).
    static constexpr int64_t max_count = 10000;

    result<int64_t> count_keyword(const ojson & s, const char * key, const std::string & path, bool is_max) {
        const ojson & v = s[key];
        if (!is_integer_valued(v) || v.get<double>() < 0) return invalid(path, std::string(key) + " must be a non-negative integer");
        double d = v.get<double>();
        if (d > double(max_count)) {
            if (is_max && !options_.strict) return int64_t{-1};
            return unsupported(path, std::string(key) + " above " + std::to_string(max_count));
        }
        return int64_t(d);
    }

    result<std::string> visit_array(const ojson & s, const std::string & path, const std::string & name, uint32_t depth) {
        if (s.contains("uniqueItems") && s["uniqueItems"] == ojson(true) && options_.strict) {
            return unsupported(path, "uniqueItems: true not supported");
        }
        std::vector<const ojson *> prefix;
        const ojson * items = nullptr;  // nullptr: no items past the prefix
        static const ojson any_value = true;
        items = &any_value;
        std::string items_path = path + "/items";
        if (s.contains("prefixItems")) {
            if (!s["prefixItems"].is_array()) return invalid(path, "prefixItems must be an array");
            for (const auto & p : s["prefixItems"]) prefix.push_back(&p);
            if (s.contains("items")) items = &s["items"];
        } else if (s.contains("items") && s["items"].is_array()) {
            // The older tuple form: items [...] with additionalItems.
            for (const auto & p : s["items"]) prefix.push_back(&p);
            if (s.contains("additionalItems")) items = &s["additionalItems"];
            items_path = path + "/additionalItems";
        } else if (s.contains("items")) {
            items = &s["items"];
        }
        if (*items == ojson(false)) items = nullptr;

        int64_t min = 0, max = -1;
        if (s.contains("minItems")) { SKIPPY_ASSIGN_OR_RETURN(min, count_keyword(s, "minItems", path, false)); }
        if (s.contains("maxItems")) { SKIPPY_ASSIGN_OR_RETURN(max, count_keyword(s, "maxItems", path, true)); }
        const auto k = int64_t(prefix.size());
        if (!items && (max < 0 || max > k)) max = k;
        if (max >= 0 && min > max) return invalid(path, "minItems above the items the array may hold");

        const std::string w = ws();
        std::vector<std::string> elem;
        for (int64_t i = 0; i < k && (max < 0 || i < max); ++i) {
            SKIPPY_ASSIGN_OR_RETURN(std::string e, visit(*prefix[size_t(i)], path + "/prefixItems/" + std::to_string(i),
                                                         name + "-" + std::to_string(i), depth + 1));
            elem.push_back(e);
        }
        std::string item;
        if (items) {
            SKIPPY_ASSIGN_OR_RETURN(item, visit(*items, items_path, name + "-item", depth + 1));
        }
        // The homogeneous tail once `i` elements are written.
        auto tail = [&](int64_t i) -> std::string {
            if (!items) return "";
            int64_t lo = std::max<int64_t>(0, min - i);
            int64_t hi = max < 0 ? -1 : max - i;
            if (hi == 0) return "";
            if (i > 0) return repeat("\",\" " + w + " " + item, lo, hi);
            std::string rest = repeat("\",\" " + w + " " + item, std::max<int64_t>(0, lo - 1), hi < 0 ? -1 : hi - 1);
            std::string seq = item + (rest.empty() ? "" : " " + rest);
            return lo == 0 ? paren(seq) + "?" : seq;
        };
        // rest(i): elements i.. (prefix ones by position), as rules so nothing nests deep.
        std::string rest = tail(int64_t(elem.size()));
        for (auto i = int64_t(elem.size()); i-- > 0;) {
            std::string e = (i == 0 ? "" : "\",\" " + w + " ") + elem[size_t(i)] + (rest.empty() ? "" : " " + rest);
            std::string r = i < min ? e : paren(e) + "?";
            SKIPPY_ASSIGN_OR_RETURN(rest, add_rule(name + "-from-" + std::to_string(i), r));
        }
        return add_rule(name, "\"[\" " + w + " " + rest + " \"]\" " + w);
    }

    // --- strings and numbers -----------------------------------------------------------

    result<std::string> visit_string(const ojson & s, const std::string & path, const std::string & name) {
        int64_t min = 0, max = -1;
        if (s.contains("minLength")) { SKIPPY_ASSIGN_OR_RETURN(min, count_keyword(s, "minLength", path, false)); }
        if (s.contains("maxLength")) { SKIPPY_ASSIGN_OR_RETURN(max, count_keyword(s, "maxLength", path, true)); }
        if (max >= 0 && min > max) return invalid(path, "minLength above maxLength");
        const bool lengths = s.contains("minLength") || s.contains("maxLength");
        const std::string quote = "\"\\\"\"";
        const std::string w = ws();
        if (s.contains("format")) {
            if (!s["format"].is_string()) return invalid(path, "format must be a string");
            auto format = s["format"].get<std::string>();
            if (supported_formats.count(format)) {
                if ((lengths || s.contains("pattern")) && options_.strict) {
                    return unsupported(path, "format together with minLength, maxLength or pattern");
                }
                return add_rule(name, quote + " " + use(format) + " " + quote + " " + w);
            }
            if (options_.strict) return unsupported(path, "format '" + format + "' not supported");
        }
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) return invalid(path, "pattern must be a string");
            if (lengths && options_.strict) return unsupported(path, "pattern together with minLength or maxLength");
            auto body = detail::regex_to_gbnf(s["pattern"].get<std::string>(), use("char"));
            if (body.is_ok()) return add_rule(name, quote + " " + *body + " " + quote + " " + w);
            if (options_.strict || body.error().code() != error_code::unsupported) {
                return make_error(body.error().code(), "json schema " + path + ": " + body.error().message());
            }
        }
        if (lengths) {
            return add_rule(name, quote + " " + repeat(use("char"), min, max) + " " + quote + " " + w);
        }
        return use("string") + " " + w;
    }

    result<std::string> visit_integer(const ojson & s, const std::string & path, const std::string & name) {
        constexpr double limit = 1e18;
        bool    has_min = false, has_max = false;
        int64_t min = 0, max = 0;
        auto bound = [&](const char * key, bool lower, bool exclusive) -> status {
            if (!s.contains(key)) return status::ok();
            const ojson & v = s[key];
            if (v.is_boolean()) return status::ok();  // draft 4's exclusive flags: read with the bound
            int64_t exact = 0;
            bool    is_exact = false;
            if (!v.is_number()) return invalid(path, std::string(key) + " must be a number");
            // Integers exactly (a double loses digits past 2^53); others through a double.
            double d = 0;
            if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
                auto i = v.get<int64_t>();
                if (i > int64_t(limit) || i < -int64_t(limit)) d = double(i);
                else d = 0, exact = i, is_exact = true;
            } else {
                d = v.get<double>();
            }
            if (!is_exact && (!std::isfinite(d) || std::fabs(d) > limit)) {
                if (options_.strict) return unsupported(path, std::string(key) + " beyond +-1e18");
                return status::ok();
            }
            bool excl = exclusive;
            // Draft 4: "exclusiveMinimum": true beside "minimum".
            if (!exclusive) {
                const char * flag = lower ? "exclusiveMinimum" : "exclusiveMaximum";
                excl = s.contains(flag) && s[flag] == ojson(true);
            }
            if (lower) {
                int64_t b = is_exact ? (excl ? exact + 1 : exact) : int64_t(excl ? std::floor(d) + 1 : std::ceil(d));
                if (!has_min || b > min) min = b;
                has_min = true;
            } else {
                int64_t b = is_exact ? (excl ? exact - 1 : exact) : int64_t(excl ? std::ceil(d) - 1 : std::floor(d));
                if (!has_max || b < max) max = b;
                has_max = true;
            }
            return status::ok();
        };
        SKIPPY_TRY(bound("minimum", true, false));
        SKIPPY_TRY(bound("exclusiveMinimum", true, true));
        SKIPPY_TRY(bound("maximum", false, false));
        SKIPPY_TRY(bound("exclusiveMaximum", false, true));
        const std::string w = ws();
        if (!has_min && !has_max) return use("integer") + " " + w;
        if (has_min && has_max && min > max) return invalid(path, "minimum above maximum admits no integer");
        std::vector<std::string> alts;
        // Negative values, as "-" and their magnitude.
        if (!has_min || min < 0) {
            uint64_t mag_lo = has_max && max < 0 ? uint64_t(-(max + 1)) + 1 : 1;
            if (!has_min) {
                alts.push_back("\"-\" " + paren(naturals_from(mag_lo)));
            } else {
                uint64_t mag_hi = uint64_t(-(min + 1)) + 1;
                alts.push_back("\"-\" " + paren(naturals_between(mag_lo, mag_hi)));
            }
        }
        if (!has_max || max >= 0) {
            uint64_t lo = has_min && min > 0 ? uint64_t(min) : 0;
            if (!has_max) alts.push_back(naturals_from(lo));
            else alts.push_back(naturals_between(lo, uint64_t(max)));
        }
        std::string body;
        for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + paren(alts[i]);
        return add_rule(name, paren(body) + " " + w);
    }
};

}  // namespace

result<std::string> gbnf_from_json_schema(const nlohmann::ordered_json & schema, const json_schema_options & options) {
    try {
        return schema_converter(schema, options).run();
    } catch (const nlohmann::json::exception & e) {
        // A value of an unexpected type somewhere we read one.
        return make_error(error_code::invalid_argument, std::string("json schema: ") + e.what());
    }
}

result<std::string> gbnf_from_json_schema(std::string_view schema_json, const json_schema_options & options) {
    nlohmann::ordered_json schema = nlohmann::ordered_json::parse(schema_json, nullptr, false);
    if (schema.is_discarded()) return make_error(error_code::invalid_argument, "json schema: not valid JSON");
    return gbnf_from_json_schema(schema, options);
}

std::string gbnf_json_object() {
    auto g = gbnf_from_json_schema(nlohmann::ordered_json{{"type", "object"}, {"additionalProperties", true}},
                                   json_schema_options{});
    return g.is_ok() ? *g : std::string();
}

}  // namespace skippy::grammar
