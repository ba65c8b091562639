#include "jinja/renderer.h"

#include "jinja/py_text.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace skippy::jinja::detail {

namespace {

// Recursion of eval/exec (expressions inside statements inside macro calls): bounds
// the native stack whatever the template does.
constexpr int k_max_eval_depth = 1000;

status limit_error(const std::string & what) { return make_error(error_code::runtime, what); }

status overflow() { return make_error(error_code::runtime, "integer overflow (Python would use a big integer)"); }

std::string op_symbol(bin_op op) {
    switch (op) {
        case bin_op::add: return "+";
        case bin_op::sub: return "-";
        case bin_op::mul: return "*";
        case bin_op::div: return "/";
        case bin_op::floordiv: return "//";
        case bin_op::mod: return "%";
        case bin_op::pow: return "**";
    }
    return "?";
}

status operand_error(bin_op op, const value & a, const value & b) {
    if (op == bin_op::add && a.is_string())
        return type_error("can only concatenate str (not \"" + std::string(type_name(b)) + "\") to str");
    if (op == bin_op::add && a.is(vtype::list))
        return type_error("can only concatenate list (not \"" + std::string(type_name(b)) + "\") to list");
    return type_error("unsupported operand type(s) for " + op_symbol(op) + ": '" + std::string(type_name(a)) +
                      "' and '" + std::string(type_name(b)) + "'");
}

double py_float_mod(double a, double b) {
    double mod = std::fmod(a, b);
    if (mod != 0.0) {
        if ((b < 0) != (mod < 0)) mod += b;
    } else {
        mod = std::copysign(0.0, b);
    }
    return mod;
}

double py_float_floordiv(double a, double b) {
    double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
    if (div == 0.0) return std::copysign(0.0, a / b);
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
}

// Python's a <= b: numbers directly (NaN compares false), other types as not b < a.
result<bool> less_equal(const value & a, const value & b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_int_like() && b.is_int_like()) return a.as_int() <= b.as_int();
        return a.as_float() <= b.as_float();
    }
    if (a.is_string() && b.is_string()) return a.str() <= b.str();
    SKIPPY_ASSIGN_OR_RETURN(bool gt, less(b, a));
    return !gt;
}

value json_to_value(const nlohmann::ordered_json & j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return value::none();
        case nlohmann::ordered_json::value_t::boolean: return value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return value::integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            auto u = j.get<uint64_t>();
            if (u <= static_cast<uint64_t>(INT64_MAX)) return value::integer(static_cast<int64_t>(u));
            return value::floating(static_cast<double>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return value::floating(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return value::string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            std::vector<value> items;
            items.reserve(j.size());
            for (const auto & x : j) items.push_back(json_to_value(x));
            return value::list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            auto d = std::make_shared<dict_data>();
            for (const auto & [k, x] : j.items()) d->set(value::string(k), json_to_value(x));
            return value::dict(std::move(d));
        }
        default: return value::none();  // binary / discarded: not produced by a JSON parse
    }
}

}  // namespace

