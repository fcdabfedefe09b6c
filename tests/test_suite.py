"""tests/suite.py (`make test`'s runs) and tests/support/noise.py (the bounds' records)."""

import doctest
import os
import json

import pytest

from tests import suite
from tests.support import measure_noise, noise

AVX512 = {"avx2", "avx512f", "avx512bw"}
AVX2_ONLY = {"avx2", "fma"}


def _runs(env, flags):
    assert all(run_env["PYTHONPATH"].split(os.pathsep)[0] == suite.SITE
               for _, _, run_env in suite.plan(env, flags, "2", []))
    return [(what, args, {k: v for k, v in run_env.items() if k in (
        "ONEDNN_MAX_CPU_ISA", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS")})
            for what, args, run_env in suite.plan(env, flags, "2", ["-x"])]


def test_plain_make_test_runs_the_suite_then_the_goldens_under_the_avx2_caps():
    runs = _runs({}, AVX2_ONLY)
    assert [what for what, _, _ in runs] == ["the suite",
                                             "the numeric golden tests under the AVX2 caps"]
    assert runs[0][1] == ["-q", "-n", "2", "--dist", "loadscope", "--no-loadscope-reorder",
                          "--durations=25", "-x", "tests"] and runs[0][2] == {}
    assert runs[1][1][-len(suite.AVX2_FILES):] == suite.AVX2_FILES
    assert runs[1][2] == suite.AVX2_CAPS


def test_on_an_avx512_cpu_the_capped_bf16_matmul_tests_run_with_onednn_off():
    runs = _runs({}, AVX512)
    assert len(runs) == 3
    (_, golden, golden_env), (_, bf16, bf16_env) = runs[1], runs[2]
    assert golden[-2:] == ["-m", "not bf16_matmul"] and golden_env == suite.AVX2_CAPS
    assert bf16[-2:] == ["-m", "bf16_matmul"]
    assert bf16_env == dict(suite.AVX2_CAPS, TF_ENABLE_ONEDNN_OPTS="0")


def test_a_suite_already_capped_is_not_run_again():
    assert [w for w, _, _ in _runs({"ONEDNN_MAX_CPU_ISA": "AVX2"}, AVX2_ONLY)] == ["the suite"]
    split = _runs({"ONEDNN_MAX_CPU_ISA": "avx2"}, AVX512)
    assert len(split) == 2 and split[1][2]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    # oneDNN's own ops off, or a cap with AVX-512: nothing to split
    assert len(_runs({"ONEDNN_MAX_CPU_ISA": "AVX2", "TF_ENABLE_ONEDNN_OPTS": "0"}, AVX512)) == 1
    assert not suite.emulates_avx2({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, AVX512)


_IDLE_CHECK = """
import os
import sys


def test_priority():
    policy = os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None
    assert policy == getattr(os, "SCHED_IDLE", None) or os.nice(0) == 19, policy
    print("BESIDE " + os.environ["WHICH"])


def test_exit():
    assert os.environ["WHICH"] != "fail"
"""


def test_the_runs_after_the_first_go_beside_it_at_the_lowest_priority(monkeypatch, tmp_path,
                                                                      capsys):
    """main(): the first run in the foreground; the others at once beside it, at the lowest
    CPU priority, their output printed after its own, in the plan's order; every run's counts
    in the closing line and a failed one in the exit status."""
    (tmp_path / "test_beside.py").write_text(_IDLE_CHECK)
    (tmp_path / "test_front.py").write_text("def test_front():\n    print('FRONT')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = suite.ROOT
    common = ["-q", "-s", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    monkeypatch.setattr(suite, "plan", lambda *args: [
        ("front", common + [str(tmp_path / "test_front.py")], env),
        ("second", common + [str(tmp_path / "test_beside.py")], dict(env, WHICH="second")),
        ("third", common + [str(tmp_path / "test_beside.py")], dict(env, WHICH="fail"))])
    assert suite.main([]) == 1
    out = capsys.readouterr().out
    assert out.index("FRONT") < out.index("===== second") < out.index("BESIDE second") \
        < out.index("===== third") < out.index("BESIDE fail"), out
    assert "===== third: pytest exited 1" in out
    assert out.rstrip().endswith("suite: 4 passed, 1 failed, 0 skipped"), out


def test_every_avx2_file_exists_and_holds_recorded_bounds():
    import os

    for entry in suite.AVX2_FILES:
        path = os.path.join(suite.ROOT, entry.split("::")[0])
        with open(path) as f:
            text = f.read()
        assert "noise." in text, path
        if "::" in entry:
            assert "def %s(" % entry.split("::")[1] in text, entry


def test_noise_records_each_check_and_asserts_its_bound(tmp_path, monkeypatch):
    log = tmp_path / "noise.jsonl"
    monkeypatch.setenv("BERT_NOISE_LOG", str(log))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    noise.within("a/b", 1e-6, 1e-5)
    with pytest.raises(AssertionError, match="a/c: 2e-05 above its bound 1e-05"):
        noise.within("a/c", 2e-5, 1e-5)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows == [{"check": "a/b", "diff": 1e-6, "bound": 1e-5, "config": "AVX2"},
                    {"check": "a/c", "diff": 2e-5, "bound": 1e-5, "config": "AVX2"}]
    table = measure_noise.table(rows + [dict(rows[0], config="default", diff=5e-7)],
                                ["default", "AVX2"])
    assert "| a/b | 5e-07 | 1e-06 | 1e-05 | 10 |" in table
    assert "| a/c | - | 2e-05 | 1e-05 | 0.5 |" in table


@pytest.mark.parametrize("module", [suite, noise, measure_noise])
def test_docstring_examples(module, monkeypatch):
    monkeypatch.delenv("BERT_NOISE_LOG", raising=False)
    failures, tried = doctest.testmod(module, verbose=False)
    assert tried > 0 and failures == 0


def test_the_longest_first_files_exist():
    from tests import conftest

    missing = [p for p in conftest.LONGEST_FIRST
               if not os.path.isfile(os.path.join(suite.ROOT, p))]
    assert not missing, missing



def _imported(code, pythonpath):
    """Which of JAX and scikit-learn a fresh process has imported after each of ``code``'s
    parts (a list of lists)."""
    import subprocess
    import sys

    report = "print('imported:', *(m for m in ('jax', 'sklearn') if m in sys.modules), ';')"
    program = "import sys\n" + "".join(part + "\n" + report + "\n" for part in code)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=pythonpath)
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, check=True)
    return [line.split()[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("imported:")]


def test_the_import_shim_skips_only_the_optional_imports_of_tensorflow_and_keras():
    pytest.importorskip("jax")
    pytest.importorskip("sklearn")
    # without the shim, ``import tensorflow`` imports both (the dev install has them)
    assert _imported(["import tensorflow"], "") == [["jax", "sklearn"]]
    # with it, neither; and whoever else imports them gets them, seqeval (scikit-learn) too
    assert _imported(["import tensorflow", "import jax, seqeval.metrics"],
                     suite.SITE) == [[], ["jax", "sklearn"]]
