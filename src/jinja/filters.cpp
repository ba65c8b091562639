// The filters, as jinja2 3.1 defines them (tojson as transformers overrides it).
#include "jinja/builtins.h"

#include "jinja/py_text.h"
#include "jinja/renderer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace skippy::jinja::detail {

namespace {

using params_t = std::initializer_list<std::string_view>;

struct bound_args {
    std::vector<value> v;
    std::vector<bool>  given;
    bool has(size_t i) const { return given[i]; }
};

result<bound_args> bind(std::string_view fn, params_t params, const call_args & a) {
    bound_args b;
    std::vector<std::string_view> p(params);
    SKIPPY_TRY(bind_args(fn, p, a, b.v, b.given));
    return b;
}

result<int64_t> int_param(const bound_args & b, size_t i, int64_t dflt) {
    if (!b.has(i)) return dflt;
    if (b.v[i].is_undefined()) return undefined_use(b.v[i]);
    if (!b.v[i].is_int_like())
        return type_error("'" + std::string(type_name(b.v[i])) + "' object cannot be interpreted as an integer");
    return b.v[i].as_int();
}

bool bool_param(const bound_args & b, size_t i, bool dflt) { return b.has(i) ? truthy(b.v[i]) : dflt; }

value ignore_case(const value & v) { return v.is_string() ? value::string(text::lower(v.str())) : v; }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (getitem rules).
struct attr_path {
    std::vector<value> parts;
};

attr_path make_path(const value & attribute) {
    attr_path p;
    if (attribute.is_none() || attribute.is_undefined()) return p;
    if (!attribute.is_string()) { p.parts.push_back(attribute); return p; }
    std::string sep = ".";
    for (auto & part : text::split(attribute.str(), &sep, -1)) {
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && part.size() < 19) p.parts.push_back(value::integer(std::strtoll(part.c_str(), nullptr, 10)));
        else p.parts.push_back(value::string(part));
    }
    return p;
}

result<value> follow(renderer & r, const attr_path & p, value item, const value * dflt = nullptr) {
    for (const auto & part : p.parts) {
        SKIPPY_ASSIGN_OR_RETURN(item, r.getitem(item, part));
        if (dflt && item.is_undefined()) item = *dflt;
    }
    return item;
}

// Python's sorted(items, key=...) with error capture: stable, ascending, `reverse`
// keeps the stability of equal keys as Python does.
status sort_by_keys(std::vector<value> & items, std::vector<value> & keys, bool reverse) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    status st;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        if (!st.is_ok()) return false;
        auto res = reverse ? less(keys[y], keys[x]) : less(keys[x], keys[y]);
        if (!res.is_ok()) { st = res.error(); return false; }
        return *res;
    });
    SKIPPY_TRY(st);
    std::vector<value> out;
    out.reserve(items.size());
    for (size_t i : order) out.push_back(std::move(items[i]));
    items = std::move(out);
    return status::ok();
}

bool parse_py_int(std::string_view s, int base, int64_t & out) {
    std::string t = text::strip(s, nullptr, true, true);
    std::string digits;
    size_t i = 0;
    bool neg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
    if (base == 16 || base == 8 || base == 2 || base == 0) {
        if (i + 1 < t.size() && t[i] == '0') {
            char x = static_cast<char>(t[i + 1] | 0x20);
            int b = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
            if (b && (base == 0 || base == b)) { base = b; i += 2; if (i < t.size() && t[i] == '_') ++i; }
        }
        if (base == 0) base = 10;
    }
    if (base < 2 || base > 36) return false;
    bool last_us = true;
    for (; i < t.size(); ++i) {
        char c = t[i];
        if (c == '_') { if (last_us) return false; last_us = true; continue; }
        int d = (c >= '0' && c <= '9') ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) return false;
        digits += c;
        last_us = false;
    }
    if (digits.empty() || last_us) return false;
    errno = 0;
    unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) return false;
    out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    return true;
}

