"""Driving the command-line tools from tests: in this process on fresh flags, or as a process
killed with SIGKILL right after its first checkpoint."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import subprocess
import sys
import threading
from typing import List, NamedTuple, Sequence

from absl import flags


class ToolRun(NamedTuple):
    code: int
    stdout: str
    stderr: str


def snapshot(root, folders: bool = False, stat: bool = False) -> dict:
    """Everything under ``root`` (hidden files included): relative path -> sha256 of the bytes
    of a file (None for a folder, listed with ``folders``); with ``stat`` each value is
    ``(digest, mode, mtime_ns)``, to tell that nothing was touched."""
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in (dirs if folders else []) + names:
            path = os.path.join(folder, name)
            digest = None
            if name in names:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            if stat:
                st = os.lstat(path)
                digest = (digest, st.st_mode, st.st_mtime_ns)
            found[os.path.relpath(path, root)] = digest
    return found


def dead_pid() -> int:
    """The pid of a process that has finished (a killed run's temporaries name one)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def run_tool(module, argv: Sequence[str]) -> ToolRun:
    """``module.main`` (a ``bert_cli`` tool) in this process on fresh flags parsed from
    ``argv``; its exit status (0, or the ``SystemExit`` code) and captured stdout/stderr.
    The fresh flags stand in for absl's ``flags.FLAGS`` (which ``runner.entry_points``' main
    reads) and for the module's ``FLAGS`` while it runs."""
    values = flags.FlagValues()
    module.define_flags(values)
    values([module.TOOL] + list(argv))
    saved = module.FLAGS, flags.FLAGS
    module.FLAGS = flags.FLAGS = values
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module.main([])
    except SystemExit as e:
        code = e.code
    finally:
        module.FLAGS, flags.FLAGS = saved
    return ToolRun(code, out.getvalue(), err.getvalue())


class KilledAfterFirstCheckpoint:
    """Starts ``command`` and kills it with SIGKILL as soon as it prints its first "Saved
    checkpoint for step" line on stderr; ``wait()`` returns the stderr lines it printed and
    asserts it really was killed (not finished or failed first)."""

    def __init__(self, command: Sequence[str], **popen_kwargs):
        self.process = subprocess.Popen(list(command), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, **popen_kwargs)
        self.lines: List[str] = []
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if line.startswith("Saved checkpoint for step"):
                os.kill(self.process.pid, signal.SIGKILL)
                break

    def wait(self, timeout: float = 540) -> List[str]:
        self._watcher.join(timeout=timeout)
        self.process.wait(timeout=60)
        self.process.stderr.close()
        assert self.process.returncode == -signal.SIGKILL, "".join(self.lines[-20:])
        return self.lines


def check_fp16_training(module, argv: Sequence[str], output_dir: str,
                        num_steps: int = 2) -> None:
    """Runs ``module`` with ``argv`` + ``--mixed_precision=fp16`` (training ``num_steps``
    steps into ``output_dir``) and asserts: exit 0, the mixed_float16 policy was on, finite
    positive step losses, the dynamic loss scale in the last checkpoint. The tool leaves the
    global Keras policy at mixed_float16: it is reset here for the tests that follow."""
    import json
    import math

    import keras
    import tensorflow as tf

    try:
        run = run_tool(module, list(argv) + ["--mixed_precision=fp16"])
        policy = keras.mixed_precision.global_policy().name
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert run.code == 0, run.stderr[-3000:]
    assert policy == "mixed_float16"
    with open(os.path.join(output_dir, "train_steps.jsonl"), encoding="utf-8") as f:
        steps = [json.loads(line) for line in f if line.strip()]
    assert [s["step"] for s in steps] == list(range(1, num_steps + 1))
    assert all(math.isfinite(s["loss"]) and s["loss"] > 0 for s in steps)
    reader = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-%d" % num_steps))
    assert any("loss_scale" in name for name in reader.get_variable_to_shape_map())


def assert_one_error_line(result, tool: str, *expected: str) -> str:
    """``result`` (a ``ToolRun``) failed with exit status 1, no traceback and exactly one
    ``<tool>: error:`` line holding every ``expected`` text; returns that line."""
    assert result.code == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("%s: error:" % tool)]
    assert len(errors) == 1, result.stderr[-3000:]
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]
