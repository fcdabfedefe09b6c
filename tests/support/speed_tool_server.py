"""One child process that runs several command-line tools, one after another, on request.

Starting a tool as its own process costs an ``import tensorflow`` (3-5 s on the test machine).
Where a test needs the tools to run in *another* process than the test (its environment read at
``import tensorflow``: e.g. the GCS cache settings of tests/support/gcs_loopback.py; a process
that never saw the test's state) but not a *fresh* process per tool, a ``ToolServer`` runs each
tool's ``main`` on fresh flags (``tests.support.tools.run_tool``) in one child: TensorFlow is
imported once.

Each request is a tool module's name and its argv; the answer is the exit status (0, the
``SystemExit`` code, or 1 with the traceback on stderr for an uncaught exception, as a process
would end) and the captured stdout/stderr. The protocol goes over a private copy of the child's
stdout; fd 1 itself is pointed at fd 2, so that native code writing to stdout cannot corrupt it.
The child exits when its stdin is closed or the test process dies.

Use::

    with ToolServer(env=env, cwd=folder) as server:
        result = server.run("bert_cli.run_classifier", argv)  # a tools.ToolRun
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ToolServer:
    """The test side: starts the child at once (its imports overlap the caller's work)."""

    def __init__(self, env: Optional[dict] = None, cwd: Optional[str] = None):
        env = dict(os.environ if env is None else env)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
        # The child's own stderr (a crash, native logs) goes to an anonymous file, quoted when
        # it stops answering.
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.speed_tool_server"], env=env, cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)

    def run(self, module: str, argv: Sequence[str], timeout: float = 600):
        """``module.main`` (a ``bert_cli`` tool, by module name) on ``argv`` in the child;
        returns a ``tests.support.tools.ToolRun``."""
        from tests.support.tools import ToolRun

        result = self._ask({"module": module, "argv": list(argv)}, timeout)
        return ToolRun(result["code"], result["stdout"], result["stderr"])

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-3000:].decode("utf-8", "replace")

    def _ask(self, request: dict, timeout: float) -> dict:
        assert self.process.poll() is None, "the tool server exited (%s):\n%s" % (
            self.process.poll(), self._stderr_tail())
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = []
        reader = threading.Thread(target=lambda: answer.append(self.process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not answer or not answer[0]:
            self.close()
            raise AssertionError("the tool server gave no answer to %s:\n%s" % (
                request, self._stderr_tail()))
        return json.loads(answer[0])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> "ToolServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve() -> None:
    """The child side: one JSON request a line on stdin, one JSON answer a line back."""
    import importlib
    import traceback

    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else written to stdout goes to stderr
    sys.stdout = os.fdopen(1, "w", closefd=False)
    import tensorflow  # noqa: F401  (imported now, while the test does its own work)

    from tests.support.tools import run_tool

    for line in sys.stdin:
        request = json.loads(line)
        try:
            run = run_tool(importlib.import_module(request["module"]), request["argv"])
            code = run.code if isinstance(run.code, int) else (0 if run.code is None else 1)
            answer = {"code": code, "stdout": run.stdout, "stderr": run.stderr}
        except BaseException:  # an uncaught error: a process would exit 1 with its traceback
            answer = {"code": 1, "stdout": "", "stderr": traceback.format_exc()}
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


if __name__ == "__main__":
    _serve()
