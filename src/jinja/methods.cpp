// Methods of str, list, dict and the loop object, as the immutable sandbox lets a
// template call them.
#include "jinja/builtins.h"

#include "jinja/py_text.h"
#include "jinja/renderer.h"

#include <algorithm>

namespace skippy::jinja::detail {

namespace {

enum class method_id : int {
    // str
    capitalize, casefold, center, count, endswith, find, format, index, isalnum, isalpha, isdecimal,
    isdigit, islower, isnumeric, isspace, istitle, isupper, join, ljust, lower, lstrip, partition,
    removeprefix, removesuffix, replace, rfind, rindex, rjust, rpartition, rsplit, rstrip, split,
    splitlines, startswith, strip, swapcase, title, upper, zfill,
    // list / tuple (index, count above), list and dict
    copy, list_mutator,
    // dict
    items, keys, values, get, dict_mutator,
    // loop
    cycle, changed,
};

struct method_entry {
    std::string_view name;
    method_id        id;
};

#define M(n) method_entry{#n, method_id::n}
constexpr method_entry k_str_methods[] = {
    M(capitalize), M(casefold), M(center), M(count), M(endswith), M(find), M(format), M(index), M(isalnum),
    M(isalpha), M(isdecimal), M(isdigit), M(islower), M(isnumeric), M(isspace), M(istitle), M(isupper),
    M(join), M(ljust), M(lower), M(lstrip), M(partition), M(removeprefix), M(removesuffix), M(replace),
    M(rfind), M(rindex), M(rjust), M(rpartition), M(rsplit), M(rstrip), M(split), M(splitlines),
    M(startswith), M(strip), M(swapcase), M(title), M(upper), M(zfill),
};
constexpr method_entry k_list_methods[] = {M(index), M(count), M(copy)};
constexpr method_entry k_dict_methods[] = {M(items), M(keys), M(values), M(get), M(copy)};
#undef M

// Methods that change a list or dict in place. The immutable sandbox refuses the
// first group; the second is allowed by jinja2 but not by us (our lists are shared).
constexpr std::string_view k_list_unsafe[] = {"append", "reverse", "insert", "sort", "extend", "remove"};
constexpr std::string_view k_list_unsupported[] = {"pop", "clear"};
constexpr std::string_view k_dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};

value bound(const value & receiver, std::string_view name, method_id id) {
    auto c = std::make_shared<callable_data>();
    c->kind = callable_kind::method;
    c->id = static_cast<int>(id);
    c->name = std::string(name);
    c->receiver = receiver;
    return value::callable(std::move(c));
}

template <size_t N>
bool find_in(const method_entry (&table)[N], std::string_view name, method_id & id) {
    for (const auto & e : table)
        if (e.name == name) { id = e.id; return true; }
    return false;
}

template <size_t N>
bool listed(const std::string_view (&table)[N], std::string_view name) {
    return std::find(std::begin(table), std::end(table), name) != std::end(table);
}

value unsafe_attr(std::string_view name, const value & obj) {
    return value::undefined("access to attribute '" + std::string(name) + "' of '" + std::string(type_name(obj)) +
                            "' object is unsafe.");
}

status need_str(const value & v, std::string_view what) {
    if (v.is_undefined()) return undefined_use(v);
    if (!v.is_string())
        return type_error(std::string(what) + " arg must be None or str, not " + std::string(type_name(v)));
    return status::ok();
}

// Code-point index of a byte offset.
int64_t cp_index(std::string_view s, size_t byte) { return static_cast<int64_t>(text::length(s.substr(0, byte))); }

// where: -1 text left (ljust), 1 text right (rjust), 0 centered as CPython centers.
std::string pad_to(std::string_view s, int64_t width, const std::string & fill, int where) {
    auto len = static_cast<int64_t>(text::length(s));
    if (width <= len) return std::string(s);
    int64_t marg = width - len;
    int64_t left = where < 0 ? 0 : where > 0 ? marg : marg / 2 + (marg & width & 1);
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (int64_t i = 0; i < marg - left; ++i) out += fill;
    return out;
}

bool all_chars(std::string_view s, bool (*pred)(char32_t)) {
    if (s.empty()) return false;
    for (size_t i = 0; i < s.size();)
        if (!pred(text::decode(s, i))) return false;
    return true;
}

std::string py_title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
        char32_t c = text::decode(s, i);
        std::string one;
        text::append_utf8(one, c);
        bool cased = text::is_upper(c) || text::is_lower(c);
        if (cased) out += prev_cased ? text::lower(one) : text::upper(one);
        else out += one;
        prev_cased = cased;
    }
    return out;
}

