// Names of the builtins, argument binding, the tests and printf-style formatting.
#include "jinja/builtins.h"

#include "jinja/py_text.h"
#include "jinja/renderer.h"

#include <cmath>
#include <cstdio>

namespace skippy::jinja::detail {

namespace {

struct name_entry {
    std::string_view name;
    int              id;
};

#define F(n, id) name_entry{n, static_cast<int>(filter_id::id)}
constexpr name_entry k_filters[] = {
    F("abs", abs), F("attr", attr), F("batch", batch), F("capitalize", capitalize), F("center", center),
    F("count", length), F("d", default_), F("default", default_), F("dictsort", dictsort), F("e", escape),
    F("escape", escape), F("first", first), F("float", float_), F("format", format), F("indent", indent),
    F("int", int_), F("items", items), F("join", join), F("last", last), F("length", length), F("list", list),
    F("lower", lower), F("map", map), F("max", max), F("min", min), F("reject", reject),
    F("rejectattr", rejectattr), F("replace", replace), F("reverse", reverse), F("round", round),
    F("safe", safe), F("select", select), F("selectattr", selectattr), F("sort", sort), F("string", string),
    F("sum", sum), F("title", title), F("tojson", tojson), F("trim", trim), F("truncate", truncate),
    F("unique", unique), F("upper", upper), F("wordcount", wordcount),
};
#undef F

constexpr std::string_view k_unsupported_filters[] = {
    "filesizeformat", "forceescape", "groupby", "pprint", "random", "slice", "striptags", "urlencode",
    "urlize", "wordwrap", "xmlattr",
};

#define T(n, id) name_entry{n, static_cast<int>(test_id::id)}
constexpr name_entry k_tests[] = {
    T("!=", ne), T("<", lt), T("<=", le), T("==", eq), T(">", gt), T(">=", ge), T("boolean", boolean),
    T("callable", callable), T("defined", defined), T("divisibleby", divisibleby), T("eq", eq),
    T("equalto", eq), T("escaped", escaped), T("even", even), T("false", false_), T("filter", filter),
    T("float", float_), T("ge", ge), T("greaterthan", gt), T("gt", gt), T("in", in), T("integer", integer),
    T("iterable", iterable), T("le", le), T("lessthan", lt), T("lower", lower), T("lt", lt),
    T("mapping", mapping), T("ne", ne), T("none", none), T("number", number), T("odd", odd),
    T("sameas", sameas), T("sequence", sequence), T("string", string), T("test", test), T("true", true_),
    T("undefined", undefined), T("upper", upper),
};
#undef T

constexpr std::string_view k_globals[] = {"range", "dict", "namespace", "raise_exception", "strftime_now"};

}  // namespace

name_status find_filter(std::string_view name, int & id) {
    for (const auto & e : k_filters)
        if (e.name == name) { id = e.id; return name_status::known; }
    for (auto u : k_unsupported_filters)
        if (u == name) return name_status::unsupported;
    return name_status::unknown;
}

name_status find_test(std::string_view name, int & id) {
    for (const auto & e : k_tests)
        if (e.name == name) { id = e.id; return name_status::known; }
    return name_status::unknown;
}

int find_global(std::string_view name) {
    for (size_t i = 0; i < std::size(k_globals); ++i)
        if (k_globals[i] == name) return static_cast<int>(i);
    return -1;
}

status bind_args(std::string_view fn, std::span<const std::string_view> params, const call_args & a,
                 std::vector<value> & out, std::vector<bool> & given) {
    out.assign(params.size(), value());
    given.assign(params.size(), false);
    if (a.pos.size() > params.size())
        return type_error(std::string(fn) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                          std::to_string(a.pos.size()) + " given)");
    for (size_t i = 0; i < a.pos.size(); ++i) {
        out[i] = a.pos[i];
        given[i] = true;
    }
    for (const auto & [k, v] : a.kw) {
        size_t i = 0;
        while (i < params.size() && params[i] != k) ++i;
        if (i == params.size()) return type_error(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
        if (given[i]) return type_error(std::string(fn) + "() got multiple values for argument '" + k + "'");
        out[i] = v;
        given[i] = true;
    }
    return status::ok();
}

namespace {

bool py_islower(std::string_view s) {
    bool cased = false;
    for (size_t i = 0; i < s.size();) {
        char32_t c = text::decode(s, i);
        if (text::is_upper(c)) return false;
        if (text::is_lower(c)) cased = true;
    }
    return cased;
}

bool py_isupper(std::string_view s) {
    bool cased = false;
    for (size_t i = 0; i < s.size();) {
        char32_t c = text::decode(s, i);
        if (text::is_lower(c)) return false;
        if (text::is_upper(c)) cased = true;
    }
    return cased;
}

}  // namespace

result<bool> apply_test(renderer & r, int id, const value & v, const call_args & a) {
    auto arg = [&](size_t i) -> result<value> {
        if (i < a.pos.size()) return a.pos[i];
        if (!a.kw.empty() && i == 0) return a.kw[0].second;
        return type_error("test expects an argument");
    };
    switch (static_cast<test_id>(id)) {
        case test_id::boolean: return v.is(vtype::boolean);
        case test_id::callable: return v.is(vtype::callable) || v.is_undefined();
        case test_id::defined: return !v.is_undefined();
        case test_id::undefined: return v.is_undefined();
        case test_id::divisibleby: {
            SKIPPY_ASSIGN_OR_RETURN(value n, arg(0));
            SKIPPY_ASSIGN_OR_RETURN(value m, arith(r, bin_op::mod, v, n));
            return equal(m, value::integer(0));
        }
        case test_id::eq: { SKIPPY_ASSIGN_OR_RETURN(value o, arg(0)); return equal(v, o); }
        case test_id::ne: { SKIPPY_ASSIGN_OR_RETURN(value o, arg(0)); return !equal(v, o); }
        case test_id::lt: { SKIPPY_ASSIGN_OR_RETURN(value o, arg(0)); return less(v, o); }
        case test_id::gt: { SKIPPY_ASSIGN_OR_RETURN(value o, arg(0)); return less(o, v); }
        case test_id::le: {
            SKIPPY_ASSIGN_OR_RETURN(value o, arg(0));
            if (v.is_number() && o.is_number()) return v.as_float() <= o.as_float();
            SKIPPY_ASSIGN_OR_RETURN(bool gt, less(o, v));
            return !gt;
        }
        case test_id::ge: {
            SKIPPY_ASSIGN_OR_RETURN(value o, arg(0));
            if (v.is_number() && o.is_number()) return v.as_float() >= o.as_float();
            SKIPPY_ASSIGN_OR_RETURN(bool lt, less(v, o));
            return !lt;
        }
        case test_id::escaped: return false;
        case test_id::even:
        case test_id::odd: {
            // value % 2 (a string formats!) compared with 1 or 0.
            SKIPPY_ASSIGN_OR_RETURN(value m, arith(r, bin_op::mod, v, value::integer(2)));
            return equal(m, value::integer(static_cast<test_id>(id) == test_id::odd ? 1 : 0));
        }
        case test_id::false_: return v.is(vtype::boolean) && v.as_int() == 0;
        case test_id::true_: return v.is(vtype::boolean) && v.as_int() == 1;
        case test_id::filter: {
            if (v.is_undefined()) return false;
            SKIPPY_TRY(check_hashable(v));
            int fid = 0;
            return v.is_string() && find_filter(v.str(), fid) == name_status::known;
        }
        case test_id::test: {
            if (v.is_undefined()) return false;
            SKIPPY_TRY(check_hashable(v));
            int tid = 0;
            return v.is_string() && find_test(v.str(), tid) == name_status::known;
        }
        case test_id::float_: return v.is(vtype::floating);
        case test_id::integer: return v.is(vtype::integer);
        case test_id::number: return v.is_number();
        case test_id::string: return v.is_string();
        case test_id::none: return v.is_none();
        case test_id::mapping: return v.is(vtype::dict);
        case test_id::iterable:
            return v.is_undefined() || v.is_string() || v.is_sequence() || v.is(vtype::dict);
        case test_id::sequence:
            return v.is_undefined() || v.is_string() || v.is_sequence() || v.is(vtype::dict);
        case test_id::in: {
            SKIPPY_ASSIGN_OR_RETURN(value seq, arg(0));
            if (seq.is_string()) {
                if (!v.is_string()) return type_error("'in <string>' requires string as left operand");
                return seq.str().find(v.str()) != std::string::npos;
            }
            if (seq.is(vtype::dict)) return seq.dict_ref().find(v) >= 0;
            if (seq.is_sequence()) {
                for (const auto & x : seq.items())
                    if (equal(x, v)) return true;
                return false;
            }
            if (seq.is_undefined()) return false;
            return type_error("argument of type '" + std::string(type_name(seq)) + "' is not iterable");
        }
        case test_id::lower: {
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            return py_islower(s);
        }
        case test_id::upper: {
            SKIPPY_ASSIGN_OR_RETURN(std::string s, r.str(v));
            return py_isupper(s);
        }
        case test_id::sameas: {
            SKIPPY_ASSIGN_OR_RETURN(value o, arg(0));
            if (v.type() != o.type()) return false;
            switch (v.type()) {
                case vtype::none:
                case vtype::undefined: return v.is_none();
                case vtype::boolean:
                case vtype::integer: return v.as_int() == o.as_int();  // CPython caches small ints
                case vtype::floating: return false;
                case vtype::string: return v.str() == o.str();
                default: return v.object() == o.object();
            }
        }
    }
    return type_error("unknown test");
}

// --- printf-style formatting ---

result<std::string> percent_format(renderer & r, const std::string & fmt, const value & args, bool tuple_args) {
    std::vector<value> list;
    const dict_data * mapping = nullptr;
    if (tuple_args && args.is(vtype::tuple)) list = args.items();
    else if (args.is(vtype::dict)) { mapping = &args.dict_ref(); list.push_back(args); }
    else list.push_back(args);
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    auto take = [&]() -> result<value> {
        if (next >= list.size()) return type_error("not enough arguments for format string");
        return list[next++];
    };
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') { out += fmt[i]; continue; }
        if (++i >= fmt.size()) return type_error("incomplete format");
        value arg;
        bool have_arg = false;
        if (fmt[i] == '(') {
            size_t close = fmt.find(')', i);
            if (close == std::string::npos) return type_error("incomplete format key");
            if (!mapping) return type_error("format requires a mapping");
            const value * v = mapping->get(std::string_view(fmt).substr(i + 1, close - i - 1));
            if (!v) return type_error("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
            arg = *v;
            have_arg = true;
            used_mapping = true;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
        auto number = [&](int & out_n, bool & present) -> status {
            present = false;
            if (i < fmt.size() && fmt[i] == '*') {
                ++i;
                SKIPPY_ASSIGN_OR_RETURN(value w, take());
                if (!w.is_int_like()) return type_error("* wants int");
                out_n = static_cast<int>(std::clamp<int64_t>(w.as_int(), -100000, 100000));
                present = true;
                return status::ok();
            }
            int64_t n = 0;
            while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
                n = std::min<int64_t>(n * 10 + (fmt[i++] - '0'), 100000);
                present = true;
            }
            out_n = static_cast<int>(n);
            return status::ok();
        };
        int width = 0, precision = -1;
        bool has_width = false, has_prec = false;
        SKIPPY_TRY(number(width, has_width));
        if (width < 0) { flags += '-'; width = -width; }
        if (i < fmt.size() && fmt[i] == '.') {
            ++i;
            SKIPPY_TRY(number(precision, has_prec));
            if (!has_prec) precision = 0;
            has_prec = true;
        }
        while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
        if (i >= fmt.size()) return type_error("incomplete format");
        char conv = fmt[i];
        if (conv == '%') { out += '%'; continue; }
        if (!have_arg) { SKIPPY_ASSIGN_OR_RETURN(arg, take()); }
        SKIPPY_TRY(r.check_string(out.size() + static_cast<size_t>(width) + static_cast<size_t>(std::max(precision, 0))));
        bool left = flags.find('-') != std::string::npos;
        auto pad = [&](std::string body, bool zero_ok) {
            size_t n = text::length(body);
            if (n >= static_cast<size_t>(width)) return body;
            size_t fill = static_cast<size_t>(width) - n;
            if (left) return body + std::string(fill, ' ');
            if (zero_ok && flags.find('0') != std::string::npos) {
                size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
                return body.substr(0, sign) + std::string(fill, '0') + body.substr(sign);
            }
            return std::string(fill, ' ') + body;
        };
        switch (conv) {
            case 's':
            case 'r':
            case 'a': {
                std::string s;
                if (conv == 's') { SKIPPY_ASSIGN_OR_RETURN(s, r.str(arg)); }
                else { SKIPPY_ASSIGN_OR_RETURN(s, to_repr(arg, 64, r.lim().max_output_bytes)); }
                if (has_prec) {
                    std::vector<size_t> offs = text::char_offsets(s);
                    if (static_cast<size_t>(precision) + 1 < offs.size()) s.resize(offs[static_cast<size_t>(precision)]);
                }
                out += pad(std::move(s), false);
                break;
            }
            case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
                if (arg.is_undefined()) return undefined_use(arg);
                if (conv == 'c') {
                    std::string s;
                    if (arg.is_string() && text::length(arg.str()) == 1) s = arg.str();
                    else if (arg.is_int_like() && arg.as_int() >= 0 && arg.as_int() <= 0x10FFFF)
                        text::append_utf8(s, static_cast<char32_t>(arg.as_int()));
                    else return type_error("%c requires int or char");
                    out += pad(std::move(s), false);
                    break;
                }
                if (!arg.is_number()) {
                    return type_error(std::string("%") + conv + " format: a real number is required, not " +
                                      std::string(type_name(arg)));
                }
                double fv = arg.as_float();
                if (arg.is(vtype::floating) && !std::isfinite(fv)) return type_error("cannot convert float to integer");
                if (arg.is(vtype::floating) && std::fabs(fv) >= 9.2e18) return type_error("integer too large to format");
                int64_t n = arg.is(vtype::floating) ? static_cast<int64_t>(fv) : arg.as_int();
                uint64_t mag = n < 0 ? uint64_t(0) - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
                char buf[80];
                if (conv == 'x') std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(mag));
                else if (conv == 'X') std::snprintf(buf, sizeof(buf), "%llX", static_cast<unsigned long long>(mag));
                else if (conv == 'o') std::snprintf(buf, sizeof(buf), "%llo", static_cast<unsigned long long>(mag));
                else std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(mag));
                std::string digits = buf;
                if (has_prec && digits.size() < static_cast<size_t>(precision))
                    digits = std::string(static_cast<size_t>(precision) - digits.size(), '0') + digits;
                if (flags.find('#') != std::string::npos) {
                    if (conv == 'x') digits = "0x" + digits;
                    else if (conv == 'X') digits = "0X" + digits;
                    else if (conv == 'o') digits = "0o" + digits;
                }
                std::string sign = n < 0 ? "-" : flags.find('+') != std::string::npos ? "+"
                                                : flags.find(' ') != std::string::npos ? " " : "";
                out += pad(sign + digits, true);
                break;
            }
            case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
                if (arg.is_undefined()) return undefined_use(arg);
                if (!arg.is_number()) {
                    return type_error(std::string("must be real number, not ") + std::string(type_name(arg)));
                }
                std::string spec = "%";
                for (char f : flags)
                    if (f != '-' && f != '0') spec += f;
                spec += "." + std::to_string(has_prec ? std::min(precision, 300) : 6) + conv;
                int need = std::snprintf(nullptr, 0, spec.c_str(), arg.as_float());
                if (need < 0) return type_error("bad float format");
                std::string body(static_cast<size_t>(need) + 1, '\0');
                std::snprintf(body.data(), body.size(), spec.c_str(), arg.as_float());
                body.resize(static_cast<size_t>(need));
                bool finite = std::isfinite(arg.as_float());
                out += pad(std::move(body), finite);
                break;
            }
            default:
                return type_error(std::string("unsupported format character '") + conv + "'");
        }
        SKIPPY_TRY(r.check_string(out.size()));
    }
    // CPython: unconsumed arguments are an error unless the one argument is a mapping
    // or sequence other than a tuple or str (it then counts as a mapping).
    bool mapping_like = !tuple_args || !args.is(vtype::tuple);
    mapping_like = mapping_like && (args.is(vtype::dict) || args.is(vtype::list) || args.is_undefined());
    if (!used_mapping && next < list.size() && !mapping_like)
        return type_error("not all arguments converted during string formatting");
    SKIPPY_TRY(r.charge(out.size() / 16));
    return out;
}

}  // namespace skippy::jinja::detail