result<value> arith(renderer & r, bin_op op, const value & a, const value & b) {
    if (op == bin_op::mod && a.is_string()) {
        // str % x formats, whatever x is (an undefined counts as an empty mapping).
        SKIPPY_ASSIGN_OR_RETURN(std::string s, percent_format(r, a.str(), b, true));
        return value::string(std::move(s));
    }
    if (a.is_undefined()) return undefined_use(a);
    if (b.is_undefined()) return undefined_use(b);
    bool both_int = a.is_int_like() && b.is_int_like();
    bool both_num = a.is_number() && b.is_number();
    switch (op) {
        case bin_op::add:
            if (both_int) {
                int64_t out;
                if (__builtin_add_overflow(a.as_int(), b.as_int(), &out)) return overflow();
                return value::integer(out);
            }
            if (both_num) return value::floating(a.as_float() + b.as_float());
            if (a.is_string() && b.is_string()) {
                SKIPPY_TRY(r.check_string(a.str().size() + b.str().size()));
                SKIPPY_TRY(r.charge((a.str().size() + b.str().size()) / 16));
                return value::string(a.str() + b.str());
            }
            if ((a.is(vtype::list) && b.is(vtype::list)) || (a.is(vtype::tuple) && b.is(vtype::tuple))) {
                SKIPPY_TRY(r.check_items(a.items().size() + b.items().size()));
                SKIPPY_TRY(r.charge(a.items().size() + b.items().size()));
                std::vector<value> items = a.items();
                items.insert(items.end(), b.items().begin(), b.items().end());
                return a.is(vtype::list) ? value::list(std::move(items)) : value::tuple(std::move(items));
            }
            return operand_error(op, a, b);
        case bin_op::sub:
            if (both_int) {
                int64_t out;
                if (__builtin_sub_overflow(a.as_int(), b.as_int(), &out)) return overflow();
                return value::integer(out);
            }
            if (both_num) return value::floating(a.as_float() - b.as_float());
            return operand_error(op, a, b);
        case bin_op::mul: {
            if (both_int) {
                int64_t out;
                if (__builtin_mul_overflow(a.as_int(), b.as_int(), &out)) return overflow();
                return value::integer(out);
            }
            if (both_num) return value::floating(a.as_float() * b.as_float());
            const value * seq = a.is_int_like() ? &b : &a;
            const value * count = a.is_int_like() ? &a : &b;
            if (!count->is_int_like() || !(seq->is_string() || seq->is_sequence())) return operand_error(op, a, b);
            int64_t n = std::max<int64_t>(0, count->as_int());
            if (seq->is_string()) {
                size_t unit = seq->str().size();
                if (unit && static_cast<uint64_t>(n) > r.lim().max_output_bytes / unit) return r.check_string(SIZE_MAX);
                SKIPPY_TRY(r.charge(unit * static_cast<size_t>(n) / 16));
                std::string out;
                out.reserve(unit * static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) out += seq->str();
                return value::string(std::move(out));
            }
            size_t unit = seq->items().size();
            if (unit && static_cast<uint64_t>(n) > r.lim().max_items / unit) return r.check_items(SIZE_MAX);
            SKIPPY_TRY(r.charge(unit * static_cast<size_t>(n)));
            std::vector<value> items;
            for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
            return seq->is(vtype::list) ? value::list(std::move(items)) : value::tuple(std::move(items));
        }
        case bin_op::div:
            if (!both_num) return operand_error(op, a, b);
            if (b.as_float() == 0.0) return type_error("division by zero");
            return value::floating(a.as_float() / b.as_float());
        case bin_op::floordiv:
        case bin_op::mod:
            if (!both_num) return operand_error(op, a, b);
            if (both_int) {
                int64_t x = a.as_int(), y = b.as_int();
                if (y == 0) return type_error(op == bin_op::mod ? "integer modulo by zero" : "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) {
                    if (op == bin_op::mod) return value::integer(0);
                    return overflow();
                }
                int64_t q = x / y, rem = x % y;
                if (rem != 0 && ((rem < 0) != (y < 0))) { q -= 1; rem += y; }
                return value::integer(op == bin_op::mod ? rem : q);
            }
            if (b.as_float() == 0.0) return type_error(op == bin_op::mod ? "float modulo" : "float floor division by zero");
            return value::floating(op == bin_op::mod ? py_float_mod(a.as_float(), b.as_float())
                                                     : py_float_floordiv(a.as_float(), b.as_float()));
        case bin_op::pow: {
            if (!both_num) return operand_error(op, a, b);
            if (both_int && b.as_int() >= 0) {
                int64_t base = a.as_int(), acc = 1;
                for (int64_t k = b.as_int(); k > 0;) {
                    if ((k & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow();
                    k >>= 1;
                    // base squared is a factor of the result whenever bits remain.
                    if (k && __builtin_mul_overflow(base, base, &base)) return overflow();
                }
                return value::integer(acc);
            }
            double x = a.as_float(), y = b.as_float();
            if (x == 0.0 && y < 0) return type_error("0.0 cannot be raised to a negative power");
            if (x < 0 && std::floor(y) != y) return type_error("complex results are not supported");
            double p = std::pow(x, y);
            if (std::isinf(p) && std::isfinite(x) && std::isfinite(y)) return type_error("(34, 'Numerical result out of range')");
            return value::floating(p);
        }
    }
    return operand_error(op, a, b);
}

value * scope::find_local(std::string_view name) {
    for (auto & [k, v] : vars)
        if (k == name) return &v;
    return nullptr;
}

void scope::set(const std::string & name, value v) {
    if (value * old = find_local(name)) { *old = std::move(v); return; }
    vars.emplace_back(name, std::move(v));
}

renderer::renderer(const program & prog, const render_options & opts) : prog_(prog), opts_(opts) {}

renderer::~renderer() {
    // A namespace may hold itself (set ns.me = ns): drop every attribute so that the
    // shared pointers let go of each other.
    for (auto & n : namespaces_) n->attrs.clear();
}

std::shared_ptr<namespace_data> renderer::new_namespace() {
    auto n = std::make_shared<namespace_data>();
    namespaces_.push_back(n);
    return n;
}

std::tm renderer::local_time() const {
    if (opts_.local_time) return opts_.local_time();
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
}

status renderer::charge(uint64_t units) {
    work_ += units;
    if (work_ > opts_.lim.max_work) return limit_error("render exceeds the work limit (max_work)");
    return status::ok();
}

status renderer::check_string(size_t n_bytes) const {
    if (n_bytes > opts_.lim.max_output_bytes) return limit_error("a string exceeds the output limit (max_output_bytes)");
    return status::ok();
}

status renderer::check_items(size_t n_items) const {
    if (n_items > opts_.lim.max_items) return limit_error("a list or dict exceeds the item limit (max_items)");
    return status::ok();
}

result<std::string> renderer::str(const value & v) {
    SKIPPY_ASSIGN_OR_RETURN(std::string s, to_str(v, 64, opts_.lim.max_output_bytes));
    SKIPPY_TRY(check_string(s.size()));
    SKIPPY_TRY(charge(s.size() / 16));
    return s;
}

status renderer::at(uint32_t pos, status st) const {
    if (st.is_ok() || positioned_) return st;
    positioned_ = true;
    if (st.code() == error_code::invalid_argument) return st;  // raise_exception: the template's own message
    return make_error(st.code(), prog_.where(pos) + ": " + st.message());
}

status renderer::append(std::string & out, std::string_view text) {
    if (out.size() + text.size() > opts_.lim.max_output_bytes)
        return limit_error("output exceeds the output limit (max_output_bytes)");
    SKIPPY_TRY(charge(1 + text.size() / 16));
    out.append(text);
    return status::ok();
}

result<std::string> renderer::run(const nlohmann::ordered_json & context) {
    auto globals = std::make_shared<scope>();
    for (const auto & [k, v] : context.items()) globals->set(k, json_to_value(v));
    scope_ptr root = frame(globals, prog_.body_locals);
    std::string out;
    SKIPPY_TRY(exec(prog_.body, root, out));
    return out;
}

scope_ptr renderer::frame(const scope_ptr & parent, const std::vector<std::string> & locals) {
    auto sc = std::make_shared<scope>();
    sc->parent = parent;
    for (const auto & n : locals) sc->set(n, value::undefined("'" + n + "' is undefined"));
    return sc;
}

value renderer::lookup(const std::string & name, const scope_ptr & sc) {
    for (scope * s = sc.get(); s; s = s->parent.get())
        if (value * v = s->find_local(name)) return *v;
    int g = find_global(name);
    if (g >= 0) {
        auto c = std::make_shared<callable_data>();
        c->kind = callable_kind::builtin;
        c->id = g;
        c->name = name;
        return value::callable(std::move(c));
    }
    return value::undefined("'" + name + "' is undefined");
}

// --- expressions ---

result<value> renderer::eval(const expr & e, const scope_ptr & sc) {
    if (++depth_ > k_max_eval_depth) {
        --depth_;
        return at(e.pos, limit_error("template recursion too deep"));
    }
    auto st = charge(1);
    if (!st.is_ok()) { --depth_; return at(e.pos, st); }
    auto r = eval_inner(e, sc);
    --depth_;
    return r;
}

status renderer::eval_args(const expr & e, const scope_ptr & sc, call_args & out) {
    for (const auto & a : e.args) {
        SKIPPY_ASSIGN_OR_RETURN(value v, eval(*a, sc));
        out.pos.push_back(std::move(v));
    }
    for (const auto & [k, a] : e.kwargs) {
        SKIPPY_ASSIGN_OR_RETURN(value v, eval(*a, sc));
        out.kw.emplace_back(k, std::move(v));
    }
    return status::ok();
}

result<value> renderer::eval_inner(const expr & e, const scope_ptr & sc) {
    switch (e.kind) {
        case expr_kind::literal: return e.lit;
        case expr_kind::name: return lookup(e.name, sc);
        case expr_kind::list:
        case expr_kind::tuple: {
            std::vector<value> items;
            items.reserve(e.args.size());
            for (const auto & a : e.args) {
                SKIPPY_ASSIGN_OR_RETURN(value v, eval(*a, sc));
                items.push_back(std::move(v));
            }
            return e.kind == expr_kind::list ? value::list(std::move(items)) : value::tuple(std::move(items));
        }
        case expr_kind::dict: {
            auto d = std::make_shared<dict_data>();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                SKIPPY_ASSIGN_OR_RETURN(value k, eval(*e.args[i], sc));
                SKIPPY_ASSIGN_OR_RETURN(value v, eval(*e.args[i + 1], sc));
                SKIPPY_TRY(at(e.args[i]->pos, check_hashable(k)));
                d->set(std::move(k), std::move(v));
            }
            return value::dict(std::move(d));
        }
        case expr_kind::getattr: {
            SKIPPY_ASSIGN_OR_RETURN(value base, eval(*e.a, sc));
            return at(e.pos, getattr(base, e.name));
        }
        case expr_kind::getitem: return eval_getitem(e, sc);
        case expr_kind::slice: return at(e.pos, type_error("a slice is only valid inside []"));
        case expr_kind::call: {
            SKIPPY_ASSIGN_OR_RETURN(value callee, eval(*e.a, sc));
            call_args args;
            SKIPPY_TRY(eval_args(e, sc, args));
            return at(e.pos, call(callee, args));
        }
        case expr_kind::filter: {
            value input;
            if (e.a) {
                SKIPPY_ASSIGN_OR_RETURN(input, eval(*e.a, sc));
            } else {
                input = placeholder_;
            }
            call_args args;
            SKIPPY_TRY(eval_args(e, sc, args));
            return at(e.pos, apply_filter(*this, e.builtin, input, args));
        }
        case expr_kind::test: {
            SKIPPY_ASSIGN_OR_RETURN(value input, eval(*e.a, sc));
            call_args args;
            SKIPPY_TRY(eval_args(e, sc, args));
            SKIPPY_ASSIGN_OR_RETURN(bool ok, at(e.pos, apply_test(*this, e.builtin, input, args)));
            return value::boolean(ok != e.negated);
        }
        case expr_kind::neg:
        case expr_kind::pos: {
            SKIPPY_ASSIGN_OR_RETURN(value v, eval(*e.a, sc));
            if (v.is_undefined()) return at(e.pos, undefined_use(v));
            if (v.is(vtype::floating)) return value::floating(e.kind == expr_kind::neg ? -v.as_float() : v.as_float());
            if (v.is_int_like()) {
                if (e.kind == expr_kind::pos) return value::integer(v.as_int());
                if (v.as_int() == INT64_MIN) return at(e.pos, overflow());
                return value::integer(-v.as_int());
            }
            return at(e.pos, type_error(std::string("bad operand type for unary ") + (e.kind == expr_kind::neg ? "-" : "+") +
                                        ": '" + std::string(type_name(v)) + "'"));
        }
        case expr_kind::not_: {
            SKIPPY_ASSIGN_OR_RETURN(value v, eval(*e.a, sc));
            return value::boolean(!truthy(v));
        }
        case expr_kind::and_:
        case expr_kind::or_: {
            SKIPPY_ASSIGN_OR_RETURN(value l, eval(*e.a, sc));
            bool t = truthy(l);
            if (e.kind == expr_kind::and_ ? !t : t) return l;
            return eval(*e.b, sc);
        }
        case expr_kind::binary: {
            SKIPPY_ASSIGN_OR_RETURN(value l, eval(*e.a, sc));
            SKIPPY_ASSIGN_OR_RETURN(value r, eval(*e.b, sc));
            return at(e.pos, arith(*this, e.op, l, r));
        }
        case expr_kind::compare: {
            SKIPPY_ASSIGN_OR_RETURN(value l, eval(*e.args[0], sc));
            for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(value r, eval(*e.args[i + 1], sc));
                bool ok = false;
                switch (e.cmp_ops[i]) {
                    case cmp_op::eq: ok = equal(l, r); break;
                    case cmp_op::ne: ok = !equal(l, r); break;
                    case cmp_op::lt: { SKIPPY_ASSIGN_OR_RETURN(ok, at(e.pos, less(l, r))); break; }
                    case cmp_op::gt: { SKIPPY_ASSIGN_OR_RETURN(ok, at(e.pos, less(r, l))); break; }
                    case cmp_op::le: { SKIPPY_ASSIGN_OR_RETURN(ok, at(e.pos, less_equal(l, r))); break; }
                    case cmp_op::ge: { SKIPPY_ASSIGN_OR_RETURN(ok, at(e.pos, less_equal(r, l))); break; }
                    case cmp_op::in: { SKIPPY_ASSIGN_OR_RETURN(ok, at(e.pos, contains(r, l))); break; }
                    case cmp_op::not_in: {
                        SKIPPY_ASSIGN_OR_RETURN(bool has, at(e.pos, contains(r, l)));
                        ok = !has;
                        break;
                    }
                }
                if (!ok) return value::boolean(false);
                l = std::move(r);
            }
            return value::boolean(true);
        }
        case expr_kind::concat: {
            std::string s;
            for (const auto & a : e.args) {
                SKIPPY_ASSIGN_OR_RETURN(value v, eval(*a, sc));
                SKIPPY_ASSIGN_OR_RETURN(std::string part, at(a->pos, str(v)));
                s += part;
                SKIPPY_TRY(at(e.pos, check_string(s.size())));
            }
            SKIPPY_TRY(at(e.pos, charge(s.size() / 16)));
            return value::string(std::move(s));
        }
        case expr_kind::cond: {
            SKIPPY_ASSIGN_OR_RETURN(value c, eval(*e.b, sc));
            if (truthy(c)) return eval(*e.a, sc);
            if (e.c) return eval(*e.c, sc);
            return value::undefined("the inline if-expression evaluated to false and no else section was defined");
        }
    }
    return value();
}

