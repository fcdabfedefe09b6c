"""The entry point of ``bench/``: lists the benchmarks by kind, or runs one.

    python -m bench                  # the list: kind, name, the first line of its docstring
    python -m bench NAME [ARGS...]   # runs bench/KIND/NAME.py with ARGS (NAME --help: its flags)

NAME is a module name (``inference``), or ``KIND/NAME``; the old file names (``bench_inference``,
``check_hf_export``) are accepted too. Run it from the repository root (or with the root on
``PYTHONPATH``). The list reads the docstrings without importing anything, so it is instant.
"""

from __future__ import annotations

import ast
import os
import runpy
import sys
import textwrap
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
KINDS = ("speed", "quality", "checks", "profiling")
# Started by a benchmark under bench/.venvs/hf (the HF side of a quality benchmark), or imported.
HELPERS = ("hf_common",)
OLD_NAMES = {"check_hf_export": "hf_export"}


def _docstring(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read(), path)) or ""


def summary(doc: str) -> str:
    """The first line of a docstring, without a leading "Benchmark:", "Check:" or the like (the
    kind says it)."""
    line = doc.strip().splitlines()[0] if doc.strip() else ""
    for prefix in ("Benchmark (not CI): ", "Benchmark: ", "Check: ", "Speed: ", "Quality parity: ",
                   "Checks: ", "Profiling: "):
        if line.startswith(prefix):
            return line[len(prefix):]
    return line


def modules() -> Dict[str, List[Tuple[str, str]]]:
    """{kind: [(name, path) sorted by name]} of every module under bench/KIND/."""
    found: Dict[str, List[Tuple[str, str]]] = {}
    for kind in KINDS:
        folder = os.path.join(HERE, kind)
        found[kind] = [(name[:-3], os.path.join(folder, name))
                       for name in sorted(os.listdir(folder))
                       if name.endswith(".py") and not name.startswith("_")]
    return found


def resolve(name: str) -> Tuple[str, str]:
    """(kind, module name) of NAME, KIND/NAME or an old file name; KeyError if none."""
    name = name[:-3] if name.endswith(".py") else name
    name = name.replace(".", "/").split("bench/")[-1]
    kind, _, short = name.rpartition("/")
    short = OLD_NAMES.get(short, short)
    if short.startswith("bench_"):
        short = short[len("bench_"):]
    for k, entries in modules().items():
        if (not kind or kind == k) and short in (n for n, _ in entries) and short not in HELPERS:
            return k, short
    raise KeyError(name)


def listing() -> str:
    lines = ["Benchmarks by kind: python -m bench NAME [--help | ARGS...]", ""]
    twins = []
    for kind, entries in modules().items():
        lines.append("%s: %s" % (kind, summary(_docstring(os.path.join(HERE, kind,
                                                                      "__init__.py")))))
        for name, path in entries:
            if name in HELPERS:
                continue
            if name.endswith("_hf"):
                twins.append(name)
                continue
            lines.append("  %-24s %s" % (name, summary(_docstring(path))))
        lines.append("")
    if twins:
        lines += textwrap.wrap("HF sides, started by their benchmark under bench/.venvs/hf: "
                               + ", ".join(twins), 100)
    from bench import harness  # standard library only

    shared = ["--" + name for name in harness.COMMON]
    shared += ["--worker", "--skip_kerashub", "--skip_hf", "--setup_only"]
    shared += ["--" + name for name in harness.MODEL_FLAGS if name != "batch_size"]
    lines += textwrap.wrap("Shared arguments (bench/harness.py), each benchmark taking those it "
                           "needs, with its own defaults: " + " ".join(shared), 100)
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    try:
        kind, name = resolve(argv[0])
    except KeyError:
        print("python -m bench: no benchmark %r\n\n%s" % (argv[0], listing()), file=sys.stderr)
        return 2
    sys.argv = [os.path.join(HERE, kind, name + ".py")] + argv[1:]
    runpy.run_module("bench.%s.%s" % (kind, name), run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
