"""``make test``: the whole suite, and beside it the numeric golden tests once more under the
AVX2 caps (at the lowest CPU priority: ``main``).

Users' CPUs differ in the instructions they have, and oneDNN, Eigen and XLA pick other kernels
(other sums, other roundings) on an AVX2-only CPU than on an AVX-512/AMX one. So that a bound fit
to one machine's float noise shows up wherever the suite runs, the tests of ``AVX2_FILES`` run a
second time with oneDNN and XLA capped at AVX2 (``AVX2_CAPS``), unless the whole suite already
ran under such a cap.

A cap below AVX-512 on a CPU that has AVX-512 is an emulation with one gap: TensorFlow routes
bfloat16 matmuls to oneDNN by the CPU's own flags (AVX-512 present), and oneDNN, capped, has no
bfloat16 kernel for them and crashes. On a real AVX2 CPU TensorFlow runs them with Eigen. So
under such a cap the tests marked ``bf16_matmul`` run in a pytest of their own with oneDNN's
TensorFlow ops off (``TF_ENABLE_ONEDNN_OPTS=0``), which is what an AVX2 CPU runs for them.

The suite runs on ``TEST_WORKERS`` pytest-xdist workers (default 2), each test file on one
worker, the longest files first (conftest.py). Every process of it starts with the import shim
of tests/support/site on ``PYTHONPATH`` (``SITE``): ``import tensorflow`` then skips two
optional imports (JAX and scikit-learn, there for other tests) that nothing here uses.

Usage: ``python -m tests.suite [pytest arguments]`` (``make test``; ``TEST_WORKERS=0`` runs
everything in one process, one run after the other). Ends with one line
``suite: N passed, N failed, N skipped`` over all the runs.

Example:
    >>> from tests import suite
    >>> suite.emulates_avx2({"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"avx2", "avx512f"})
    True
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SITE = os.path.join(ROOT, "tests", "support", "site")

AVX2_CAPS = {"ONEDNN_MAX_CPU_ISA": "AVX2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}

# The tests whose bounds are float noise against the original's goldens or a fast path's
# faithful twin (docs/testing.md lists them with their bounds).
AVX2_FILES = [
    "tests/modeling/test_encoder.py",
    "tests/modeling/heads/test_pretraining.py",
    "tests/modeling/checkpoints/test_hf.py",
    "tests/modeling/checkpoints/test_tf1.py",
    "tests/modeling/training/test_optimizers.py",
    "tests/modeling/training/test_finetuning_golden.py",
    "tests/modeling/kernels/test_gelu_dense.py",
    "tests/modeling/test_jax_backend.py::test_encoder_goldens_on_jax",
    "tests/modeling/test_jax_backend.py::test_pretraining_trajectory_on_one_device_matches_the_original",
    "tests/modeling/test_jax_backend.py::test_the_originals_finetuning_run_on_jax",
    "tests/bert_cli/test_run_pretraining.py::test_deterministic_training_replays_the_original_trajectory",
]

# oneDNN's names of the instruction sets below AVX-512 (ONEDNN_MAX_CPU_ISA).
_BELOW_AVX512 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"}
_SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def cpu_flags() -> Set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it is not readable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def capped_below_avx512(env: Mapping[str, str]) -> bool:
    """Whether ``env`` caps oneDNN below AVX-512 (``ONEDNN_MAX_CPU_ISA``)."""
    return env.get("ONEDNN_MAX_CPU_ISA", "").upper() in _BELOW_AVX512


def emulates_avx2(env: Mapping[str, str], flags: Set[str]) -> bool:
    """Whether ``env`` caps oneDNN below AVX-512 on a CPU (``flags``) that has AVX-512, with
    oneDNN's TensorFlow ops on: TensorFlow's bfloat16 matmuls would crash there (module doc).

    Args:
        env: the environment the tests run in.
        flags: the CPU's feature flags.

    Returns:
        A bool.
    """
    onednn_on = env.get("TF_ENABLE_ONEDNN_OPTS", "1").lower() not in ("0", "false")
    return capped_below_avx512(env) and "avx512f" in flags and onednn_on


# Starts pytest at the lowest CPU priority (Linux's SCHED_IDLE: it runs only on a core that
# nothing else wants; elsewhere nice 19), then replaces itself with pytest: no preexec_fn, which
# is not safe beside the thread that reads the other run's output.
_IDLE = ("import os, sys\n"
         "try:\n"
         "    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
         "except (AttributeError, OSError):\n"
         "    os.nice(19)\n"
         "os.execv(sys.executable, [sys.executable, '-m', 'pytest'] + sys.argv[1:])\n")


def _start(args: Sequence[str], env: Mapping[str, str], idle: bool = False) -> subprocess.Popen:
    command = [sys.executable] + (["-c", _IDLE] if idle else ["-m", "pytest"]) + list(args)
    return subprocess.Popen(command, cwd=ROOT, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)


def _counts(line: str, counts: Dict[str, int]) -> Dict[str, int]:
    """The counts of pytest's summary line (``counts`` if ``line`` is not one)."""
    if " in " in line and _SUMMARY.search(line):
        return {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                for n, kind in _SUMMARY.findall(line)}
    return counts