result<value> renderer::eval_getitem(const expr & e, const scope_ptr & sc) {
    SKIPPY_ASSIGN_OR_RETURN(value base, eval(*e.a, sc));
    if (e.b->kind != expr_kind::slice) {
        SKIPPY_ASSIGN_OR_RETURN(value key, eval(*e.b, sc));
        return at(e.pos, getitem(base, key));
    }
    const expr & s = *e.b;
    value parts[3];
    const expr_ptr * nodes[3] = {&s.a, &s.b, &s.c};
    for (int i = 0; i < 3; ++i) {
        if (*nodes[i]) {
            SKIPPY_ASSIGN_OR_RETURN(parts[i], eval(**nodes[i], sc));
        } else {
            parts[i] = value::none();
        }
    }
    // jinja2 subscripts with a slice directly (not through the sandbox's getitem), so
    // a bad slice is a TypeError rather than an undefined.
    if (base.is_undefined()) return at(e.pos, undefined_use(base));
    bool is_str = base.is_string();
    if (base.is(vtype::dict)) return at(e.pos, type_error("unhashable type: 'slice'"));
    if (!is_str && !base.is_sequence())
        return at(e.pos, type_error("'" + std::string(type_name(base)) + "' object is not subscriptable"));
    for (auto & p : parts) {
        if (p.is_undefined()) return at(e.pos, undefined_use(p));
        if (!p.is_none() && !p.is_int_like())
            return at(e.pos, type_error("slice indices must be integers or None or have an __index__ method"));
    }
    int64_t step = parts[2].is_none() ? 1 : parts[2].as_int();
    if (step == 0) return at(e.pos, make_error(error_code::runtime, "slice step cannot be zero"));
    std::vector<size_t> offs;
    int64_t len;
    if (is_str) {
        offs = text::char_offsets(base.str());
        len = static_cast<int64_t>(offs.size()) - 1;
    } else {
        len = static_cast<int64_t>(base.items().size());
    }
    auto adjust = [&](const value & v, int64_t dflt) {
        if (v.is_none()) return dflt;
        int64_t x = v.as_int();
        if (x < 0) {
            x += len;
            if (x < 0) x = step < 0 ? -1 : 0;
        } else if (x >= len) {
            x = step < 0 ? len - 1 : len;
        }
        return x;
    };
    int64_t start = adjust(parts[0], step < 0 ? len - 1 : 0);
    int64_t stop = adjust(parts[1], step < 0 ? -1 : len);
    std::vector<int64_t> idx;
    if (step > 0) for (int64_t i = start; i < stop; i += step) idx.push_back(i);
    else for (int64_t i = start; i > stop; i += step) idx.push_back(i);
    SKIPPY_TRY(at(e.pos, charge(idx.size())));
    if (is_str) {
        std::string out;
        if (step == 1 && !idx.empty()) {
            out = base.str().substr(offs[static_cast<size_t>(start)], offs[static_cast<size_t>(stop)] - offs[static_cast<size_t>(start)]);
        } else {
            for (int64_t i : idx) {
                size_t b = offs[static_cast<size_t>(i)];
                out.append(base.str(), b, offs[static_cast<size_t>(i) + 1] - b);
            }
        }
        return value::string(std::move(out));
    }
    std::vector<value> items;
    items.reserve(idx.size());
    for (int64_t i : idx) items.push_back(base.items()[static_cast<size_t>(i)]);
    return base.is(vtype::tuple) ? value::tuple(std::move(items)) : value::list(std::move(items));
}