bool parse_py_float(std::string_view s, double & out) {
    std::string t = text::strip(s, nullptr, true, true);
    std::string lower = text::lower(t);
    std::string body = lower;
    double sign = 1;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) { sign = body[0] == '-' ? -1 : 1; body = body.substr(1); }
    if (body == "inf" || body == "infinity") { out = sign * INFINITY; return true; }
    if (body == "nan") { out = NAN; return true; }
    std::string clean;
    bool prev_digit = false;
    for (size_t i = 0; i < t.size(); ++i) {
        char c = t[i];
        if (c == '_') {
            if (!prev_digit || i + 1 >= t.size() || !(t[i + 1] >= '0' && t[i + 1] <= '9')) return false;
            continue;
        }
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
        prev_digit = c >= '0' && c <= '9';
        clean += c;
    }
    if (clean.empty()) return false;
    char * end = nullptr;
    out = std::strtod(clean.c_str(), &end);
    return end && *end == '\0';
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

result<value> do_round(const value & v, const bound_args & b) {
    SKIPPY_ASSIGN_OR_RETURN(int64_t precision, int_param(b, 0, 0));
    std::string method = "common";
    if (b.has(1)) {
        if (!b.v[1].is_string()) return type_error("method must be common, ceil or floor");
        method = b.v[1].str();
    }
    if (method != "common" && method != "ceil" && method != "floor")
        return type_error("method must be common, ceil or floor");
    if (v.is_undefined()) return undefined_use(v);
    if (!v.is_number()) return type_error("type " + std::string(type_name(v)) + " doesn't define __round__ method");
    precision = std::clamp<int64_t>(precision, -400, 400);
    double scale = std::pow(10.0, static_cast<double>(precision));
    if (method != "common") {
        double x = v.as_float() * scale;
        double y = method == "ceil" ? std::ceil(x) : std::floor(x);
        return value::floating(y / scale);
    }
    if (v.is_int_like()) {
        if (precision >= 0) return value::integer(v.as_int());
        double q = std::nearbyint(static_cast<double>(v.as_int()) * scale);
        return value::integer(static_cast<int64_t>(q / scale));
    }
    double x = v.as_float();
    if (!std::isfinite(x)) return value::floating(x);
    if (precision >= 0) {
        int digits = static_cast<int>(std::min<int64_t>(precision, 340));
        int need = std::snprintf(nullptr, 0, "%.*f", digits, x);
        std::string buf(static_cast<size_t>(std::max(need, 0)) + 1, '\0');
        std::snprintf(buf.data(), buf.size(), "%.*f", digits, x);
        return value::floating(std::strtod(buf.c_str(), nullptr));
    }
    return value::floating(std::nearbyint(x * scale) / scale);
}

result<value> do_indent(renderer & r, const value & v, const bound_args & b) {
    if (v.is_undefined()) return undefined_use(v);
    if (!v.is_string()) return type_error("unsupported operand type(s) for +=: '" + std::string(type_name(v)) + "' and 'str'");
    std::string ind = "    ";
    if (b.has(0)) {
        if (b.v[0].is_string()) ind = b.v[0].str();
        else {
            SKIPPY_ASSIGN_OR_RETURN(int64_t w, int_param(b, 0, 4));
            SKIPPY_TRY(r.check_string(static_cast<size_t>(std::clamp<int64_t>(w, 0, INT32_MAX))));
            ind = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
        }
    }
    bool first = bool_param(b, 1, false), blank = bool_param(b, 2, false);
    std::string s = v.str() + "\n";
    std::vector<std::string> lines = text::splitlines(s, false);
    SKIPPY_TRY(r.check_string(s.size() + lines.size() * ind.size()));
    std::string out;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) {
            if (i) out += "\n" + ind;
            out += lines[i];
        }
    } else if (!lines.empty()) {
        out = lines[0];
        for (size_t i = 1; i < lines.size(); ++i) {
            out += "\n";
            if (!lines[i].empty()) out += ind;
            out += lines[i];
        }
    }
    if (first) out = ind + out;
    return value::string(std::move(out));
}

