#!/usr/bin/env python3
"""Fails when a function that should prefetch holds no prefetch instruction.

GCC takes a function whose only effect is a prefetch for one without side effects and
deletes the calls to it, with no warning; the hot loops then run without their
prefetches, only slower (src/kernels/avx512_util.h). This reads the disassembly of a
library's objects and checks, per demangled function name:

  --each REGEX  at least one function matches, and every one that does prefetches
  --any REGEX   at least one matching function prefetches (for code the compiler may
                inline into one caller or another)

Usage: check_prefetch_emitted.py --objdump objdump --library lib.a [--each R]... [--any R]...
"""
import argparse
import re
import subprocess
import sys

FUNCTION_HEADER = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def prefetches_per_function(objdump, library):
    out = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", library], check=True, capture_output=True,
                         text=True).stdout
    counts = {}
    name = None
    for line in out.splitlines():
        header = FUNCTION_HEADER.match(line)
        if header:
            name = header.group(1)
            counts.setdefault(name, 0)
        elif name is not None and "\tprefetch" in line:
            counts[name] += 1
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objdump", required=True)
    ap.add_argument("--library", required=True)
    ap.add_argument("--each", action="append", default=[])
    ap.add_argument("--any", action="append", default=[])
    args = ap.parse_args()
    counts = prefetches_per_function(args.objdump, args.library)
    failures = []
    for pattern in args.each:
        matched = {f: n for f, n in counts.items() if re.search(pattern, f)}
        if not matched:
            failures.append(f"no function matches '{pattern}'")
        for f, n in sorted(matched.items()):
            if n == 0:
                failures.append(f"no prefetch in {f} (matches '{pattern}')")
        print(f"'{pattern}': {len(matched)} functions, {sum(1 for n in matched.values() if n)} with prefetches")
    for pattern in args.any:
        matched = {f: n for f, n in counts.items() if re.search(pattern, f)}
        with_prefetch = [f for f, n in matched.items() if n > 0]
        if not with_prefetch:
            failures.append(f"none of the {len(matched)} functions matching '{pattern}' prefetches")
        print(f"'{pattern}': {len(matched)} functions, {len(with_prefetch)} with prefetches")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
