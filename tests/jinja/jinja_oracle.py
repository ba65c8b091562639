#!/usr/bin/env python3
"""Test oracle for src/jinja: renders template cases with Debian's python3-jinja2 the way
Hugging Face transformers renders chat templates, so that the C++ tests can demand
byte-identical output.

Environment (transformers' _compile_jinja_template): ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks (a case may turn them off), the loopcontrols extension and
a {% generation %} tag that just renders its body; `tojson` is json.dumps with
ensure_ascii=False and indent / separators / sort_keys passed through (no HTML escaping);
globals raise_exception(message) (raises TemplateError) and strftime_now(format) (here
formatting the case's fixed "now" instead of the wall clock).

Usage: jinja_oracle.py CASES.json RESULTS.json
  CASES.json: [{"name", "template", "context", "trim_blocks"?, "lstrip_blocks"?, "now"?}]
  RESULTS.json: [{"name", "output"} or {"name", "error": "syntax"|"raise"|"render", "message"}]
Never a runtime dependency: only the tests run it.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """transformers' assistant-token tracker, inactive: the body renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_environment(trim_blocks, lstrip_blocks, now):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks, extensions=[GenerationTag, loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}  # (settings, source) -> template: many cases share one model template


def render(case):
    settings = (case.get("trim_blocks", True), case.get("lstrip_blocks", True), case.get("now", "2025-03-14T15:09:26"))
    key = (settings, case["template"])
    try:
        if key not in _compiled:
            env = make_environment(settings[0], settings[1], datetime.fromisoformat(settings[2]))
            _compiled[key] = env.from_string(case["template"])
        template = _compiled[key]
    except Exception as e:  # TemplateSyntaxError, TemplateAssertionError ...
        return {"error": "syntax", "message": f"{type(e).__name__}: {e}"}
    try:
        return {"output": template.render(**case["context"])}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": "raise", "message": str(e)}
        return {"error": "render", "message": f"{type(e).__name__}: {e}"}
    except Exception as e:
        return {"error": "render", "message": f"{type(e).__name__}: {e}"}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        r = render(case)
        r["name"] = case["name"]
        results.append(r)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=True)


if __name__ == "__main__":
    main()