result<value> do_tojson(renderer & r, const value & v, const bound_args & b) {
    json_options o;
    o.ensure_ascii = bool_param(b, 0, false);
    if (b.has(1) && !b.v[1].is_none()) {
        const value & ind = b.v[1];
        o.indent_set = true;
        if (ind.is_string()) o.indent = ind.str();
        else if (ind.is_int_like()) {
            SKIPPY_TRY(r.check_string(static_cast<size_t>(std::clamp<int64_t>(ind.as_int(), 0, INT32_MAX))));
            o.indent = std::string(static_cast<size_t>(std::max<int64_t>(ind.as_int(), 0)), ' ');
        } else {
            return type_error("can't multiply sequence by non-int of type '" + std::string(type_name(ind)) + "'");
        }
    }
    if (b.has(2) && !b.v[2].is_none()) {
        const value & sep = b.v[2];
        if (!sep.is_sequence() || sep.items().size() != 2 || !sep.items()[0].is_string() || !sep.items()[1].is_string())
            return type_error("separators must be a pair of strings");
        o.separators_set = true;
        o.item_sep = sep.items()[0].str();
        o.key_sep = sep.items()[1].str();
    }
    o.sort_keys = bool_param(b, 3, false);
    o.max_bytes = r.lim().max_output_bytes;
    SKIPPY_ASSIGN_OR_RETURN(std::string s, to_json(v, o));
    SKIPPY_TRY(r.charge(s.size() / 16));
    return value::string(std::move(s));
}

result<value> do_truncate(renderer & r, const value & v, const bound_args & b) {
    if (!v.is_string()) {
        // jinja2 measures the value with len() and slices it; anything but a short
        // sequence fails, so only those are kept.
        size_t n = 0;
        if (v.is_sequence()) n = v.items().size();
        else if (v.is(vtype::dict)) n = v.dict_ref().entries.size();
        else if (!v.is_undefined()) return type_error("object of type '" + std::string(type_name(v)) + "' has no len()");
        SKIPPY_ASSIGN_OR_RETURN(int64_t length, int_param(b, 0, 255));
        if (static_cast<int64_t>(n) <= length + 5) return v;
        return type_error("truncate needs a string");
    }
    const std::string & s = v.str();
    SKIPPY_ASSIGN_OR_RETURN(int64_t length, int_param(b, 0, 255));
    bool killwords = bool_param(b, 1, false);
    std::string end = "...";
    if (b.has(2)) { SKIPPY_ASSIGN_OR_RETURN(end, r.str(b.v[2])); }
    SKIPPY_ASSIGN_OR_RETURN(int64_t leeway, int_param(b, 3, 5));
    if (b.has(3) && b.v[3].is_none()) leeway = 5;
    auto end_len = static_cast<int64_t>(text::length(end));
    if (length < end_len) return type_error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
    if (leeway < 0) return type_error("expected leeway >= 0, got " + std::to_string(leeway));
    std::vector<size_t> offs = text::char_offsets(s);
    auto n = static_cast<int64_t>(offs.size()) - 1;
    if (n <= length + leeway) return value::string(s);
    std::string head = s.substr(0, offs[static_cast<size_t>(std::min(n, length - end_len))]);
    if (killwords) return value::string(head + end);
    std::string sp = " ";
    auto parts = text::rsplit(head, &sp, 1);
    return value::string(parts[0] + end);
}

std::string jinja_title(std::string_view s) {
    std::string out;
    bool at_start = true;
    for (size_t i = 0; i < s.size();) {
        char32_t c = text::decode(s, i);
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
        std::string one;
        text::append_utf8(one, c);
        if (sep) { out += one; at_start = true; continue; }
        out += at_start ? text::upper(one) : text::lower(one);
        at_start = false;
    }
    return out;
}

// select / reject / selectattr / rejectattr.
result<value> select_like(renderer & r, const value & v, const call_args & a, bool attr, bool keep_if) {
    std::vector<value> out;
    if (!truthy(v)) return value::list(std::move(out));
    size_t off = 0;
    attr_path path;
    if (attr) {
        if (a.pos.empty()) return type_error("Missing parameter for attribute name");
        path = make_path(a.pos[0]);
        off = 1;
    }
    int test = -1;
    call_args rest;
    if (a.pos.size() > off) {
        if (!a.pos[off].is_string()) return type_error("test name must be a string");
        if (find_test(a.pos[off].str(), test) != name_status::known)
            return type_error("No test named '" + a.pos[off].str() + "'");
        rest.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(off) + 1, a.pos.end());
        rest.kw = a.kw;
    }
    SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
    SKIPPY_TRY(r.charge(items.size()));
    for (auto & item : items) {
        SKIPPY_ASSIGN_OR_RETURN(value x, follow(r, path, item));
        bool pass;
        if (test >= 0) { SKIPPY_ASSIGN_OR_RETURN(pass, apply_test(r, test, x, rest)); }
        else pass = truthy(x);
        if (pass == keep_if) out.push_back(std::move(item));
    }
    return value::list(std::move(out));
}