result<bool> renderer::contains(const value & container, const value & item) {
    switch (container.type()) {
        case vtype::undefined: return false;  // iterating an undefined yields nothing
        case vtype::string:
            if (item.is_undefined()) return undefined_use(item);
            if (!item.is_string())
                return type_error("'in <string>' requires string as left operand, not " + std::string(type_name(item)));
            return container.str().find(item.str()) != std::string::npos;
        case vtype::list:
        case vtype::tuple:
            for (const auto & x : container.items())
                if (equal(x, item)) return true;
            return false;
        case vtype::dict:
            if (item.is(vtype::list) || item.is(vtype::dict) || item.is(vtype::ns))
                return type_error("unhashable type: '" + std::string(type_name(item)) + "'");
            return container.dict_ref().find(item) >= 0;
        default:
            return type_error("argument of type '" + std::string(type_name(container)) + "' is not iterable");
    }
}

result<value> renderer::getattr(const value & obj, std::string_view name) {
    value m;
    switch (obj.type()) {
        case vtype::undefined: return undefined_use(obj);
        case vtype::dict: {
            if (find_method(obj, name, m)) return m;
            if (const value * v = obj.dict_ref().get(name)) return *v;
            return value::undefined("'dict object' has no attribute '" + std::string(name) + "'");
        }
        case vtype::ns: {
            if (const value * v = obj.ns_ref().get(name)) return *v;
            return value::undefined("'Namespace object' has no attribute '" + std::string(name) + "'");
        }
        case vtype::loop: {
            const loop_data & l = obj.loop_ref();
            auto n = static_cast<int64_t>(l.items->size());
            auto i = static_cast<int64_t>(l.index0);
            if (name == "index") return value::integer(i + 1);
            if (name == "index0") return value::integer(i);
            if (name == "revindex") return value::integer(n - i);
            if (name == "revindex0") return value::integer(n - i - 1);
            if (name == "first") return value::boolean(i == 0);
            if (name == "last") return value::boolean(i == n - 1);
            if (name == "length") return value::integer(n);
            if (name == "depth") return value::integer(1);
            if (name == "depth0") return value::integer(0);
            if (name == "previtem") {
                if (i == 0) return value::undefined("there is no previous item");
                return (*l.items)[static_cast<size_t>(i - 1)];
            }
            if (name == "nextitem") {
                if (i + 1 >= n) return value::undefined("there is no next item");
                return (*l.items)[static_cast<size_t>(i + 1)];
            }
            if (find_method(obj, name, m)) return m;
            return value::undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
        }
        default:
            if (find_method(obj, name, m)) return m;
            if (obj.is_none()) return value::undefined("'None' has no attribute '" + std::string(name) + "'");
            return value::undefined("'" + std::string(type_name(obj)) + " object' has no attribute '" + std::string(name) + "'");
    }
}

