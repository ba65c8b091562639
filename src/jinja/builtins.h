// Filters, tests, global functions and methods of the template language (internal).
//
// Names are resolved at parse time (an unknown filter or test is a parse error, as in
// jinja2); the renderer dispatches on the ids below.
#pragma once

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/value.h"

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::jinja::detail {

class renderer;

enum class filter_id : int {
    abs, attr, batch, capitalize, center, default_, dictsort, escape, first, float_, format, indent,
    int_, items, join, last, length, list, lower, map, max, min, reject, rejectattr, replace, reverse,
    round, safe, select, selectattr, sort, string, sum, title, tojson, trim, truncate, unique, upper,
    wordcount,
};

enum class test_id : int {
    boolean, callable, defined, divisibleby, eq, escaped, even, false_, filter, float_, ge, gt, in,
    integer, iterable, le, lower, lt, mapping, ne, none, number, odd, sameas, sequence, string,
    test, true_, undefined, upper,
};

enum class global_id : int { range, dict, namespace_, raise_exception, strftime_now };

enum class name_status { known, unsupported, unknown };

// Filter / test id of a name ("d" and "count" are aliases, "==" names the eq test ...).
// `unsupported` for jinja2 builtins outside our subset (groupby, urlize ...).
name_status find_filter(std::string_view name, int & id);
name_status find_test(std::string_view name, int & id);
// A global function's id, or -1.
int find_global(std::string_view name);

struct call_args {
    std::vector<value>                          pos;
    std::vector<std::pair<std::string, value>>  kw;
};

// Binds call arguments to named parameters as Python does for `def f(p0, p1=..., ...)`:
// out[i] is the argument for params[i], undefined (and given[i] false) when not passed.
// Errors: too many positional arguments, an unknown or repeated keyword.
status bind_args(std::string_view fn, std::span<const std::string_view> params, const call_args & a,
                 std::vector<value> & out, std::vector<bool> & given);

// Python's binary arithmetic (+ - * / // % **) on two values, within r's limits.
result<value> arith(renderer & r, bin_op op, const value & a, const value & b);

// Python's printf-style `fmt % args` (and the format filter): %s %r %d %i %f %e %g
// %x %o %c %% with flags, width and precision; args a tuple, a dict for %(name)s, or one
// value. `tuple_args`: a tuple is the argument list (the % operator) rather than one value.
result<std::string> percent_format(renderer & r, const std::string & fmt, const value & args, bool tuple_args);

result<value> apply_filter(renderer & r, int id, const value & v, const call_args & a);
result<bool> apply_test(renderer & r, int id, const value & v, const call_args & a);

// Attribute lookup of a method name on a str, list or dict. Returns a bound method
// value, an "unsafe" undefined for methods the immutable sandbox forbids (append,
// update ...), or nullopt when `name` is no method of that type.
bool find_method(const value & receiver, std::string_view name, value & out);
result<value> call_method(renderer & r, const callable_data & m, const call_args & a);

}  // namespace skippy::jinja::detail