value strings_list(std::vector<std::string> parts) {
    std::vector<value> items;
    items.reserve(parts.size());
    for (auto & p : parts) items.push_back(value::string(std::move(p)));
    return value::list(std::move(items));
}

result<value> str_method(renderer & r, method_id id, const std::string & s, const call_args & a, std::string_view name) {
    SKIPPY_TRY(r.charge(1 + s.size() / 16));  // every string method reads the string
    std::vector<value> v;
    std::vector<bool> given;
    auto bind = [&](std::initializer_list<std::string_view> params) {
        std::vector<std::string_view> p(params);
        return bind_args(name, p, a, v, given);
    };
    auto opt_chars = [&](size_t i, const std::string *& out) -> status {
        out = nullptr;
        if (!given[i] || v[i].is_none()) return status::ok();
        SKIPPY_TRY(need_str(v[i], name));
        out = &v[i].str();
        return status::ok();
    };
    auto int_arg = [&](size_t i, int64_t dflt) -> result<int64_t> {
        if (!given[i]) return dflt;
        if (!v[i].is_int_like())
            return type_error("'" + std::string(type_name(v[i])) + "' object cannot be interpreted as an integer");
        return v[i].as_int();
    };
    auto required = [&](size_t n) -> status {
        for (size_t i = 0; i < n; ++i)
            if (!given[i]) return type_error(std::string(name) + "() takes at least " + std::to_string(n) + " argument(s)");
        return status::ok();
    };
    switch (id) {
        case method_id::upper: SKIPPY_TRY(bind({})); return value::string(text::upper(s));
        case method_id::lower:
        case method_id::casefold: SKIPPY_TRY(bind({})); return value::string(text::lower(s));
        case method_id::capitalize: SKIPPY_TRY(bind({})); return value::string(text::capitalize(s));
        case method_id::swapcase: SKIPPY_TRY(bind({})); return value::string(text::swapcase(s));
        case method_id::title: SKIPPY_TRY(bind({})); return value::string(py_title(s));
        case method_id::strip:
        case method_id::lstrip:
        case method_id::rstrip: {
            SKIPPY_TRY(bind({"chars"}));
            const std::string * chars;
            SKIPPY_TRY(opt_chars(0, chars));
            return value::string(text::strip(s, chars, id != method_id::rstrip, id != method_id::lstrip));
        }
        case method_id::split:
        case method_id::rsplit: {
            SKIPPY_TRY(bind({"sep", "maxsplit"}));
            const std::string * sep;
            SKIPPY_TRY(opt_chars(0, sep));
            if (sep && sep->empty()) return type_error("empty separator");
            SKIPPY_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(1, -1));
            auto parts = id == method_id::split ? text::split(s, sep, maxsplit) : text::rsplit(s, sep, maxsplit);
            SKIPPY_TRY(r.check_items(parts.size()));
            SKIPPY_TRY(r.charge(parts.size()));
            return strings_list(std::move(parts));
        }
        case method_id::splitlines: {
            SKIPPY_TRY(bind({"keepends"}));
            auto parts = text::splitlines(s, given[0] && truthy(v[0]));
            SKIPPY_TRY(r.check_items(parts.size()));
            return strings_list(std::move(parts));
        }
        case method_id::startswith:
        case method_id::endswith: {
            SKIPPY_TRY(bind({"prefix"}));
            SKIPPY_TRY(required(1));
            std::vector<value> options = v[0].is(vtype::tuple) ? v[0].items() : std::vector<value>{v[0]};
            for (const auto & o : options) {
                if (!o.is_string())
                    return type_error(std::string(name) + " first arg must be str or a tuple of str, not " +
                                      std::string(type_name(o)));
                const std::string & p = o.str();
                bool hit = id == method_id::startswith ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                                                       : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
                if (hit) return value::boolean(true);
            }
            return value::boolean(false);
        }
        case method_id::replace: {
            SKIPPY_TRY(bind({"old", "new", "count"}));
            SKIPPY_TRY(required(2));
            SKIPPY_TRY(need_str(v[0], name));
            SKIPPY_TRY(need_str(v[1], name));
            SKIPPY_ASSIGN_OR_RETURN(int64_t n, int_arg(2, -1));
            std::string out;
            if (!text::replace(s, v[0].str(), v[1].str(), n, r.lim().max_output_bytes, out)) return r.check_string(SIZE_MAX);
            SKIPPY_TRY(r.charge(out.size() / 16));
            return value::string(std::move(out));
        }
        case method_id::find:
        case method_id::rfind:
        case method_id::index:
        case method_id::rindex: {
            SKIPPY_TRY(bind({"sub"}));
            SKIPPY_TRY(required(1));
            SKIPPY_TRY(need_str(v[0], name));
            bool reverse = id == method_id::rfind || id == method_id::rindex;
            size_t at = reverse ? s.rfind(v[0].str()) : s.find(v[0].str());
            if (at == std::string::npos) {
                if (id == method_id::index || id == method_id::rindex) return type_error("substring not found");
                return value::integer(-1);
            }
            return value::integer(cp_index(s, at));
        }
        case method_id::count: {
            SKIPPY_TRY(bind({"sub"}));
            SKIPPY_TRY(required(1));
            SKIPPY_TRY(need_str(v[0], name));
            return value::integer(static_cast<int64_t>(text::count(s, v[0].str())));
        }
        case method_id::join: {
            SKIPPY_TRY(bind({"iterable"}));
            SKIPPY_TRY(required(1));
            SKIPPY_ASSIGN_OR_RETURN(auto items, r.iterate(v[0]));
            std::string out;
            for (size_t i = 0; i < items.size(); ++i) {
                if (!items[i].is_string())
                    return type_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                                      std::string(type_name(items[i])) + " found");
                if (i) out += s;
                out += items[i].str();
                SKIPPY_TRY(r.check_string(out.size()));
            }
            SKIPPY_TRY(r.charge(out.size() / 16 + items.size()));
            return value::string(std::move(out));
        }
        case method_id::center:
        case method_id::ljust:
        case method_id::rjust: {
            SKIPPY_TRY(bind({"width", "fillchar"}));
            SKIPPY_TRY(required(1));
            SKIPPY_ASSIGN_OR_RETURN(int64_t width, int_arg(0, 0));
            std::string fill = " ";
            if (given[1]) {
                if (!v[1].is_string() || text::length(v[1].str()) != 1)
                    return type_error("The fill character must be exactly one character long");
                fill = v[1].str();
            }
            SKIPPY_TRY(r.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)) * fill.size()));
            int where = id == method_id::ljust ? -1 : id == method_id::rjust ? 1 : 0;
            return value::string(pad_to(s, width, fill, where));
        }
        case method_id::zfill: {
            SKIPPY_TRY(bind({"width"}));
            SKIPPY_TRY(required(1));
            SKIPPY_ASSIGN_OR_RETURN(int64_t width, int_arg(0, 0));
            SKIPPY_TRY(r.check_string(static_cast<size_t>(std::max<int64_t>(width, 0))));
            auto len = static_cast<int64_t>(text::length(s));
            if (width <= len) return value::string(s);
            size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
            return value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
        }
        case method_id::partition:
        case method_id::rpartition: {
            SKIPPY_TRY(bind({"sep"}));
            SKIPPY_TRY(required(1));
            SKIPPY_TRY(need_str(v[0], name));
            const std::string & sep = v[0].str();
            if (sep.empty()) return type_error("empty separator");
            size_t at = id == method_id::partition ? s.find(sep) : s.rfind(sep);
            if (at == std::string::npos) {
                if (id == method_id::partition) return value::tuple({value::string(s), value::string(""), value::string("")});
                return value::tuple({value::string(""), value::string(""), value::string(s)});
            }
            return value::tuple({value::string(s.substr(0, at)), value::string(sep), value::string(s.substr(at + sep.size()))});
        }
        case method_id::removeprefix:
        case method_id::removesuffix: {
            SKIPPY_TRY(bind({"fix"}));
            SKIPPY_TRY(required(1));
            SKIPPY_TRY(need_str(v[0], name));
            const std::string & f = v[0].str();
            if (id == method_id::removeprefix && s.compare(0, f.size(), f) == 0 && s.size() >= f.size())
                return value::string(s.substr(f.size()));
            if (id == method_id::removesuffix && s.size() >= f.size() && s.compare(s.size() - f.size(), f.size(), f) == 0)
                return value::string(s.substr(0, s.size() - f.size()));
            return value::string(s);
        }
        case method_id::isalnum: SKIPPY_TRY(bind({})); return value::boolean(all_chars(s, [](char32_t c) { return text::is_alpha(c) || text::is_digit(c); }));
        case method_id::isalpha: SKIPPY_TRY(bind({})); return value::boolean(all_chars(s, text::is_alpha));
        case method_id::isdigit:
        case method_id::isdecimal:
        case method_id::isnumeric: SKIPPY_TRY(bind({})); return value::boolean(all_chars(s, text::is_digit));
        case method_id::isspace: SKIPPY_TRY(bind({})); return value::boolean(all_chars(s, text::is_space));
        case method_id::islower:
        case method_id::isupper: {
            SKIPPY_TRY(bind({}));
            bool cased = false;
            for (size_t i = 0; i < s.size();) {
                char32_t c = text::decode(s, i);
                bool up = text::is_upper(c), low = text::is_lower(c);
                if ((id == method_id::islower && up) || (id == method_id::isupper && low)) return value::boolean(false);
                cased = cased || up || low;
            }
            return value::boolean(cased);
        }
        case method_id::istitle: SKIPPY_TRY(bind({})); return value::boolean(!s.empty() && py_title(s) == s && s != text::lower(s));
        case method_id::format: return make_error(error_code::unsupported, "str.format is not supported");
        default: break;
    }
    return type_error("unknown str method");
}

}  // namespace