result<value> do_map(renderer & r, const value & v, const call_args & a) {
    if (!truthy(v)) return value::list({});  // jinja2 maps only a truthy value
    SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
    SKIPPY_TRY(r.charge(items.size()));
    std::vector<value> out;
    out.reserve(items.size());
    const value * attribute = nullptr;
    const value * dflt = nullptr;
    for (const auto & [k, x] : a.kw) {
        if (k == "attribute") attribute = &x;
        else if (k == "default") dflt = &x;
    }
    if (a.pos.empty() && attribute) {
        for (const auto & [k, x] : a.kw)
            if (k != "attribute" && k != "default") return type_error("Unexpected keyword argument '" + k + "'");
        attr_path path = make_path(*attribute);
        for (const auto & item : items) {
            SKIPPY_ASSIGN_OR_RETURN(value x, follow(r, path, item, dflt && !dflt->is_none() ? dflt : nullptr));
            out.push_back(std::move(x));
        }
        return value::list(std::move(out));
    }
    if (a.pos.empty()) return type_error("map requires a filter argument");
    if (!a.pos[0].is_string()) return type_error("filter name must be a string");
    int id = -1;
    if (find_filter(a.pos[0].str(), id) != name_status::known) return type_error("No filter named '" + a.pos[0].str() + "'");
    call_args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto & item : items) {
        SKIPPY_ASSIGN_OR_RETURN(value x, apply_filter(r, id, item, rest));
        out.push_back(std::move(x));
    }
    return value::list(std::move(out));
}

// The attribute key of min / max / unique / sort: the item, or its attribute,
// lower-cased unless case_sensitive.
result<value> key_of(renderer & r, const attr_path & path, const value & item, bool case_sensitive) {
    SKIPPY_ASSIGN_OR_RETURN(value k, follow(r, path, item));
    return case_sensitive ? k : ignore_case(k);
}

}  // namespace