def _header(what: str, args: Sequence[str]) -> str:
    return "\n===== %s: pytest %s\n" % (what, " ".join(args))


def _pytest(args: Sequence[str], env: Mapping[str, str], what: str,
            out: Optional[List[str]] = None) -> Tuple[int, Dict[str, int]]:
    """Runs pytest; (exit status, counts of its summary line). Its output is passed through,
    or, with ``out``, kept there (the header first) and the run started at the lowest priority
    (``_IDLE``)."""
    write = sys.stdout.write if out is None else out.append
    write(_header(what, args))
    proc = _start(args, env, idle=out is not None)
    counts: Dict[str, int] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        write(line)
        if out is None:
            sys.stdout.flush()
        counts = _counts(line, counts)
    return proc.wait(), counts


def plan(env: Mapping[str, str], flags: Set[str], workers: str,
         extra: Sequence[str]) -> List[Tuple[str, List[str], Dict[str, str]]]:
    """The pytest runs of ``make test``: (what, arguments, environment) each.

    Args:
        env: the environment ``make test`` was called with.
        flags: the CPU's feature flags.
        workers: pytest-xdist's ``-n`` (``0``: one process).
        extra: more pytest arguments, for every run.

    Returns:
        The runs, in order.
    """
    # A test file's tests go to one worker (``loadscope``), so that its module fixtures (trained
    # models, exports) are built once, not once per worker; the files go out in the order of
    # conftest.py's ``LONGEST_FIRST`` (``--no-loadscope-reorder``: not by their number of tests).
    dist = ["--dist", "loadscope", "--no-loadscope-reorder"] if workers != "0" else []
    common = ["-q", "-n", workers] + dist
    base = dict(env, PYTHONPATH=os.pathsep.join(
        [SITE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE]))
    runs = []

    def split(what, args, run_env):
        if emulates_avx2(run_env, flags):
            runs.append((what, args + ["-m", "not bf16_matmul"], run_env))
            runs.append((what + ", bf16 matmuls as on an AVX2 CPU (Eigen)",
                         args + ["-m", "bf16_matmul"],
                         dict(run_env, TF_ENABLE_ONEDNN_OPTS="0")))
        else:
            runs.append((what, args, run_env))

    split("the suite", common + ["--durations=25"] + list(extra) + ["tests"], base)
    if not capped_below_avx512(env):
        split("the numeric golden tests under the AVX2 caps", common + list(extra) + AVX2_FILES,
              dict(base, **AVX2_CAPS))
    return runs


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``plan``'s pytest runs; prints the closing line; returns the exit status.

    The first run (the suite) runs in the foreground, its output passed through. The others
    (the AVX2 pass) start beside it at the lowest CPU priority (``_IDLE``): they take only the
    cores the suite leaves idle (its processes' waits, its workers' ends), and run at full
    speed once it is done; their output follows the suite's. (At the same priority, a third
    pytest on two cores starved the multi-worker and two-device tests, whose processes wait
    for each other: 778 s against 640 s.) With ``TEST_WORKERS=0`` they run one after the
    other."""
    extra = list(sys.argv[1:] if argv is None else argv)
    workers = os.environ.get("TEST_WORKERS", "2")
    runs = plan(os.environ, cpu_flags(), workers, extra)
    beside = runs[1:] if workers != "0" else []
    kept: List[List[str]] = [[] for _ in beside]
    results: Dict[int, Tuple[int, Dict[str, int]]] = {}

    def run(index: int, out: Optional[List[str]] = None) -> None:
        what, args, env = runs[index]
        results[index] = _pytest(args, env, what, out=out)

    threads = [threading.Thread(target=run, args=(i + 1, kept[i])) for i in range(len(beside))]
    for thread in threads:
        thread.start()
    for index in range(len(runs) - len(beside)):
        run(index)
    for thread, lines in zip(threads, kept):
        thread.join()
        sys.stdout.write("".join(lines))
    sys.stdout.flush()
    totals = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    status = 0
    for index, (what, _, _) in enumerate(runs):
        code, counts = results[index]
        for kind in totals:
            totals[kind] += counts.get(kind, 0)
        if code != 0:
            status = code
            print("===== %s: pytest exited %d" % (what, code), flush=True)
    failed = totals["failed"] + totals["error"]
    print("suite: %d passed, %d failed, %d skipped" % (totals["passed"], failed,
                                                        totals["skipped"]), flush=True)
    return status or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
