"""``bert_cli.runner``: a successful run marks what it wrote (``run_outputs.json``) and names
the results an earlier run left beside them; ``BERT_TRACEBACK=1`` keeps tracebacks."""

import json
import pathlib
import os

import pytest
from absl import flags

from bert_cli import run_classifier, runner
from bert_common import atomic, files
from bert_common.errors import InputError
from tests import paths
from tests.bert_cli.test_run_classifier import MRPC
from tests.support.slices import glue_slice
from tests.support.tools import run_tool

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")


def _classifier(data_dir, out, *modes):
    return ["--task_name=mrpc", "--data_dir=%s" % data_dir, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
            "--output_dir=%s" % out, "--max_seq_length=32", *modes]


def test_a_rerun_names_the_results_an_earlier_run_left(tmp_path):
    data_dir = glue_slice(MRPC, tmp_path / "mrpc", {"dev": 8, "test": 8})
    out = tmp_path / "out"
    first = run_tool(run_classifier, _classifier(data_dir, out, "--do_eval", "--do_predict"))
    assert first.code == 0, first.stderr[-3000:]
    marked = json.loads((out / runner.RUN_OUTPUTS).read_text())
    assert marked["tool"] == "run_classifier.py" and marked["earlier"] == []
    assert {"eval_results.txt", "test_results.tsv", "MRPC.tsv"} <= set(marked["written"])
    assert "warning: " not in first.stderr

    second = run_tool(run_classifier, _classifier(data_dir, out, "--do_predict"))
    assert second.code == 0, second.stderr[-3000:]
    marked = json.loads((out / runner.RUN_OUTPUTS).read_text())
    assert marked["earlier"] == ["eval_results.txt"]
    assert {"test_results.tsv", "MRPC.tsv"} <= set(marked["written"])
    assert "eval_results.txt" not in marked["written"]
    warnings = [line for line in second.stderr.splitlines()
                if line.startswith("run_classifier.py: warning: ")]
    assert len(warnings) == 1 and "eval_results.txt in %s" % out in warnings[0], warnings
    assert (out / "eval_results.txt").exists()  # named, never removed


