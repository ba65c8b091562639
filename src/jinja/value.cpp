#include "jinja/value.h"

#include "jinja/py_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace skippy::jinja::detail {

namespace {

// Small dicts are searched linearly; an index pays off from this size on.
constexpr size_t k_index_from = 8;

const std::vector<value> & empty_items() {
    static const std::vector<value> empty;
    return empty;
}

}  // namespace

value value::list(std::vector<value> items) {
    value v = make(vtype::list);
    v.p_ = std::make_shared<const list_data>(list_data{std::move(items)});
    return v;
}

value value::tuple(std::vector<value> items) {
    value v = make(vtype::tuple);
    v.p_ = std::make_shared<const list_data>(list_data{std::move(items)});
    return v;
}

value value::dict(std::shared_ptr<const dict_data> d) { value v = make(vtype::dict); v.p_ = std::move(d); return v; }
value value::ns(std::shared_ptr<namespace_data> n) { value v = make(vtype::ns); v.p_ = std::move(n); return v; }
value value::callable(std::shared_ptr<const callable_data> c) { value v = make(vtype::callable); v.p_ = std::move(c); return v; }
value value::loop(std::shared_ptr<loop_data> l) { value v = make(vtype::loop); v.p_ = std::move(l); return v; }

const std::vector<value> & value::items() const {
    return p_ ? static_cast<const list_data *>(p_.get())->items : empty_items();
}
const dict_data & value::dict_ref() const { return *static_cast<const dict_data *>(p_.get()); }
namespace_data & value::ns_ref() const { return *const_cast<namespace_data *>(static_cast<const namespace_data *>(p_.get())); }
const callable_data & value::callable_ref() const { return *static_cast<const callable_data *>(p_.get()); }
loop_data & value::loop_ref() const { return *const_cast<loop_data *>(static_cast<const loop_data *>(p_.get())); }

int64_t dict_data::find(const value & key) const {
    if (key.is_string()) return find(std::string_view(key.str()));
    for (size_t i = 0; i < entries.size(); ++i)
        if (equal(entries[i].first, key)) return static_cast<int64_t>(i);
    return -1;
}

int64_t dict_data::find(std::string_view key) const {
    if (!string_index_.empty()) {
        auto it = string_index_.find(std::string(key));
        return it == string_index_.end() ? -1 : static_cast<int64_t>(it->second);
    }
    for (size_t i = 0; i < entries.size(); ++i)
        if (entries[i].first.is_string() && entries[i].first.str() == key) return static_cast<int64_t>(i);
    return -1;
}

const value * dict_data::get(std::string_view key) const {
    int64_t i = find(key);
    return i < 0 ? nullptr : &entries[static_cast<size_t>(i)].second;
}

void dict_data::set(value key, value v) {
    int64_t i = find(key);
    if (i >= 0) {
        entries[static_cast<size_t>(i)].second = std::move(v);
        return;
    }
    entries.emplace_back(std::move(key), std::move(v));
    if (entries.size() == k_index_from) {
        for (size_t k = 0; k < entries.size(); ++k)
            if (entries[k].first.is_string()) string_index_.emplace(entries[k].first.str(), k);
    } else if (entries.size() > k_index_from && entries.back().first.is_string()) {
        string_index_.emplace(entries.back().first.str(), entries.size() - 1);
    }
}

const value * namespace_data::get(std::string_view name) const {
    for (const auto & [k, v] : attrs)
        if (k == name) return &v;
    return nullptr;
}

void namespace_data::set(const std::string & name, value v) {
    for (auto & [k, old] : attrs)
        if (k == name) { old = std::move(v); return; }
    attrs.emplace_back(name, std::move(v));
}

status type_error(std::string message) { return make_error(error_code::runtime, std::move(message)); }