result<value> renderer::getitem(const value & obj, const value & key) {
    if (obj.is_undefined()) return undefined_use(obj);
    auto no_element = [&]() -> result<value> {
        auto k = to_repr(key, 8, 1 << 12);
        return value::undefined("'" + std::string(type_name(obj)) + " object' has no element " + (k.is_ok() ? *k : "(key)"));
    };
    switch (obj.type()) {
        case vtype::dict: {
            if (!key.is(vtype::list) && !key.is(vtype::dict) && !key.is(vtype::ns) && !key.is_undefined()) {
                int64_t i = obj.dict_ref().find(key);
                if (i >= 0) return obj.dict_ref().entries[static_cast<size_t>(i)].second;
            }
            break;
        }
        case vtype::list:
        case vtype::tuple:
        case vtype::string: {
            if (!key.is_int_like()) break;
            int64_t i = key.as_int();
            if (obj.is_string()) {
                std::vector<size_t> offs = text::char_offsets(obj.str());
                auto n = static_cast<int64_t>(offs.size()) - 1;
                if (i < 0) i += n;
                if (i < 0 || i >= n) return no_element();
                auto b = offs[static_cast<size_t>(i)];
                return value::string(obj.str().substr(b, offs[static_cast<size_t>(i) + 1] - b));
            }
            auto n = static_cast<int64_t>(obj.items().size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) return no_element();
            return obj.items()[static_cast<size_t>(i)];
        }
        default: break;
    }
    if (key.is_string()) {
        value v;
        if (obj.is(vtype::dict)) {
            if (find_method(obj, key.str(), v)) return v;
            return value::undefined("'dict object' has no attribute '" + key.str() + "'");
        }
        return getattr(obj, key.str());
    }
    return no_element();
}