bool find_method(const value & receiver, std::string_view name, value & out) {
    method_id id{};
    switch (receiver.type()) {
        case vtype::string:
            if (!find_in(k_str_methods, name, id)) return false;
            out = bound(receiver, name, id);
            return true;
        case vtype::list:
        case vtype::tuple:
            if (find_in(k_list_methods, name, id) && (id != method_id::copy || receiver.is(vtype::list))) {
                out = bound(receiver, name, id);
                return true;
            }
            if (!receiver.is(vtype::list)) return false;
            if (listed(k_list_unsafe, name)) { out = unsafe_attr(name, receiver); return true; }
            if (listed(k_list_unsupported, name)) { out = bound(receiver, name, method_id::list_mutator); return true; }
            return false;
        case vtype::dict:
            if (find_in(k_dict_methods, name, id)) { out = bound(receiver, name, id); return true; }
            if (listed(k_dict_unsafe, name)) { out = unsafe_attr(name, receiver); return true; }
            return false;
        case vtype::loop:
            if (name == "cycle") { out = bound(receiver, name, method_id::cycle); return true; }
            if (name == "changed") { out = bound(receiver, name, method_id::changed); return true; }
            return false;
        default:
            return false;
    }
}

result<value> call_method(renderer & r, const callable_data & m, const call_args & a) {
    auto id = static_cast<method_id>(m.id);
    const value & self = m.receiver;
    if (self.is_string()) return str_method(r, id, self.str(), a, m.name);
    std::vector<value> v;
    std::vector<bool> given;
    switch (id) {
        case method_id::index:
        case method_id::count: {
            static constexpr std::string_view params[] = {"value"};
            SKIPPY_TRY(bind_args(m.name, params, a, v, given));
            if (!given[0]) return type_error(m.name + "() takes exactly one argument (0 given)");
            int64_t n = 0;
            const auto & items = self.items();
            for (size_t i = 0; i < items.size(); ++i) {
                if (!equal(items[i], v[0])) continue;
                if (id == method_id::index) return value::integer(static_cast<int64_t>(i));
                ++n;
            }
            if (id == method_id::index) return type_error("value is not in list");
            return value::integer(n);
        }
        case method_id::copy:
            SKIPPY_TRY(bind_args(m.name, {}, a, v, given));
            return self;
        case method_id::list_mutator:
            return make_error(error_code::unsupported, "list." + m.name + "() is not supported (lists are immutable here)");
        case method_id::items:
        case method_id::keys:
        case method_id::values: {
            SKIPPY_TRY(bind_args(m.name, {}, a, v, given));
            std::vector<value> out;
            const auto & entries = self.dict_ref().entries;
            out.reserve(entries.size());
            SKIPPY_TRY(r.charge(entries.size()));
            for (const auto & [k, x] : entries) {
                if (id == method_id::items) out.push_back(value::tuple({k, x}));
                else out.push_back(id == method_id::keys ? k : x);
            }
            return value::list(std::move(out));
        }
        case method_id::get: {
            static constexpr std::string_view params[] = {"key", "default"};
            SKIPPY_TRY(bind_args(m.name, params, a, v, given));
            if (!given[0]) return type_error("get expected at least 1 argument, got 0");
            SKIPPY_TRY(check_hashable(v[0]));
            int64_t i = self.dict_ref().find(v[0]);
            if (i >= 0) return self.dict_ref().entries[static_cast<size_t>(i)].second;
            return given[1] ? v[1] : value::none();
        }
        case method_id::cycle: {
            if (a.pos.empty()) return type_error("no items for cycling given");
            const loop_data & l = self.loop_ref();
            return a.pos[l.index0 % a.pos.size()];
        }
        case method_id::changed: {
            loop_data & l = self.loop_ref();
            value now = value::tuple(a.pos);
            bool changed = !l.changed_seen || !equal(now, l.changed_last);
            l.changed_seen = true;
            l.changed_last = std::move(now);
            return value::boolean(changed);
        }
        default: break;
    }
    return type_error("unknown method " + m.name);
}

}  // namespace skippy::jinja::detail