bool truthy(const value & v) {
    switch (v.type()) {
        case vtype::undefined:
        case vtype::none: return false;
        case vtype::boolean:
        case vtype::integer: return v.as_int() != 0;
        case vtype::floating: return v.as_float() != 0.0;
        case vtype::string: return !v.str().empty();
        case vtype::list:
        case vtype::tuple: return !v.items().empty();
        case vtype::dict: return !v.dict_ref().entries.empty();
        case vtype::ns:
        case vtype::callable:
        case vtype::loop: return true;
    }
    return false;
}

bool equal(const value & a, const value & b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_int_like() && b.is_int_like()) return a.as_int() == b.as_int();
        return a.as_float() == b.as_float();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case vtype::undefined:
        case vtype::none: return true;
        case vtype::string: return a.str() == b.str();
        case vtype::list:
        case vtype::tuple: {
            const auto & x = a.items();
            const auto & y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equal(x[i], y[i])) return false;
            return true;
        }
        case vtype::dict: {
            const auto & x = a.dict_ref();
            const auto & y = b.dict_ref();
            if (x.entries.size() != y.entries.size()) return false;
            for (const auto & [k, v] : x.entries) {
                int64_t j = y.find(k);
                if (j < 0 || !equal(v, y.entries[static_cast<size_t>(j)].second)) return false;
            }
            return true;
        }
        default: return a.object() == b.object();
    }
}

std::string_view type_name(const value & v) {
    switch (v.type()) {
        case vtype::undefined: return "Undefined";
        case vtype::none: return "NoneType";
        case vtype::boolean: return "bool";
        case vtype::integer: return "int";
        case vtype::floating: return "float";
        case vtype::string: return "str";
        case vtype::list: return "list";
        case vtype::tuple: return "tuple";
        case vtype::dict: return "dict";
        case vtype::ns: return "Namespace";
        case vtype::callable: return v.callable_ref().kind == callable_kind::macro ? "Macro" : "function";
        case vtype::loop: return "LoopContext";
    }
    return "object";
}

status undefined_use(const value & u) {
    return make_error(error_code::runtime, u.str().empty() ? std::string("undefined value used") : u.str());
}

result<bool> less(const value & a, const value & b) {
    if (a.is_undefined()) return undefined_use(a);
    if (b.is_undefined()) return undefined_use(b);
    if (a.is_number() && b.is_number()) {
        if (a.is_int_like() && b.is_int_like()) return a.as_int() < b.as_int();
        return a.as_float() < b.as_float();
    }
    if (a.is_string() && b.is_string()) return a.str() < b.str();
    if ((a.is(vtype::list) && b.is(vtype::list)) || (a.is(vtype::tuple) && b.is(vtype::tuple))) {
        const auto & x = a.items();
        const auto & y = b.items();
        size_t n = std::min(x.size(), y.size());
        for (size_t i = 0; i < n; ++i) {
            if (equal(x[i], y[i])) continue;
            return less(x[i], y[i]);
        }
        return x.size() < y.size();
    }
    return type_error("'<' not supported between instances of '" + std::string(type_name(a)) + "' and '" +
                      std::string(type_name(b)) + "'");
}

status check_hashable(const value & key) {
    if (key.is(vtype::list) || key.is(vtype::dict) || key.is(vtype::ns))
        return type_error("unhashable type: '" + std::string(type_name(key)) + "'");
    if (key.is_undefined()) return undefined_use(key);
    if (key.is(vtype::tuple))
        for (const auto & item : key.items()) SKIPPY_TRY(check_hashable(item));
    return status::ok();
}

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string out;
    size_t p = 0;
    if (sci[0] == '-') { out += '-'; p = 1; }
    size_t e_pos = sci.find('e');
    std::string digits;
    for (size_t i = p; i < e_pos; ++i)
        if (sci[i] != '.') digits += sci[i];
    int exp = std::atoi(sci.c_str() + e_pos + 1);
    if (exp >= -4 && exp < 16) {
        int decpt = exp + 1;
        int n = static_cast<int>(digits.size());
        if (decpt <= 0) out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        else if (decpt >= n) out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
        else out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + ebuf;
}