def test_mark_outputs_skips_training_state_and_folders(tmp_path):
    for name in ("checkpoint", "model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001",
                 "train.tf_record", "train_steps.jsonl", "labels.txt", ".x.tmp",
                 "events.out.tfevents.1.host", "old_scores.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "export").mkdir()
    written = [files.abspath(str(tmp_path / "new.txt"))]
    (tmp_path / "new.txt").write_text("x")
    assert runner.mark_outputs("tool.py", str(tmp_path), written) == ["old_scores.txt"]
    marked = json.loads((tmp_path / runner.RUN_OUTPUTS).read_text())
    assert marked["written"] == ["new.txt"] and marked["earlier"] == ["old_scores.txt"]


_WORKER_1 = {"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("strategy, tf_config, chief", [
    ("multi_worker", None, True),
    ("multi_worker", {"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 0}},
     True),
    ("multi_worker", _WORKER_1, False),
    ("multi_worker", {"cluster": {"chief": ["c"], "worker": ["a"]},
                      "task": {"type": "worker", "index": 0}}, False),
    ("multi_worker", {"cluster": {"chief": ["c"], "worker": ["a"]},
                      "task": {"type": "chief", "index": 0}}, True),
    ("multi_worker", "not json", True),
    ("multi_worker", ["a list"], True),
    ("default", _WORKER_1, True),  # TF_CONFIG means nothing to other strategies
])
def test_only_the_chief_marks_outputs(monkeypatch, strategy, tf_config, chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config if isinstance(tf_config, str)
                           else json.dumps(tf_config))
    values = flags.FlagValues()
    flags.DEFINE_string("strategy", strategy, "", flag_values=values)
    values(["tool"])
    assert runner._is_chief_process(values) is chief


def test_a_marker_that_cannot_be_written_is_a_warning(tmp_path, monkeypatch, capsys):
    """The run succeeded: a failure to write run_outputs.json is one warning, exit 0."""
    values = flags.FlagValues()
    flags.DEFINE_string("output_dir", str(tmp_path), "", flag_values=values)
    values(["tool"])

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "mark_outputs", broken)
    assert runner.run_main("tool.py", lambda fv: 7, values, ["tool"]) == 7
    err = capsys.readouterr().err
    assert err.startswith("tool.py: warning: could not write run_outputs.json in %s" % tmp_path)
    assert err.count("\n") == 1 and "removed" not in err
    # An earlier run's marker would name that run's outputs as this one's: it goes.
    (tmp_path / runner.RUN_OUTPUTS).write_text('{"written": ["old.txt"]}')
    assert runner.run_main("tool.py", lambda fv: 7, values, ["tool"]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the earlier run's one" in err and "was removed" in err
    assert not (tmp_path / runner.RUN_OUTPUTS).exists()


def test_an_errors_notes_are_on_its_one_line(capsys):
    """A note (where a previous output is kept, bert_common.atomic) is part of the one line."""
    def run(fv):
        e = OSError(28, "No space left on device")
        e.add_note("the previous out/a.txt is kept in out/.a.txt.x.tmp/.previous.a.txt")
        raise e

    values = flags.FlagValues()
    values(["tool"])
    with pytest.raises(SystemExit):
        runner.run_main("tool.py", run, values, ["tool"])
    assert capsys.readouterr().err == (
        "tool.py: error: [Errno 28] No space left on device (the previous out/a.txt is kept in "
        "out/.a.txt.x.tmp/.previous.a.txt)\n")


_FAILING_WORKER = """
import atexit, sys
from absl import flags
from bert_cli import runner
from bert_common.errors import InputError
atexit.register(print, "exit handlers ran")  # TensorFlow's waited there for its peers
values = flags.FlagValues()
flags.DEFINE_string("strategy", "default", "", flag_values=values)
values(["tool", "--strategy=%s" % sys.argv[1]])
def run(fv):
    raise InputError("a collective failed")
runner.run_main("tool.py", run, values, ["tool"])
"""


@pytest.mark.parametrize("strategy, leaves_at_once", [("multi_worker", True), ("default", False)])
def test_a_failed_worker_of_a_cluster_leaves_at_once(tmp_path, strategy, leaves_at_once):
    """A worker of a multi-worker cluster that fails says its one line and leaves without the
    exit handlers (TensorFlow's waited minutes there for the peers, which waited for it in a
    collective); another run exits as usual, its handlers run."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=paths.PYTHONPATH, TF_CONFIG=json.dumps(
        {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
         "task": {"type": "worker", "index": 1}}))
    proc = subprocess.run([sys.executable, "-c", _FAILING_WORKER, strategy], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr == "tool.py: error: a collective failed\n"
    assert ("exit handlers ran" in proc.stdout) != leaves_at_once


def test_bert_traceback_keeps_the_traceback(monkeypatch, capsys):
    def run(fv):
        raise InputError("bad thing")

    values = flags.FlagValues()
    values(["tool"])
    with pytest.raises(SystemExit):
        runner.run_main("tool.py", run, values, ["tool"])
    assert capsys.readouterr().err == "tool.py: error: bad thing\n"
    monkeypatch.setenv("BERT_TRACEBACK", "1")
    with pytest.raises(InputError, match="bad thing"):
        runner.run_main("tool.py", run, values, ["tool"])


def test_a_run_that_fails_part_way_marks_what_it_wrote(tmp_path):
    """--do_eval --do_predict on a disk that fills while the predictions are written: the
    error line, the eval results this run put in place, and run_outputs.json saying so."""
    import errno

    data_dir = glue_slice(MRPC, tmp_path / "mrpc", {"dev": 8, "test": 8})
    out = tmp_path / "out"

    def disk_full(event, path):
        if event == "write" and path.endswith("test_results.tsv"):
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with atomic.inject_faults(disk_full):
        run = run_tool(run_classifier, _classifier(data_dir, out, "--do_eval", "--do_predict"))
    assert run.code == 1
    errors = [line for line in run.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "No space left on device" in errors[0], run.stderr[-2000:]
    marked = json.loads((out / runner.RUN_OUTPUTS).read_text())
    assert "eval_results.txt" in marked["written"]
    assert not {"test_results.tsv", "MRPC.tsv"} & set(marked["written"] + os.listdir(out))
    assert marked["error"] == errors[0].split(": error: ", 1)[1]


def test_only_results_in_the_output_dir_count_for_a_failed_run(tmp_path):
    """A failed run writes run_outputs.json only when it put a result file in --output_dir
    (not for training state, nor for files elsewhere such as the compiled-kernel cache)."""
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = files.abspath(str(tmp_path / "cache" / "kernel.so"))
    assert runner._results_in(str(out), [elsewhere]) == []
    state = [files.abspath(str(out / n)) for n in ("train_steps.jsonl", "model.ckpt-2.index")]
    assert runner._results_in(str(out), state) == []
    result = files.abspath(str(out / "eval_results.txt"))
    assert runner._results_in(str(out), state + [result]) == [result]
    assert runner._results_in(str(out), [files.abspath(str(out / "export" / "x.txt"))]) == []


@pytest.mark.parametrize("argv, allowed", [([], True), (["--xla_kernels"], True),
                                           (["--noxla_kernels"], False),
                                           (["--deterministic"], False)])
def test_noxla_kernels_and_deterministic_keep_tensorflows_ops_in_prediction(argv, allowed):
    """The flags that turn the training kernels off turn off prediction's fused LayerNorm too
    (modeling/kernels/switch.py), for the whole run."""
    from modeling.kernels import switch

    values = flags.FlagValues()
    flags.DEFINE_bool("xla_kernels", True, "", flag_values=values)
    flags.DEFINE_bool("deterministic", False, "", flag_values=values)
    values(["tool"] + argv)
    seen = runner.run_main("tool.py", lambda fv: switch.inference_kernels_allowed(), values,
                           ["tool"])
    assert seen == allowed
    assert switch.inference_kernels_allowed()  # only for the run


def test_tensorflow_words_are_left_out_of_the_error_line():
    """A full disk under a checkpoint save, as TensorFlow 2.21 words it (seen with
    run_classifier on a 3 MB tmpfs): the line names the checkpoint and the cause, not the
    function node, the op or the temporary shard."""
    from bert_common.errors import user_words as _user_words

    seen = ("{{function_node __wrapped__SaveV2_dtypes_136_device_/job:localhost/replica:0/"
            "task:0/device:CPU:0}} /out/model.ckpt-45_temp/part-00000-of-00001.data-00000-of-"
            "00001.tempstate3935616471025868875; No space left on device [Op:SaveV2]")
    assert _user_words(seen) == ("/out/model.ckpt-45: No space left on device "
                                 "(writing the checkpoint)")
    assert _user_words("corrupted record at 12 [Op:IteratorGetNext] name: x") == \
        "corrupted record at 12"
    assert _user_words("--output_dir=/x is not writable") == "--output_dir=/x is not writable"


@pytest.fixture
def short_temp():
    """A system temp folder short enough for a tool's own one (``runner.MAX_TEMP_BASE``): right
    under the suite's temp root, not in a ``tmp_path``."""
    import shutil
    import tempfile

    root = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    folder = tempfile.mkdtemp(prefix="t", dir=root)
    assert len(folder) <= runner.MAX_TEMP_BASE, folder
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


_TOOL = """
import atexit, os, subprocess, sys, tempfile
from absl import flags
from bert_cli import runner

atexit.register(lambda: print("teardown ran"))

def define_flags(flag_values):
    flags.DEFINE_integer("code", 0, "exit status of main", flag_values=flag_values)
    flags.DEFINE_bool("trace", False, "trace a tf.function (autograph)", flag_values=flag_values)
    flags.DEFINE_bool("forkserver", False, "start a forkserver pool (its pymp-* temp folder)",
                      flag_values=flag_values)

def main(argv):
    # scratch files as autograph (tempfile, removed by an atexit handler) and TensorFlow's C++
    # side (TMPDIR) make them
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("x = 1")
    subprocess.run(["sh", "-c", 'echo x > "$TMPDIR/staged_upload"'], check=True)
    if flags.FLAGS.forkserver:
        import multiprocessing
        with multiprocessing.get_context("forkserver").Pool(1) as pool:
            assert pool.map(abs, [-1]) == [1]
    if flags.FLAGS.trace:
        import tensorflow as tf

        @tf.function
        def double(x):
            if x > 0:  # autograph turns this into a tf.cond: its module file is written
                return x * 2
            return x
        print(int(double(tf.constant(2))))
    sys.stdout.write("x" * 100000)  # a block left in the buffer, no newline
    sys.stderr.write("done")
    return flags.FLAGS.code

if __name__ == "__main__":  # a forkserver's worker imports this module again
    runner.start(define_flags, main)
"""


@pytest.mark.parametrize("env,code,teardown,extra", [
    ({}, 0, False, []),
    ({}, 3, True, []),  # a failed run keeps Python's exit (its handlers may report)
    ({"BERT_SLOW_EXIT": "1"}, 0, True, []),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                               "task": {"type": "worker", "index": 1}})}, 0, True, []),
    # multiprocessing removes its forkserver's temp folder (in the tool's) at exit itself
    ({}, 3, True, ["--forkserver"]),
    ({}, 0, False, ["--forkserver"]),
])
def test_a_successful_run_ends_without_the_interpreters_teardown(tmp_path, short_temp, env, code,
                                                                 teardown, extra):
    """``start``: exit status 0 skips the teardown (atexit handlers: not run), with every byte
    written to stdout and stderr flushed; a failure, a multi-worker cluster, or
    ``BERT_SLOW_EXIT=1`` exits as usual."""
    import subprocess
    import sys

    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    temp = short_temp
    proc = subprocess.run([sys.executable, str(script), "--code=%d" % code] + extra,
                          cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=paths.PYTHONPATH, TMPDIR=str(temp),
                                   **env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert proc.stdout.startswith("x" * 100000)
    assert proc.stderr.startswith("done") and "Traceback" not in proc.stderr, proc.stderr
    assert ("teardown ran" in proc.stdout) == teardown
    assert os.listdir(temp) == []  # the run's scratch files went with it, on every way out


def test_the_temp_folder_a_killed_run_left_goes_when_the_next_tool_starts(tmp_path, short_temp):
    """A run killed with SIGKILL leaves its temp folder; the next tool's start removes it (its
    writer is dead), not one of a live process."""
    import subprocess
    import sys

    from bert_common import atomic
    from tests.support.tools import dead_pid

    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    temp = short_temp
    killed = temp / (".bert-tmp.%s-%d.abc.tmp" % (atomic._HOST, dead_pid()))
    live = temp / (".bert-tmp.%s-%d.abc.tmp" % (atomic._HOST, os.getpid()))
    for folder in (killed, live):
        (folder / ".bert-shards.x.tmp").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=paths.PYTHONPATH, TMPDIR=str(temp)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.listdir(temp) == [live.name]


def test_a_long_system_temp_folder_is_left_as_it_is(tmp_path, short_temp):
    """Where the system's temp folder is too long for a forkserver's socket inside a folder of
    the tool's own, the tool makes none: its multiprocessing pool starts."""
    import subprocess
    import sys

    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    temp = short_temp / ("x" * 30)  # still short enough for multiprocessing's own socket
    temp.mkdir()
    assert len(str(temp)) > runner.MAX_TEMP_BASE
    proc = subprocess.run([sys.executable, str(script), "--forkserver"], cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=paths.PYTHONPATH, TMPDIR=str(temp)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "staged_upload" in os.listdir(temp)  # no folder of its own: written here
    assert not [name for name in os.listdir(temp) if name.startswith(".bert-tmp.")]


def test_autograph_module_files_go_with_the_run(tmp_path, short_temp):
    """TensorFlow's autograph writes a module file per converted function to the temp folder
    and removes it in an atexit handler, which the exit of ``start`` skips: the files are in the
    process's own temp folder, removed with it."""
    import subprocess
    import sys

    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    temp = short_temp
    proc = subprocess.run([sys.executable, str(script), "--trace"], cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=paths.PYTHONPATH, TMPDIR=str(temp),
                                   TF_CPP_MIN_LOG_LEVEL="3"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("4\n")
    assert os.listdir(temp) == []


def test_skips_teardown_reads_tf_config():
    one = json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    assert runner.skips_teardown({}) and runner.skips_teardown({"TF_CONFIG": one})
    assert not runner.skips_teardown({"TF_CONFIG": "{not json"})
    # "cluster": null is no cluster (as _in_a_cluster reads it); other shapes: the slow exit.
    assert runner.skips_teardown({"TF_CONFIG": '{"cluster": null}'})
    for odd in ('[1]', '{"cluster": [1]}', '{"cluster": {"worker": null}}'):
        assert not runner.skips_teardown({"TF_CONFIG": odd}), odd
    assert not runner.skips_teardown({"BERT_SLOW_EXIT": "1"})