result<value> apply_filter(renderer & r, int id, const value & v, const call_args & a) {
    auto f = static_cast<filter_id>(id);
    // Every filter of a string reads it at least once: charged by its length, so that
    // many filter calls on long strings (macro output, say) cannot add up unbounded.
    if (v.is_string()) SKIPPY_TRY(r.charge(1 + v.str().size() / 16));
    switch (f) {
        case filter_id::abs: {
            SKIPPY_TRY(bind("abs", {}, a).error());
            if (v.is_undefined()) return undefined_use(v);
            if (v.is(vtype::floating)) return value::floating(std::fabs(v.as_float()));
            if (v.is_int_like()) {
                if (v.as_int() == INT64_MIN) return make_error(error_code::runtime, "integer overflow");
                return value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
            }
            return type_error("bad operand type for abs(): '" + std::string(type_name(v)) + "'");
        }
        case filter_id::attr: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("attr", {"name"}, a));
            if (!b.has(0) || !b.v[0].is_string()) return type_error("attribute name must be a string");
            if (v.is(vtype::dict)) {
                value m;
                if (find_method(v, b.v[0].str(), m)) return m;
                return value::undefined("'dict object' has no attribute '" + b.v[0].str() + "'");
            }
            return r.getattr(v, b.v[0].str());
        }
        case filter_id::batch: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("batch", {"linecount", "fill_with"}, a));
            if (!b.has(0)) return type_error("batch() missing 1 required positional argument: 'linecount'");
            SKIPPY_ASSIGN_OR_RETURN(int64_t n, int_param(b, 0, 1));
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            std::vector<value> out, cur;
            for (auto & item : items) {
                if (static_cast<int64_t>(cur.size()) == n) { out.push_back(value::list(std::move(cur))); cur.clear(); }
                cur.push_back(std::move(item));
            }
            if (!cur.empty()) {
                if (b.has(1) && !b.v[1].is_none())
                    while (static_cast<int64_t>(cur.size()) < n) cur.push_back(b.v[1]);
                out.push_back(value::list(std::move(cur)));
            }
            return value::list(std::move(out));
        }
        case filter_id::capitalize:
        case filter_id::lower:
        case filter_id::upper:
        case filter_id::title:
        case filter_id::string:
        case filter_id::safe:
        case filter_id::escape:
        case filter_id::wordcount: {
            SKIPPY_TRY(bind("filter", {}, a).error());
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            switch (f) {
                case filter_id::capitalize: return value::string(text::capitalize(s));
                case filter_id::lower: return value::string(text::lower(s));
                case filter_id::upper: return value::string(text::upper(s));
                case filter_id::title: return value::string(jinja_title(s));
                case filter_id::escape: {
                    std::string e = html_escape(s);
                    SKIPPY_TRY(r.check_string(e.size()));
                    return value::string(std::move(e));
                }
                case filter_id::wordcount: {
                    int64_t n = 0;
                    bool in_word = false;
                    for (size_t i = 0; i < s.size();) {
                        bool w = text::is_word(text::decode(s, i));
                        if (w && !in_word) ++n;
                        in_word = w;
                    }
                    return value::integer(n);
                }
                default: return value::string(std::move(s));
            }
        }
        case filter_id::center: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("center", {"width"}, a));
            SKIPPY_ASSIGN_OR_RETURN(int64_t width, int_param(b, 0, 80));
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            SKIPPY_TRY(r.check_string(static_cast<size_t>(std::max<int64_t>(width, 0))));
            auto len = static_cast<int64_t>(text::length(s));
            if (width <= len) return value::string(s);
            int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
            return value::string(std::string(static_cast<size_t>(left), ' ') + s +
                                 std::string(static_cast<size_t>(marg - left), ' '));
        }
        case filter_id::default_: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("default", {"default_value", "boolean"}, a));
            bool boolean = bool_param(b, 1, false);
            if (v.is_undefined() || (boolean && !truthy(v))) return b.has(0) ? b.v[0] : value::string("");
            return v;
        }
        case filter_id::dictsort: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("dictsort", {"case_sensitive", "by", "reverse"}, a));
            bool case_sensitive = bool_param(b, 0, false);
            size_t pos = 0;
            if (b.has(1)) {
                if (b.v[1].is_string() && b.v[1].str() == "value") pos = 1;
                else if (!(b.v[1].is_string() && b.v[1].str() == "key"))
                    return type_error("You can only sort by either \"key\" or \"value\"");
            }
            if (v.is_undefined()) return undefined_use(v);
            if (!v.is(vtype::dict)) return type_error("'" + std::string(type_name(v)) + "' object has no attribute 'items'");
            std::vector<value> items, keys;
            for (const auto & [k, x] : v.dict_ref().entries) {
                items.push_back(value::tuple({k, x}));
                const value & key = pos == 0 ? k : x;
                keys.push_back(case_sensitive ? key : ignore_case(key));
            }
            SKIPPY_TRY(r.charge(items.size() * 8));
            SKIPPY_TRY(sort_by_keys(items, keys, bool_param(b, 2, false)));
            return value::list(std::move(items));
        }
        case filter_id::first:
        case filter_id::last: {
            SKIPPY_TRY(bind("first", {}, a).error());
            if (f == filter_id::last && !(v.is_string() || v.is_sequence() || v.is(vtype::dict) || v.is_undefined()))
                return type_error("'" + std::string(type_name(v)) + "' object is not reversible");
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            if (items.empty())
                return value::undefined(f == filter_id::first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
            return f == filter_id::first ? items.front() : items.back();
        }
        case filter_id::float_: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("float", {"default"}, a));
            value dflt = b.has(0) ? b.v[0] : value::floating(0.0);
            if (v.is_undefined()) return undefined_use(v);
            if (v.is_number()) return value::floating(v.as_float());
            double d;
            // Parsing decodes, case-folds and strips the text: several passes per byte.
            if (v.is_string()) SKIPPY_TRY(r.charge(v.str().size()));
            if (v.is_string() && parse_py_float(v.str(), d)) return value::floating(d);
            return dflt;
        }
        case filter_id::int_: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("int", {"default", "base"}, a));
            value dflt = b.has(0) ? b.v[0] : value::integer(0);
            SKIPPY_ASSIGN_OR_RETURN(int64_t base, int_param(b, 1, 10));
            if (v.is_undefined()) return undefined_use(v);
            if (v.is_int_like()) return value::integer(v.as_int());
            if (v.is(vtype::floating)) {
                double d = v.as_float();
                if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
                return value::integer(static_cast<int64_t>(d));
            }
            if (v.is_string()) {
                SKIPPY_TRY(r.charge(v.str().size()));  // as for float: several passes per byte
                int64_t n;
                if (parse_py_int(v.str(), static_cast<int>(base), n)) return value::integer(n);
                double d;
                if (parse_py_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
                    return value::integer(static_cast<int64_t>(d));
            }
            return dflt;
        }
        case filter_id::format: {
            if (!a.pos.empty() && !a.kw.empty()) return type_error("can't handle positional and keyword arguments at the same time");
            SKIPPY_ASSIGN_OR_RETURN(std::string fmt, r.str(v));
            value args;
            if (!a.kw.empty()) {
                auto d = std::make_shared<dict_data>();
                for (const auto & [k, x] : a.kw) d->set(value::string(k), x);
                args = value::dict(std::move(d));
            } else {
                args = value::tuple(a.pos);
            }
            SKIPPY_ASSIGN_OR_RETURN(std::string s, percent_format(r, fmt, args, true));
            return value::string(std::move(s));
        }
        case filter_id::indent: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("indent", {"width", "first", "blank"}, a));
            return do_indent(r, v, b);
        }
        case filter_id::items: {
            SKIPPY_TRY(bind("items", {}, a).error());
            if (v.is_undefined()) return value::list({});
            if (!v.is(vtype::dict)) return type_error("Can only get item pairs from a mapping.");
            std::vector<value> out;
            for (const auto & [k, x] : v.dict_ref().entries) out.push_back(value::tuple({k, x}));
            SKIPPY_TRY(r.charge(out.size()));
            return value::list(std::move(out));
        }
        case filter_id::join: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("join", {"d", "attribute"}, a));
            std::string sep;
            if (b.has(0)) { SKIPPY_ASSIGN_OR_RETURN(sep, r.str(b.v[0])); }
            attr_path path = b.has(1) ? make_path(b.v[1]) : attr_path{};
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            std::string out;
            for (size_t i = 0; i < items.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(value x, follow(r, path, items[i]));
                SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(x));
                if (i) out += sep;
                out += s;
                SKIPPY_TRY(r.check_string(out.size()));
            }
            SKIPPY_TRY(r.charge(out.size() / 16 + items.size()));
            return value::string(std::move(out));
        }
        case filter_id::length: {
            SKIPPY_TRY(bind("length", {}, a).error());
            switch (v.type()) {
                case vtype::undefined: return value::integer(0);
                case vtype::string: return value::integer(static_cast<int64_t>(text::length(v.str())));
                case vtype::list:
                case vtype::tuple: return value::integer(static_cast<int64_t>(v.items().size()));
                case vtype::dict: return value::integer(static_cast<int64_t>(v.dict_ref().entries.size()));
                default: return type_error("object of type '" + std::string(type_name(v)) + "' has no len()");
            }
        }
        case filter_id::list: {
            SKIPPY_TRY(bind("list", {}, a).error());
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            return value::list(std::move(items));
        }
        case filter_id::map: return do_map(r, v, a);
        case filter_id::max:
        case filter_id::min: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind(f == filter_id::max ? "max" : "min", {"case_sensitive", "attribute"}, a));
            bool cs = bool_param(b, 0, false);
            attr_path path = b.has(1) ? make_path(b.v[1]) : attr_path{};
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
            size_t best = 0;
            SKIPPY_ASSIGN_OR_RETURN(value best_key, key_of(r, path, items[0], cs));
            for (size_t i = 1; i < items.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(value k, key_of(r, path, items[i], cs));
                SKIPPY_ASSIGN_OR_RETURN(bool better, f == filter_id::max ? less(best_key, k) : less(k, best_key));
                if (better) { best = i; best_key = std::move(k); }
            }
            return items[best];
        }
        case filter_id::reject: return select_like(r, v, a, false, false);
        case filter_id::rejectattr: return select_like(r, v, a, true, false);
        case filter_id::select: return select_like(r, v, a, false, true);
        case filter_id::selectattr: return select_like(r, v, a, true, true);
        case filter_id::replace: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("replace", {"old", "new", "count"}, a));
            if (!b.has(0) || !b.has(1)) return type_error("replace() missing required arguments 'old' and 'new'");
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            SKIPPY_ASSIGN_OR_RETURN(std::string from, r.str(b.v[0]));
            SKIPPY_ASSIGN_OR_RETURN(std::string to, r.str(b.v[1]));
            int64_t count = -1;
            if (b.has(2) && !b.v[2].is_none()) { SKIPPY_ASSIGN_OR_RETURN(count, int_param(b, 2, -1)); }
            std::string out;
            if (!text::replace(s, from, to, count, r.lim().max_output_bytes, out)) return r.check_string(SIZE_MAX);
            SKIPPY_TRY(r.charge(out.size() / 16));
            return value::string(std::move(out));
        }
        case filter_id::reverse: {
            SKIPPY_TRY(bind("reverse", {}, a).error());
            if (v.is_string()) {
                std::vector<char32_t> cps = text::code_points(v.str());
                std::string out;
                for (size_t i = cps.size(); i-- > 0;) text::append_utf8(out, cps[i]);
                return value::string(std::move(out));
            }
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            std::reverse(items.begin(), items.end());
            return value::list(std::move(items));
        }
        case filter_id::round: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("round", {"precision", "method"}, a));
            return do_round(v, b);
        }
        case filter_id::sort: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("sort", {"reverse", "case_sensitive", "attribute"}, a));
            bool rev = bool_param(b, 0, false), cs = bool_param(b, 1, false);
            std::vector<attr_path> paths;
            if (b.has(2) && b.v[2].is_string()) {
                std::string comma = ",";
                for (auto & part : text::split(b.v[2].str(), &comma, -1)) paths.push_back(make_path(value::string(part)));
            } else {
                paths.push_back(b.has(2) ? make_path(b.v[2]) : attr_path{});
            }
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            std::vector<value> keys;
            for (const auto & item : items) {
                std::vector<value> parts;
                for (const auto & p : paths) {
                    SKIPPY_ASSIGN_OR_RETURN(value k, key_of(r, p, item, cs));
                    parts.push_back(std::move(k));
                }
                keys.push_back(value::list(std::move(parts)));
            }
            SKIPPY_TRY(r.charge(items.size() * 8));
            SKIPPY_TRY(sort_by_keys(items, keys, rev));
            return value::list(std::move(items));
        }
        case filter_id::sum: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("sum", {"attribute", "start"}, a));
            attr_path path = b.has(0) ? make_path(b.v[0]) : attr_path{};
            value total = b.has(1) ? b.v[1] : value::integer(0);
            if (total.is_string()) return type_error("sum() can't sum strings [use ''.join(seq) instead]");
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            for (const auto & item : items) {
                SKIPPY_ASSIGN_OR_RETURN(value x, follow(r, path, item));
                SKIPPY_ASSIGN_OR_RETURN(total, arith(r, bin_op::add, total, x));
            }
            return total;
        }
        case filter_id::tojson: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, a));
            return do_tojson(r, v, b);
        }
        case filter_id::trim: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("trim", {"chars"}, a));
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            const std::string * chars = nullptr;
            if (b.has(0) && !b.v[0].is_none()) {
                if (!b.v[0].is_string()) return type_error("strip arg must be None or str");
                chars = &b.v[0].str();
            }
            return value::string(text::strip(s, chars, true, true));
        }
        case filter_id::truncate: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("truncate", {"length", "killwords", "end", "leeway"}, a));
            return do_truncate(r, v, b);
        }
        case filter_id::unique: {
            SKIPPY_ASSIGN_OR_RETURN(auto b, bind("unique", {"case_sensitive", "attribute"}, a));
            bool cs = bool_param(b, 0, false);
            attr_path path = b.has(1) ? make_path(b.v[1]) : attr_path{};
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v));
            std::vector<value> out, seen;
            for (auto & item : items) {
                SKIPPY_ASSIGN_OR_RETURN(value k, key_of(r, path, item, cs));
                SKIPPY_TRY(check_hashable(k));
                SKIPPY_TRY(r.charge(seen.size() + 1));
                bool dup = std::any_of(seen.begin(), seen.end(), [&](const value & s) { return equal(s, k); });
                if (dup) continue;
                seen.push_back(std::move(k));
                out.push_back(std::move(item));
            }
            return value::list(std::move(out));
        }
    }
    return type_error("unknown filter");
}

}  // namespace skippy::jinja::detail
