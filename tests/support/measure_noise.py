"""Measures the float noise behind the suite's numeric bounds (tests/support/noise.py).

Runs the numeric tests (``tests.suite.AVX2_FILES`` and ``EXTRA``) under each configuration of
``CONFIGS``: this CPU's own instruction sets, oneDNN and XLA capped at AVX2 (as an AVX2-only
CPU runs them; ``tests/suite.py`` says how bfloat16 matmuls are handled there), and one intra-op
thread. Every ``noise.within`` / ``noise.record`` appends its difference to a log; the table
printed at the end has, per check, the worst difference in each configuration, the bound, and
the bound's margin over the worst (bound / worst).

Usage: ``python -m tests.support.measure_noise [--out table.md]`` (about 10 minutes on 2 cores).

Example:
    >>> from tests.support import measure_noise
    >>> measure_noise.table([{"check": "a/b", "diff": 1e-6, "bound": 1e-5, "config": "AVX2"}],
    ...                     ["AVX2"]).splitlines()[2]
    '| a/b | 1e-06 | 1e-05 | 10 |'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence

from tests import suite

EXTRA = ["tests/bert_cli/test_extract_features.py"]
CONFIGS = [("default", {}),
           ("AVX2", dict(suite.AVX2_CAPS)),
           ("default/1 thread", {"TF_NUM_INTRAOP_THREADS": "1"})]


def table(rows: List[dict], configs: Sequence[str]) -> str:
    """A markdown table: check, the worst difference per configuration, bound, margin.

    Args:
        rows: the logged lines (``check``, ``diff``, ``bound``, ``config``).
        configs: the configuration names, in column order.

    Returns:
        The table's text.
    """
    worst: Dict[str, Dict[str, float]] = {}
    bounds: Dict[str, float] = {}
    for row in rows:
        per = worst.setdefault(row["check"], {})
        per[row["config"]] = max(per.get(row["config"], 0.0), row["diff"])
        bounds[row["check"]] = row["bound"]
    lines = ["| check | " + " | ".join(configs) + " | bound | bound / worst |",
             "|---" * (len(configs) + 3) + "|"]
    for check in sorted(worst):
        values = [worst[check].get(c) for c in configs]
        top = max(v for v in values if v is not None)
        margin = "%.3g" % (bounds[check] / top) if top > 0 else "inf"
        lines.append("| %s | %s | %.3g | %s |" % (
            check, " | ".join("-" if v is None else "%.3g" % v for v in values),
            bounds[check], margin))
    return "\n".join(lines)


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args(argv)
    rows: List[dict] = []
    flags = suite.cpu_flags()
    with tempfile.TemporaryDirectory() as tmp:
        for name, caps in CONFIGS:
            log = os.path.join(tmp, "noise.jsonl")
            env = dict(os.environ, BERT_NOISE_LOG=log, **caps)
            for what, pytest_args, run_env in suite.plan(env, flags, "2", []):
                if "the suite" not in what:
                    continue  # the AVX2 pass of `make test`: the AVX2 configuration here
                pytest_args = [a for a in pytest_args if a not in ("tests", "--durations=25")]
                subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
                               + pytest_args + suite.AVX2_FILES + EXTRA,
                               cwd=suite.ROOT, env=run_env, check=False)
            if os.path.exists(log):
                with open(log) as f:
                    for line in f:
                        row = json.loads(line)
                        row["config"] = name
                        rows.append(row)
                os.remove(log)
    text = table(rows, [name for name, _ in CONFIGS])
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