static status too_deep() { return make_error(error_code::runtime, "value nested too deeply to print"); }

static status repr_into(const value & v, int depth, size_t max_bytes, std::string & out);

result<std::string> to_repr(const value & v, int max_depth, size_t max_bytes) {
    std::string out;
    SKIPPY_TRY(repr_into(v, max_depth, max_bytes, out));
    if (out.size() > max_bytes) return make_error(error_code::runtime, "printed value exceeds the output limit");
    return out;
}

result<std::string> to_str(const value & v, int max_depth, size_t max_bytes) {
    if (v.is_string()) return v.str();
    if (v.is_undefined()) return std::string();
    return to_repr(v, max_depth, max_bytes);
}

static status repr_into(const value & v, int depth, size_t max_bytes, std::string & out) {
    if (depth <= 0) return too_deep();
    if (out.size() > max_bytes) return make_error(error_code::runtime, "printed value exceeds the output limit");
    switch (v.type()) {
        case vtype::undefined: out += "Undefined"; return status::ok();
        case vtype::none: out += "None"; return status::ok();
        case vtype::boolean: out += v.as_int() ? "True" : "False"; return status::ok();
        case vtype::integer: out += std::to_string(v.as_int()); return status::ok();
        case vtype::floating: out += float_repr(v.as_float()); return status::ok();
        case vtype::string: out += text::repr(v.str()); return status::ok();
        case vtype::list:
        case vtype::tuple: {
            bool tuple = v.is(vtype::tuple);
            out += tuple ? '(' : '[';
            const auto & items = v.items();
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                SKIPPY_TRY(repr_into(items[i], depth - 1, max_bytes, out));
            }
            if (tuple && items.size() == 1) out += ',';
            out += tuple ? ')' : ']';
            return status::ok();
        }
        case vtype::dict: {
            out += '{';
            bool first = true;
            for (const auto & [k, val] : v.dict_ref().entries) {
                if (!first) out += ", ";
                first = false;
                SKIPPY_TRY(repr_into(k, depth - 1, max_bytes, out));
                out += ": ";
                SKIPPY_TRY(repr_into(val, depth - 1, max_bytes, out));
            }
            out += '}';
            return status::ok();
        }
        case vtype::ns: {
            out += "<Namespace {";
            bool first = true;
            for (const auto & [k, val] : v.ns_ref().attrs) {
                if (!first) out += ", ";
                first = false;
                out += text::repr(k) + ": ";
                SKIPPY_TRY(repr_into(val, depth - 1, max_bytes, out));
            }
            out += "}>";
            return status::ok();
        }
        case vtype::callable: {
            const auto & c = v.callable_ref();
            if (c.kind == callable_kind::macro) out += "<Macro " + text::repr(c.name) + ">";
            else if (c.kind == callable_kind::method) out += "<built-in method " + c.name + ">";
            else out += "<built-in function " + c.name + ">";
            return status::ok();
        }
        case vtype::loop: {
            const auto & l = v.loop_ref();
            out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items->size()) + ">";
            return status::ok();
        }
    }
    return status::ok();
}

namespace {

void json_string(std::string_view s, bool ensure_ascii, std::string & out) {
    static const char * hex = "0123456789abcdef";
    auto u4 = [&](uint32_t c) {
        out += "\\u";
        for (int k = 3; k >= 0; --k) out += hex[(c >> (4 * k)) & 0xF];
    };
    out += '"';
    for (size_t i = 0; i < s.size();) {
        auto b = static_cast<unsigned char>(s[i]);
        if (b >= 0x80 && !ensure_ascii) {
            size_t j = i;
            char32_t c = text::decode(s, j);
            text::append_utf8(out, c);
            i = j;
            continue;
        }
        char32_t c = text::decode(s, i);
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
            if (c >= 0x10000) {
                uint32_t v = c - 0x10000;
                u4(0xD800 + (v >> 10));
                u4(0xDC00 + (v & 0x3FF));
            } else {
                u4(c);
            }
        } else {
            text::append_utf8(out, c);
        }
    }
    out += '"';
}