result<std::vector<value>> renderer::iterate(const value & v) {
    switch (v.type()) {
        case vtype::undefined: return std::vector<value>{};
        case vtype::list:
        case vtype::tuple: return v.items();
        case vtype::dict: {
            std::vector<value> keys;
            keys.reserve(v.dict_ref().entries.size());
            for (const auto & [k, x] : v.dict_ref().entries) keys.push_back(k);
            return keys;
        }
        case vtype::string: {
            std::vector<value> chars;
            const std::string & s = v.str();
            SKIPPY_TRY(charge(s.size()));
            for (size_t i = 0; i < s.size();) {
                size_t b = i;
                text::decode(s, i);
                chars.push_back(value::string(s.substr(b, i - b)));
            }
            return chars;
        }
        default:
            return type_error("'" + std::string(type_name(v)) + "' object is not iterable");
    }
}

result<value> renderer::call(const value & callee, const call_args & a) {
    if (callee.is_undefined()) return undefined_use(callee);
    if (!callee.is(vtype::callable)) return type_error("'" + std::string(type_name(callee)) + "' object is not callable");
    const callable_data & c = callee.callable_ref();
    switch (c.kind) {
        case callable_kind::builtin: return call_global(c.id, a);
        case callable_kind::method: return call_method(*this, c, a);
        case callable_kind::macro: return call_macro(c, a);
    }
    return type_error("not callable");
}

