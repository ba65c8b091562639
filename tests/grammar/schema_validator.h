// A small JSON schema validator for the tests, written independently of the converter:
// it checks documents against the keywords the test corpus uses, with JSON schema's
// own semantics (an absent additionalProperties admits anything, patterns search,
// lengths count code points).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string>

namespace skippy::grammar::testing {

using ojson = nlohmann::ordered_json;

class schema_validator {
public:
    explicit schema_validator(const ojson & root) : root_(root) {}

    // True when `doc` is valid; otherwise `why` says where it is not.
    bool validate(const ojson & doc, std::string * why = nullptr) {
        why_.clear();
        bool ok = check(root_, doc, "#", 0);
        if (why) *why = why_;
        return ok;
    }

private:
    const ojson & root_;
    std::string   why_;

    bool fail(const std::string & where, const std::string & what) {
        if (why_.empty()) why_ = where + ": " + what;
        return false;
    }

    const ojson * resolve(const std::string & ref) {
        const ojson * at = &root_;
        size_t        i = 1;
        while (i < ref.size()) {
            size_t      next = ref.find('/', i + 1);
            std::string token = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
            if (!at->is_object() || !at->contains(token)) return nullptr;
            at = &(*at)[token];
            if (next == std::string::npos) break;
            i = next;
        }
        return at;
    }

    static size_t code_points(const std::string & s) {
        size_t n = 0;
        for (unsigned char c : s) n += (c & 0xC0) != 0x80;
        return n;
    }

    static bool is_integer(const ojson & v) {
        if (v.is_number_integer()) return true;
        if (!v.is_number_float()) return false;
        double d = v.get<double>();
        return std::isfinite(d) && std::floor(d) == d;
    }

    static bool has_type(const ojson & v, const std::string & t) {
        if (t == "object") return v.is_object();
        if (t == "array") return v.is_array();
        if (t == "string") return v.is_string();
        if (t == "boolean") return v.is_boolean();
        if (t == "null") return v.is_null();
        if (t == "number") return v.is_number();
        if (t == "integer") return v.is_number() && is_integer(v);
        return false;
    }

    static int digits(const std::string & s, size_t at, size_t n) {
        int v = 0;
        for (size_t i = at; i < at + n; ++i) v = v * 10 + (s[i] - '0');
        return v;
    }

    static bool valid_date(const std::string & s) {
        static const std::regex re(R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}$)");
        if (!std::regex_match(s, re)) return false;
        int  y = digits(s, 0, 4), m = digits(s, 5, 2), d = digits(s, 8, 2);
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (m < 1 || m > 12 || d < 1) return false;
        return d <= days[m - 1] + (m == 2 && leap ? 1 : 0);
    }

    static bool valid_time(const std::string & s) {
        static const std::regex re(R"(^([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2}))$)");
        std::smatch mt;
        if (!std::regex_match(s, mt, re)) return false;
        if (std::stoi(mt[1]) > 23 || std::stoi(mt[2]) > 59 || std::stoi(mt[3]) > 59) return false;
        if (mt[6].matched && (std::stoi(mt[6]) > 23 || std::stoi(mt[7]) > 59)) return false;
        return true;
    }

    static bool valid_format(const std::string & format, const std::string & s) {
        if (format == "date") return valid_date(s);
        if (format == "time") return valid_time(s);
        if (format == "date-time") {
            size_t t = s.find('T');
            return t == 10 && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
        }
        if (format == "uuid") {
            static const std::regex re(R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
            return std::regex_match(s, re);
        }
        return true;  // formats the corpus does not use are annotations
    }

    bool check(const ojson & s, const ojson & v, const std::string & at, int depth) {
        if (depth > 200) return fail(at, "too deep");
        if (s.is_boolean()) return s.get<bool>() || fail(at, "schema false");
        if (s.contains("$ref")) {
            const ojson * target = resolve(s["$ref"].get<std::string>());
            if (!target) return fail(at, "bad $ref");
            if (!check(*target, v, at, depth + 1)) return false;
        }
        if (s.contains("type")) {
            bool ok = false;
            if (s["type"].is_array()) {
                for (const auto & t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
            } else {
                ok = has_type(v, s["type"].get<std::string>());
            }
            if (!ok) return fail(at, "type");
        }
        if (s.contains("const") && !(s["const"] == v)) return fail(at, "const");
        if (s.contains("enum")) {
            bool found = false;
            for (const auto & e : s["enum"]) found = found || e == v;
            if (!found) return fail(at, "enum");
        }
        if (s.contains("allOf")) {
            for (const auto & sub : s["allOf"]) {
                if (!check(sub, v, at + "/allOf", depth + 1)) return false;
            }
        }
        if (s.contains("anyOf")) {
            bool any = false;
            for (const auto & sub : s["anyOf"]) {
                schema_validator inner(root_);
                any = any || inner.check(sub, v, at, depth + 1);
            }
            if (!any) return fail(at, "anyOf");
        }
        if (s.contains("oneOf")) {
            int n = 0;
            for (const auto & sub : s["oneOf"]) {
                schema_validator inner(root_);
                n += inner.check(sub, v, at, depth + 1);
            }
            if (n != 1) return fail(at, "oneOf matched " + std::to_string(n));
        }
        if (v.is_object()) {
            if (s.contains("required")) {
                for (const auto & r : s["required"]) {
                    if (!v.contains(r.get<std::string>())) return fail(at, "missing " + r.get<std::string>());
                }
            }
            for (auto it = v.begin(); it != v.end(); ++it) {
                const std::string key = it.key();
                if (s.contains("properties") && s["properties"].contains(key)) {
                    if (!check(s["properties"][key], it.value(), at + "/" + key, depth + 1)) return false;
                } else if (s.contains("additionalProperties")) {
                    if (!check(s["additionalProperties"], it.value(), at + "/" + key, depth + 1)) return false;
                }
            }
        }
        if (v.is_array()) {
            size_t n_prefix = 0;
            if (s.contains("prefixItems")) {
                n_prefix = s["prefixItems"].size();
                for (size_t i = 0; i < n_prefix && i < v.size(); ++i) {
                    if (!check(s["prefixItems"][i], v[i], at + "/" + std::to_string(i), depth + 1)) return false;
                }
            }
            if (s.contains("items")) {
                for (size_t i = n_prefix; i < v.size(); ++i) {
                    if (!check(s["items"], v[i], at + "/" + std::to_string(i), depth + 1)) return false;
                }
            }
            if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return fail(at, "minItems");
            if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return fail(at, "maxItems");
        }
        if (v.is_string()) {
            const auto str = v.get<std::string>();
            size_t     n = code_points(str);
            if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return fail(at, "minLength");
            if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return fail(at, "maxLength");
            if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
                return fail(at, "pattern");
            }
            if (s.contains("format") && !valid_format(s["format"].get<std::string>(), str)) return fail(at, "format");
        }
        if (v.is_number()) {
            double d = v.get<double>();
            if (s.contains("minimum") && d < s["minimum"].get<double>()) return fail(at, "minimum");
            if (s.contains("maximum") && d > s["maximum"].get<double>()) return fail(at, "maximum");
            if (s.contains("exclusiveMinimum") && d <= s["exclusiveMinimum"].get<double>()) return fail(at, "exclusiveMinimum");
            if (s.contains("exclusiveMaximum") && d >= s["exclusiveMaximum"].get<double>()) return fail(at, "exclusiveMaximum");
        }
        return true;
    }
};

}  // namespace skippy::grammar::testing