std::string json_float(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
    return float_repr(f);
}

struct json_writer {
    const json_options & o;
    std::string &        out;

    status not_serializable(const value & v) {
        return type_error("Object of type " + std::string(type_name(v)) + " is not JSON serializable");
    }

    void newline(int level) {
        out += '\n';
        for (int i = 0; i < level; ++i) out += o.indent;
    }

    result<std::string> key_text(const value & k) {
        switch (k.type()) {
            case vtype::string: return k.str();
            case vtype::boolean: return std::string(k.as_int() ? "true" : "false");
            case vtype::integer: return std::to_string(k.as_int());
            case vtype::floating: return json_float(k.as_float());
            case vtype::none: return std::string("null");
            default:
                return type_error("keys must be str, int, float, bool or None, not " + std::string(type_name(k)));
        }
    }

    status write(const value & v, int level) {
        if (level > o.max_depth) return make_error(error_code::runtime, "value nested too deeply for tojson");
        if (out.size() > o.max_bytes) return make_error(error_code::runtime, "tojson output exceeds the output limit");
        std::string_view item_sep = o.separators_set ? std::string_view(o.item_sep)
                                                     : (o.indent_set ? std::string_view(",") : std::string_view(", "));
        switch (v.type()) {
            case vtype::none: out += "null"; return status::ok();
            case vtype::boolean: out += v.as_int() ? "true" : "false"; return status::ok();
            case vtype::integer: out += std::to_string(v.as_int()); return status::ok();
            case vtype::floating: out += json_float(v.as_float()); return status::ok();
            case vtype::string: json_string(v.str(), o.ensure_ascii, out); return status::ok();
            case vtype::list:
            case vtype::tuple: {
                const auto & items = v.items();
                if (items.empty()) { out += "[]"; return status::ok(); }
                out += '[';
                for (size_t i = 0; i < items.size(); ++i) {
                    if (i) out += item_sep;
                    if (o.indent_set) newline(level + 1);
                    SKIPPY_TRY(write(items[i], level + 1));
                }
                if (o.indent_set) newline(level);
                out += ']';
                return status::ok();
            }
            case vtype::dict: {
                const auto & entries = v.dict_ref().entries;
                if (entries.empty()) { out += "{}"; return status::ok(); }
                std::vector<size_t> order(entries.size());
                for (size_t i = 0; i < order.size(); ++i) order[i] = i;
                if (o.sort_keys) {
                    status st;
                    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
                        if (!st.is_ok()) return false;
                        auto r = less(entries[a].first, entries[b].first);
                        if (!r.is_ok()) { st = r.error(); return false; }
                        return *r;
                    });
                    SKIPPY_TRY(st);
                }
                out += '{';
                bool first = true;
                for (size_t idx : order) {
                    if (!first) out += item_sep;
                    first = false;
                    if (o.indent_set) newline(level + 1);
                    SKIPPY_ASSIGN_OR_RETURN(std::string key, key_text(entries[idx].first));
                    json_string(key, o.ensure_ascii, out);
                    out += o.separators_set ? o.key_sep : std::string(": ");
                    SKIPPY_TRY(write(entries[idx].second, level + 1));
                }
                if (o.indent_set) newline(level);
                out += '}';
                return status::ok();
            }
            default: return not_serializable(v);
        }
    }
};

}  // namespace

result<std::string> to_json(const value & v, const json_options & opts) {
    std::string out;
    json_writer w{opts, out};
    SKIPPY_TRY(w.write(v, 0));
    if (out.size() > opts.max_bytes) return make_error(error_code::runtime, "tojson output exceeds the output limit");
    return out;
}

}  // namespace skippy::jinja::detail
