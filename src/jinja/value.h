// Values of the template language, with Python semantics (internal to the jinja part).
//
// A value is what jinja2 would hold as a Python object: undefined (jinja2's default
// Undefined), None, bool, int (64-bit here: overflow is an error, not a big integer),
// float, str (UTF-8), list, tuple, dict (insertion-ordered), namespace, a callable
// (builtin, bound method, macro) or a loop object. Lists, tuples and dicts are
// immutable once built (the environment is jinja2's ImmutableSandboxedEnvironment) and
// shared by pointer; only a namespace changes in place.
#pragma once

#include "base/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace skippy::jinja::detail {

struct list_data;
struct dict_data;
struct namespace_data;
struct callable_data;
struct loop_data;

enum class vtype : uint8_t {
    undefined, none, boolean, integer, floating, string, list, tuple, dict, ns, callable, loop,
};

class value {
public:
    value() = default;  // undefined, without a hint

    static value undefined(std::string hint) { value v; v.s_ = std::move(hint); return v; }
    static value none() { return make(vtype::none); }
    static value boolean(bool b) { value v = make(vtype::boolean); v.i_ = b; return v; }
    static value integer(int64_t i) { value v = make(vtype::integer); v.i_ = i; return v; }
    static value floating(double f) { value v = make(vtype::floating); v.f_ = f; return v; }
    static value string(std::string s) { value v = make(vtype::string); v.s_ = std::move(s); return v; }
    static value list(std::vector<value> items);
    static value tuple(std::vector<value> items);
    static value dict(std::shared_ptr<const dict_data> d);
    static value ns(std::shared_ptr<namespace_data> n);
    static value callable(std::shared_ptr<const callable_data> c);
    static value loop(std::shared_ptr<loop_data> l);

    vtype type() const { return t_; }
    bool is(vtype t) const { return t_ == t; }
    bool is_undefined() const { return t_ == vtype::undefined; }
    bool is_none() const { return t_ == vtype::none; }
    bool is_string() const { return t_ == vtype::string; }
    bool is_number() const { return t_ == vtype::integer || t_ == vtype::floating || t_ == vtype::boolean; }
    bool is_int_like() const { return t_ == vtype::integer || t_ == vtype::boolean; }  // Python int (bool is one)
    bool is_sequence() const { return t_ == vtype::list || t_ == vtype::tuple; }

    // REQUIRES: the matching type.
    int64_t as_int() const { return i_; }          // integer or boolean
    double as_float() const { return t_ == vtype::floating ? f_ : static_cast<double>(i_); }  // any number
    const std::string & str() const { return s_; }  // string; the hint of an undefined
    const std::vector<value> & items() const;       // list or tuple
    const dict_data & dict_ref() const;
    namespace_data & ns_ref() const;
    const callable_data & callable_ref() const;
    loop_data & loop_ref() const;
    const std::shared_ptr<const void> & object() const { return p_; }  // identity of lists, dicts ...

private:
    static value make(vtype t) { value v; v.t_ = t; return v; }

    vtype                       t_ = vtype::undefined;
    int64_t                     i_ = 0;
    double                      f_ = 0;
    std::string                 s_;
    std::shared_ptr<const void> p_;
};

struct list_data {
    std::vector<value> items;
};

// An insertion-ordered dict with Python key equality (1, 1.0 and True are one key).
struct dict_data {
    std::vector<std::pair<value, value>> entries;

    // Index of `key`, or -1.
    int64_t find(const value & key) const;
    int64_t find(std::string_view key) const;
    const value * get(std::string_view key) const;
    // Sets key to v: an existing key keeps its place (and its first spelling).
    void set(value key, value v);

private:
    std::unordered_map<std::string, size_t> string_index_;  // string keys → entries index
};

struct namespace_data {
    std::vector<std::pair<std::string, value>> attrs;
    const value * get(std::string_view name) const;
    void set(const std::string & name, value v);
};

struct stmt;   // ast.h
struct scope;  // renderer.cpp

enum class callable_kind : uint8_t {
    builtin,  // a global function (range, namespace, raise_exception ...): id is its builtin_id
    method,   // a bound method of a str, list or dict: id is its method_id, receiver its self
    macro,    // a {% macro %}: body and the scope it was defined in
};

struct callable_data {
    callable_kind        kind = callable_kind::builtin;
    int                  id = 0;
    std::string          name;
    value                receiver;
    const stmt *         macro = nullptr;
    std::weak_ptr<scope> defined_in;  // weak: the scope holds the macro (no cycle)
};

// What `loop` shows inside a for body.
struct loop_data {
    std::shared_ptr<const std::vector<value>> items;  // after the loop's filter
    size_t                                    index0 = 0;
    bool                                      changed_seen = false;  // loop.changed state
    value                                     changed_last;
};

// --- Python semantics shared by the renderer and the builtins ---

// Python's bool().
bool truthy(const value & v);
// Python's ==, with jinja2's Undefined (equal only to another undefined).
bool equal(const value & a, const value & b);
// Python's <. Errors (runtime) for unorderable types ("'<' not supported ...").
result<bool> less(const value & a, const value & b);
// A dict key must be hashable: not a list, dict or namespace.
status check_hashable(const value & key);

// Python type names as error messages write them ("str", "int", "list", "dict" ...).
std::string_view type_name(const value & v);

// Python str() of a value as {{ }} prints it: a string as itself, None as "None", True,
// 1.5, [1, 'a'], {'k': 'v'}, an undefined as "". Nested containers deeper than
// `max_depth` are an error (a namespace can hold itself).
// A text longer than max_bytes is an error too.
result<std::string> to_str(const value & v, int max_depth = 64, size_t max_bytes = SIZE_MAX);
result<std::string> to_repr(const value & v, int max_depth = 64, size_t max_bytes = SIZE_MAX);
// Python float repr: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string float_repr(double f);

struct json_options {
    bool        ensure_ascii = false;
    bool        indent_set = false;  // json.dumps indent=None when false
    std::string indent;              // one level of indentation
    bool        separators_set = false;
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool        sort_keys = false;
    int         max_depth = 64;
    size_t      max_bytes = SIZE_MAX;
};
// Python json.dumps of a value with these options; errors for values JSON cannot hold
// (undefined, callables, namespaces: "Object of type X is not JSON serializable").
result<std::string> to_json(const value & v, const json_options & opts);

// The error every type mistake becomes (a render error, error_code::runtime).
status type_error(std::string message);
// The error of using an undefined value where jinja2's Undefined fails: its hint
// ("'x' is undefined", "'dict object' has no attribute 'y'" ...), error_code::runtime.
status undefined_use(const value & u);

}  // namespace skippy::jinja::detail
