// The syntax tree of a parsed template (internal to the jinja part).
//
// Positions are byte offsets into the template's normalized source (newlines already
// folded to "\n"); program::where() turns one into "line L, column C".
#pragma once

#include "jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace skippy::jinja::detail {

enum class expr_kind : uint8_t {
    literal,      // lit
    name,         // name
    list,         // args: items
    tuple,        // args: items
    dict,         // args: key0, value0, key1, value1 ...
    getattr,      // a.name
    getitem,      // a[b]
    slice,        // a:b:c inside [] (each may be null)
    call,         // a(args, kwargs)
    filter,       // a|name(args, kwargs); a is null for the filter of a {% filter %} / {% set %} block
    test,         // a is [not] name(args, kwargs)
    neg, pos,     // -a, +a
    not_,         // not a
    and_, or_,    // a and b, a or b
    binary,       // a op b
    compare,      // args[0] cmp_ops[0] args[1] cmp_ops[1] args[2] ...
    concat,       // args joined with ~
    cond,         // a if b else c (c may be null)
};

enum class bin_op : uint8_t { add, sub, mul, div, floordiv, mod, pow };
enum class cmp_op : uint8_t { eq, ne, lt, le, gt, ge, in, not_in };

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
    expr_kind   kind = expr_kind::literal;
    uint32_t    pos = 0;
    int         depth = 1;     // 1 + the depth of the deepest child (bounded at parse)
    value       lit;
    std::string name;
    int         builtin = -1;  // filter_id / test_id of a filter or test
    bool        negated = false;
    bin_op      op = bin_op::add;
    std::vector<cmp_op> cmp_ops;
    expr_ptr    a, b, c;
    std::vector<expr_ptr> args;
    std::vector<std::pair<std::string, expr_ptr>> kwargs;
};

// Left side of set / for / with: one name, a tuple of names, or namespace.attr.
struct assign_target {
    std::vector<std::string> names;
    bool                     tuple = false;
    std::string              ns_attr;  // set only: names[0] is the namespace
};

enum class stmt_kind : uint8_t {
    text,          // text
    print,         // {{ e }} or {% print e %}
    if_,           // branches (cond, body); else_body
    for_,          // target in e [if cond]: body; else_body
    set,           // target = e
    set_block,     // target [| filter e] = rendered body
    macro,         // name(params = defaults): body
    filter_block,  // body rendered, then the filter chain e
    with,          // with_targets = with_values: body
    break_,
    continue_,
    scoped,        // a body in its own scope ({% generation %})
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body_t = std::vector<stmt_ptr>;

struct stmt {
    stmt_kind     kind = stmt_kind::text;
    uint32_t      pos = 0;
    std::string   text;  // text; macro name
    expr_ptr      e;
    expr_ptr      cond;
    assign_target target;
    std::vector<std::pair<expr_ptr, body_t>> branches;
    body_t        body;
    body_t        else_body;

    // Names first assigned (not read) in the body's own frame: jinja2 makes them local
    // to that frame from its start, so until the assignment runs they are undefined,
    // also for nested frames, whatever an outer scope holds (see frame_locals()).
    std::vector<std::string> body_locals;
    std::vector<std::string> else_locals;

    // macro
    std::vector<std::string> params;
    std::vector<expr_ptr>    defaults;  // aligned to the last params
    bool                     uses_varargs = false;
    bool                     uses_kwargs = false;

    // with
    std::vector<assign_target> with_targets;
    std::vector<expr_ptr>      with_values;
};

// A parsed template: its normalized source (for positions) and its statements.
struct program {
    std::string         source;
    std::vector<size_t> line_starts;
    body_t              body;
    std::vector<std::string> body_locals;  // of the template's top-level frame

    // "line L, column C" of a byte offset (column counted in code points, from 1).
    std::string where(uint32_t pos) const;
};

}  // namespace skippy::jinja::detail
