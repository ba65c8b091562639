#!/usr/bin/env python3
"""Generates random template cases for the differential test against jinja2
(tests/jinja/random_test.cpp): expressions mixing every operator, filter, test and
method of our subset over values of every type, and statement soups mixing text,
whitespace control, loops, assignments, namespaces, macros, raw, block set and filter
blocks, with the environment's trim_blocks / lstrip_blocks on and off.

Deterministic for a seed. Usage: random_cases.py SEED COUNT OUT.json
"""
import json
import random
import sys

ATOMS = [
    "1", "0", "-3", "2.5", "0.1", "1e20", "1e-5", "3", "7", "-7", "100", "'abc'", "'A b C'", "''", "' x '",
    "'héllo wörld'", "'a,b,,c'", "'  pad  '", "'42'", "'3.7'", "'%s'", "'x\\ny\\n'", "'<tag>'", "none", "true",
    "false", "[1,2,3]", "['b','a','C']", "[]", "[1.5,2]", "{'a':1,'b':'x'}", "{}", "(1,'t')", "s", "n", "l", "d",
    "u", "f",
]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
FILTERS = [
    "length", "first", "last", "join", "join(', ')", "default('D')", "upper", "lower", "title", "capitalize",
    "trim", "string", "int", "float", "list", "reverse|list", "sort", "unique|list", "tojson", "tojson(indent=2)",
    "tojson(sort_keys=true)", "abs", "round", "round(1)", "wordcount", "center(9)", "indent(2)", "count", "sum",
    "min", "max", "items|list", "dictsort", "batch(2)|list", "truncate(5)", "replace('a','Z')",
    "map('string')|list", "select|list", "reject|list", "selectattr('a')|list", "format(1)", "trim('a')",
    "int(5)", "float(1.5)", "default('D', true)", "join('-', attribute='a')",
]
TESTS = [
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
    "boolean", "true", "false", "odd", "even", "divisibleby 2", "lower", "upper", "callable", "eq 1", "in [1,2]",
    "gt 1", "sameas none", "test", "filter",
]
METHODS = [
    "upper()", "lower()", "strip()", "split()", "split(',')", "split(',', 1)", "rsplit(' ', 1)",
    "startswith('a')", "endswith('c')", "replace('a','b')", "title()", "find('b')", "count('a')",
    "lstrip('a')", "rstrip('c')", "splitlines()", "capitalize()", "isdigit()", "zfill(5)", "center(7,'*')",
    "partition(',')", "keys()|list", "values()|list", "items()|list", "get('a')", "get('z', 0)", "index(1)",
    "count(1)", "join(['x','y'])",
]
# Only variables are sliced: jinja2 folds slices of constants at compile time into
# undefined values, a quirk we do not copy.
SLICED = ["s", "l", "d", "n", "f", "u", "(s~l)", "(l+l)"]
SUBSCRIPTS = ["0", "-1", "1:", "::-1", ":2", "'a'", "1:3"]
CONTEXT = {"s": "Hello, World", "n": None, "l": [3, 1, 2], "d": {"a": 1, "b": [1, 2], "c": {"x": "y"}}, "f": 1.5}


def expression(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(ATOMS)
    sub = lambda: expression(rng, depth + 1)  # noqa: E731
    if r < 0.5:
        return f"({sub()} {rng.choice(BINOPS)} {sub()})"
    if r < 0.65:
        return f"({sub()}|{rng.choice(FILTERS)})"
    if r < 0.75:
        return f"({sub()} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if r < 0.85:
        return f"({sub()}.{rng.choice(METHODS)})"
    if r < 0.9:
        return rng.choice(SLICED) + "[" + rng.choice(SUBSCRIPTS) + "]"
    if r < 0.95:
        return f"({sub()} if {sub()} else {sub()})"
    return f"(not {sub()})"


TEXTS = ["", " ", "  ", "\n", "\n\n", "  \n", "\n  ", "\t", "a", "b c", " x \n y ", "\n    ", "é", "\r\n", "}",
         "{", "%", "#"]
EXPRS = ["x", "i", "loop.index", "ns.n", "m(i)", "'s'", "1", "items|length", "x ~ i", "i * 2", "unset"]
CONDS = ["x", "i", "not x", "i > 1", "loop.first", "unset is defined"]


def tag(rng, body, kind="%"):
    if kind == "{":
        return "{{" + rng.choice(["", "", "-"]) + " " + body + " " + rng.choice(["", "", "-"]) + "}}"
    if kind == "#":
        return "{#" + rng.choice(["", "-"]) + " " + body + " " + rng.choice(["", "-"]) + "#}"
    return "{%" + rng.choice(["", "", "-", "+"]) + " " + body + " " + rng.choice(["", "", "-", "+"]) + "%}"


def statements(rng, depth=0):
    out = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        out.append(rng.choice(TEXTS))
        nested = lambda: statements(rng, depth + 1)  # noqa: E731
        if r < 0.25 or depth > 2:
            out.append(tag(rng, rng.choice(EXPRS), "{"))
        elif r < 0.4:
            other = tag(rng, "else") + nested() if rng.random() < 0.5 else ""
            out.append(tag(rng, "if " + rng.choice(CONDS)) + nested() + other + tag(rng, "endif"))
        elif r < 0.55:
            other = tag(rng, "else") + nested() if rng.random() < 0.3 else ""
            head = "for i in items" + rng.choice(["", " if i != 2"])
            out.append(tag(rng, head) + nested() + other + tag(rng, "endfor"))
        elif r < 0.65:
            out.append(tag(rng, "set " + rng.choice(["x", "unset"]) + " = " + rng.choice(EXPRS)))
        elif r < 0.72:
            out.append(tag(rng, "set ns.n = ns.n + 1"))
        elif r < 0.78:
            out.append(tag(rng, "comment text", "#"))
        elif r < 0.83:
            out.append(tag(rng, "raw") + rng.choice(["{{ x }}", " a\n", "{% if %}"]) + tag(rng, "endraw"))
        elif r < 0.9:
            out.append(tag(rng, "set y") + nested() + tag(rng, "endset") + tag(rng, "y", "{"))
        else:
            out.append(tag(rng, "filter upper") + nested() + tag(rng, "endfilter"))
        out.append(rng.choice(TEXTS))
    return "".join(out)


def main():
    seed, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    cases = []
    for k in range(count):
        if k % 2 == 0:
            cases.append({"name": f"expr{k}", "template": "{{ " + expression(rng) + " }}", "context": CONTEXT})
            continue
        source = (tag(rng, "set ns = namespace(n=0)") + rng.choice(TEXTS) +
                  "{% macro m(a) %}<{{ a }}>{% endmacro %}" + statements(rng))
        case = {"name": f"stmt{k}", "template": source, "context": {"items": [1, 2, 3], "x": "X", "unset": "ctx"}}
        case["trim_blocks"] = rng.random() >= 0.3
        case["lstrip_blocks"] = rng.random() >= 0.3
        cases.append(case)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main()