result<value> renderer::call_global(int id, const call_args & a) {
    std::vector<value> v;
    std::vector<bool> given;
    switch (static_cast<global_id>(id)) {
        case global_id::range: {
            if (!a.kw.empty()) return type_error("range() takes no keyword arguments");
            if (a.pos.empty() || a.pos.size() > 3)
                return type_error("range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
            for (const auto & x : a.pos) {
                if (x.is_undefined()) return undefined_use(x);
                if (!x.is_int_like())
                    return type_error("'" + std::string(type_name(x)) + "' object cannot be interpreted as an integer");
            }
            int64_t start = 0, stop = 0, step = 1;
            if (a.pos.size() == 1) stop = a.pos[0].as_int();
            else { start = a.pos[0].as_int(); stop = a.pos[1].as_int(); }
            if (a.pos.size() == 3) step = a.pos[2].as_int();
            if (step == 0) return type_error("range() arg 3 must not be zero");
            // The sandbox's safe_range: no range longer than 100000 items.
            constexpr int64_t k_max_range = 100000;
            long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
            long double n_items = span <= 0 ? 0 : std::ceil(span / std::abs(static_cast<long double>(step)));
            if (n_items > k_max_range)
                return type_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            SKIPPY_TRY(check_items(static_cast<size_t>(n_items)));
            SKIPPY_TRY(charge(static_cast<uint64_t>(n_items)));
            std::vector<value> items;
            for (int64_t i = 0; i < static_cast<int64_t>(n_items); ++i) items.push_back(value::integer(start + i * step));
            return value::list(std::move(items));
        }
        case global_id::dict: {
            auto d = std::make_shared<dict_data>();
            if (a.pos.size() > 1) return type_error("dict expected at most 1 argument, got " + std::to_string(a.pos.size()));
            if (a.pos.size() == 1) {
                const value & src = a.pos[0];
                if (src.is(vtype::dict)) {
                    *d = src.dict_ref();
                } else {
                    SKIPPY_ASSIGN_OR_RETURN(auto pairs, iterate(src));
                    for (const auto & p : pairs) {
                        SKIPPY_ASSIGN_OR_RETURN(auto kv, iterate(p));
                        if (kv.size() != 2) return type_error("dictionary update sequence element has length " +
                                                              std::to_string(kv.size()) + "; 2 is required");
                        SKIPPY_TRY(check_hashable(kv[0]));
                        d->set(kv[0], kv[1]);
                    }
                }
            }
            for (const auto & [k, x] : a.kw) d->set(value::string(k), x);
            SKIPPY_TRY(check_items(d->entries.size()));
            return value::dict(std::move(d));
        }
        case global_id::namespace_: {
            auto n = new_namespace();
            if (a.pos.size() > 1) return type_error("namespace expected at most 1 positional argument");
            if (a.pos.size() == 1) {
                if (!a.pos[0].is(vtype::dict)) return type_error("namespace's positional argument must be a dict");
                for (const auto & [k, x] : a.pos[0].dict_ref().entries) {
                    if (!k.is_string()) return type_error("keywords must be strings");
                    n->set(k.str(), x);
                }
            }
            for (const auto & [k, x] : a.kw) n->set(k, x);
            return value::ns(std::move(n));
        }
        case global_id::raise_exception: {
            static constexpr std::string_view params[] = {"message"};
            SKIPPY_TRY(bind_args("raise_exception", params, a, v, given));
            if (!given[0]) return type_error("raise_exception() missing 1 required positional argument: 'message'");
            SKIPPY_ASSIGN_OR_RETURN(std::string msg, str(v[0]));
            positioned_ = true;
            return make_error(error_code::invalid_argument, msg);
        }
        case global_id::strftime_now: {
            static constexpr std::string_view params[] = {"format"};
            SKIPPY_TRY(bind_args("strftime_now", params, a, v, given));
            if (!given[0]) return type_error("strftime_now() missing 1 required positional argument: 'format'");
            if (!v[0].is_string()) return type_error("strftime() argument 1 must be str, not " + std::string(type_name(v[0])));
            SKIPPY_TRY(check_string(v[0].str().size() * 64));
            // datetime.now() is naive: %z and %Z are empty, %f is the microseconds.
            std::string fmt;
            const std::string & f = v[0].str();
            for (size_t i = 0; i < f.size(); ++i) {
                if (f[i] == '%' && i + 1 < f.size()) {
                    char c = f[i + 1];
                    if (c == 'z' || c == 'Z') { ++i; continue; }
                    if (c == 'f') { fmt += "000000"; ++i; continue; }
                    fmt += f[i];
                    fmt += c;
                    ++i;
                    continue;
                }
                fmt += f[i];
            }
            std::tm tm = local_time();
            std::string out(fmt.size() * 64 + 64, '\0');
            size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
            out.resize(n);
            return value::string(std::move(out));
        }
    }
    return type_error("unknown global function");
}

result<value> renderer::call_macro(const callable_data & m, const call_args & a) {
    scope_ptr parent = m.defined_in.lock();
    if (!parent) return make_error(error_code::unsupported, "macro '" + m.name + "' called after its defining scope ended");
    if (call_depth_ >= opts_.lim.max_call_depth) return limit_error("macro calls nested too deeply (max_call_depth)");
    const stmt & s = *m.macro;
    size_t n = s.params.size();
    if (a.pos.size() > n && !s.uses_varargs)
        return type_error("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
    scope_ptr sc = frame(parent, s.body_locals);
    std::vector<bool> used_kw(a.kw.size(), false);
    size_t first_default = n - s.defaults.size();
    for (size_t i = 0; i < n; ++i) {
        const std::string & p = s.params[i];
        const value * arg = i < a.pos.size() ? &a.pos[i] : nullptr;
        for (size_t k = 0; k < a.kw.size(); ++k) {
            if (a.kw[k].first != p) continue;
            if (arg) return type_error("macro '" + m.name + "' got multiple values for argument '" + p + "'");
            arg = &a.kw[k].second;
            used_kw[k] = true;
        }
        if (arg) {
            sc->set(p, *arg);
        } else if (i >= first_default) {
            ++call_depth_;
            auto d = eval(*s.defaults[i - first_default], sc);
            --call_depth_;
            SKIPPY_TRY(d.error());
            sc->set(p, std::move(d).value());
        } else {
            sc->set(p, value::undefined("parameter '" + p + "' was not provided"));
        }
    }
    auto extra = std::make_shared<dict_data>();
    for (size_t k = 0; k < a.kw.size(); ++k) {
        if (used_kw[k]) continue;
        if (!s.uses_kwargs) return type_error("macro '" + m.name + "' takes no keyword argument '" + a.kw[k].first + "'");
        extra->set(value::string(a.kw[k].first), a.kw[k].second);
    }
    if (s.uses_kwargs) sc->set("kwargs", value::dict(std::move(extra)));
    if (s.uses_varargs) {
        std::vector<value> rest;
        for (size_t i = n; i < a.pos.size(); ++i) rest.push_back(a.pos[i]);
        sc->set("varargs", value::tuple(std::move(rest)));
    }
    std::string out;
    ++call_depth_;
    status st = exec(s.body, sc, out);
    --call_depth_;
    SKIPPY_TRY(st);
    return value::string(std::move(out));
}

// --- statements ---

status renderer::exec(const body_t & body, const scope_ptr & sc, std::string & out) {
    for (const auto & s : body) {
        if (++depth_ > k_max_eval_depth) {
            --depth_;
            return at(s->pos, limit_error("template recursion too deep"));
        }
        status st = charge(1);
        if (st.is_ok()) st = exec_one(*s, sc, out);
        --depth_;
        if (!st.is_ok()) return at(s->pos, st);
        if (jump_ != jump::none) return status::ok();
    }
    return status::ok();
}

status renderer::bind(const assign_target & t, value v, const scope_ptr & sc, uint32_t pos) {
    if (!t.tuple) {
        sc->set(t.names[0], std::move(v));
        return status::ok();
    }
    SKIPPY_ASSIGN_OR_RETURN(auto parts, at(pos, iterate(v)));
    if (parts.size() < t.names.size())
        return at(pos, type_error("not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                                  std::to_string(parts.size()) + ")"));
    if (parts.size() > t.names.size())
        return at(pos, type_error("too many values to unpack (expected " + std::to_string(t.names.size()) + ")"));
    for (size_t i = 0; i < parts.size(); ++i) sc->set(t.names[i], std::move(parts[i]));
    return status::ok();
}

status renderer::assign(const assign_target & t, value v, const scope_ptr & sc, uint32_t pos) {
    if (t.ns_attr.empty()) return bind(t, std::move(v), sc, pos);
    value target = lookup(t.names[0], sc);
    if (!target.is(vtype::ns)) return at(pos, type_error("cannot assign attribute on non-namespace object"));
    target.ns_ref().set(t.ns_attr, std::move(v));
    return status::ok();
}

status renderer::exec_one(const stmt & s, const scope_ptr & sc, std::string & out) {
    switch (s.kind) {
        case stmt_kind::text: return at(s.pos, append(out, s.text));
        case stmt_kind::print: {
            SKIPPY_ASSIGN_OR_RETURN(value v, eval(*s.e, sc));
            SKIPPY_ASSIGN_OR_RETURN(std::string text, at(s.pos, str(v)));
            return at(s.pos, append(out, text));
        }
        case stmt_kind::if_: {
            for (const auto & [c, body] : s.branches) {
                SKIPPY_ASSIGN_OR_RETURN(value v, eval(*c, sc));
                if (truthy(v)) return exec(body, sc, out);
            }
            return exec(s.else_body, sc, out);
        }
        case stmt_kind::for_: return exec_for(s, sc, out);
        case stmt_kind::set: {
            SKIPPY_ASSIGN_OR_RETURN(value v, eval(*s.e, sc));
            return assign(s.target, std::move(v), sc, s.pos);
        }
        case stmt_kind::set_block: {
            std::string buf;
            SKIPPY_TRY(exec(s.body, frame(sc, s.body_locals), buf));
            if (jump_ != jump::none) return status::ok();
            value v = value::string(std::move(buf));
            if (s.e) {
                placeholder_ = std::move(v);
                auto r = eval(*s.e, sc);
                placeholder_ = value();
                SKIPPY_TRY(r.error());
                v = std::move(r).value();
            }
            return assign(s.target, std::move(v), sc, s.pos);
        }
        case stmt_kind::macro: {
            auto c = std::make_shared<callable_data>();
            c->kind = callable_kind::macro;
            c->name = s.text;
            c->macro = &s;
            c->defined_in = sc;
            sc->set(s.text, value::callable(std::move(c)));
            return status::ok();
        }
        case stmt_kind::filter_block: {
            std::string buf;
            SKIPPY_TRY(exec(s.body, frame(sc, s.body_locals), buf));
            if (jump_ != jump::none) return status::ok();
            placeholder_ = value::string(std::move(buf));
            auto r = eval(*s.e, sc);
            placeholder_ = value();
            SKIPPY_TRY(r.error());
            SKIPPY_ASSIGN_OR_RETURN(std::string text, at(s.pos, str(*r)));
            return at(s.pos, append(out, text));
        }
        case stmt_kind::with: {
            scope_ptr inner = frame(sc, s.body_locals);
            for (size_t i = 0; i < s.with_targets.size(); ++i) {
                SKIPPY_ASSIGN_OR_RETURN(value v, eval(*s.with_values[i], sc));
                SKIPPY_TRY(bind(s.with_targets[i], std::move(v), inner, s.pos));
            }
            return exec(s.body, inner, out);
        }
        case stmt_kind::break_: jump_ = jump::break_; return status::ok();
        case stmt_kind::continue_: jump_ = jump::continue_; return status::ok();
        case stmt_kind::scoped: return exec(s.body, frame(sc, s.body_locals), out);
    }
    return status::ok();
}

status renderer::exec_for(const stmt & s, const scope_ptr & sc, std::string & out) {
    SKIPPY_ASSIGN_OR_RETURN(value seq, eval(*s.e, sc));
    SKIPPY_ASSIGN_OR_RETURN(std::vector<value> items, at(s.e->pos, iterate(seq)));
    if (s.cond) {
        std::vector<value> kept;
        for (auto & item : items) {
            auto probe = std::make_shared<scope>();
            probe->parent = sc;
            SKIPPY_TRY(bind(s.target, item, probe, s.pos));
            SKIPPY_ASSIGN_OR_RETURN(value c, eval(*s.cond, probe));
            if (truthy(c)) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, frame(sc, s.else_locals), out);
    auto loop = std::make_shared<loop_data>();
    loop->items = std::make_shared<const std::vector<value>>(std::move(items));
    for (size_t i = 0; i < loop->items->size(); ++i) {
        if (++iterations_ > opts_.lim.max_loop_iterations)
            return at(s.pos, limit_error("too many loop iterations (max_loop_iterations)"));
        scope_ptr inner = frame(sc, s.body_locals);
        SKIPPY_TRY(bind(s.target, (*loop->items)[i], inner, s.pos));
        loop->index0 = i;
        inner->set("loop", value::loop(loop));
        SKIPPY_TRY(exec(s.body, inner, out));
        if (jump_ == jump::break_) { jump_ = jump::none; break; }
        if (jump_ == jump::continue_) jump_ = jump::none;
    }
    return status::ok();
}

}  // namespace skippy::jinja::detail
