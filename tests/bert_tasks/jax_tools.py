"""The SQuAD, SWAG (bf16) and NER tools, a classifier evaluated from the tf.data run's
checkpoint, a classifier resumed, and refused flags, run in one process under
KERAS_BACKEND=jax (tests/bert_tasks/test_jax_finetuning.py; one process saves the imports),
which the test starts without TensorFlow (tests/support/no_tensorflow): records written and
read with numpy.

``python -m tests.bert_tasks.jax_tools WORKDIR INIT_CHECKPOINT CLASSIFIER_DATA CLASSIFIER_CKPT``
builds small slices of the shared data in WORKDIR, runs each tool's ``main`` on fresh flags
(``run_tool``) from the tiny model's INIT_CHECKPOINT (a Hugging Face folder:
a TF1 checkpoint needs TensorFlow), each into ``WORKDIR/<name>``, evaluates CLASSIFIER_CKPT (the
``jax_checkpoints/<step>`` of the test's classifier run with TensorFlow installed, on the GLUE folder
CLASSIFIER_DATA) into ``WORKDIR/tf_data_eval``, trains that classifier again
(``CLASSIFIER_TRAINING``) into ``WORKDIR/resume`` and resumes it, and writes
``WORKDIR/runs.json``: name -> {code, stderr, step_programs}.

``python -m tests.bert_tasks.jax_tools --runs PLAN RESULTS`` runs the tool runs of the JSON file
PLAN (``[[name, module, argv], ...]``, in order) in one process and writes RESULTS: name ->
{code, stderr, step_programs}; ``run_in_one_process`` starts it from a test. Where a check needs a
fresh process only for its first run (a killed run resumed), the runs after it share the
process's imports instead of starting their own.

Each run (both modes) starts from a cleared Keras session (``keras.backend.clear_session``:
its variables and layers are named as in a fresh process; the dtype policy the last run left is
kept) and records ``step_programs``: how many programs of its training step
(``backends.jax.steps.make_train_step``) JAX lowered and compiled (1: every step ran the same one).

``compilation_cache_env`` (for the tests that start JAX processes): one persistent compilation
cache for all of them in a test session.

``processes`` starts a tool as several JAX processes joined on 127.0.0.1 (one CPU device each:
``one_device``); ``kill_one_then_rerun`` kills process 1 of two after their first checkpoint,
waits for process 0 to find out, then starts both again (run_pretraining, run_classifier).
"""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence

from tests import paths
from tests.support import tools
from tests.support.slices import conll_sentences, glue_slice, squad_slice

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
# The classifier's training in test_jax_finetuning.py, here too (one compiled step): 32 pairs,
# batch 4, 2 epochs (16 steps), a checkpoint every 2 steps.
CLASSIFIER_TRAINING = ["--train_batch_size=4", "--num_train_epochs=2", "--learning_rate=1e-3",
                       "--save_checkpoints_steps=2", "--iterations_per_loop=2"]
SQUAD = os.path.join(paths.GOLDEN, "squad", "v2.0_short")
SWAG = os.path.join(paths.DATA, "swag")
CONLL = os.path.join(paths.DATA, "conll2003")


def compilation_cache_env(tmp_path_factory) -> dict:
    """The environment variables that give a JAX process (KERAS_BACKEND=jax) this test
    session's persistent compilation cache: a program that one of the suite's JAX processes
    compiled (its train step, each eager op) is read back by the next that builds the same one,
    instead of compiled again (most of a small run's time on the CPU). The cache is looked up
    by a hash of the program's HLO, the compile options, flags and backend: a process gets the
    executable it would have compiled, so what a test checks is unchanged. One folder per
    session in pytest's temporary folder (both pytest-xdist workers' parent: shared), never
    reused by a later session.

    Args:
        tmp_path_factory: pytest's fixture.

    Returns:
        ``JAX_COMPILATION_CACHE_DIR`` and its settings, to add to the process's environment.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # popen-gwN/: the session's folder is its parent
        base = base.parent
    folder = base / "jax_compilation_cache"
    folder.mkdir(exist_ok=True)
    # Every program, eager ops included (the default keeps those over 1 s only). No size limit:
    # with one, each write would list and stat the whole folder (thousands of entries in a
    # session). An entry read while another process writes it fails to load: JAX warns and
    # compiles.
    return {"JAX_COMPILATION_CACHE_DIR": str(folder),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


class _CurrentStderr:
    """Writes to ``sys.stderr`` as it is at each write: the capture of the tool run in progress
    (``run_tool`` redirects it per run)."""

    def write(self, text):
        return sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()

    def close(self):
        """Nothing: the streams are not this object's (absl's handler closes its own at exit)."""


class _StepPrograms(logging.Filter):
    """Counts the programs of the training step (``backends.jax.steps.make_train_step``'s ``step``)
    that JAX lowers and compiles (or reads from the compilation cache): its logger's line per
    program, at DEBUG unless ``jax_log_compiles`` is set. Only what the logger let through
    before (WARNING and above) goes on."""

    LOGGER = "jax._src.interpreters.pxla"

    def __init__(self):
        super().__init__()
        self.count = 0

    def filter(self, record):
        if (isinstance(record.msg, str) and record.msg.startswith("Compiling %s")
                and record.args and record.args[0] == "jit(step)"):
            self.count += 1
        return record.levelno >= logging.WARNING


STEP_PROGRAMS = [0]  # the last run's (see the module docstring)


def run_tool(module, argv):
    """``tests.support.tools.run_tool`` from a cleared Keras session, with each run's log lines
    in its own stderr: the log handler that an earlier run in this process made (Python's, on
    the root logger) keeps the stream it was made with, that run's capture; it is pointed at
    the current one first. The programs of its training step are left in ``STEP_PROGRAMS``.
    """
    import keras

    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # noqa: E721 - not a FileHandler
            handler.setStream(_CurrentStderr())
    # Cleared: variables and layers named as in a fresh process. Keras' dtype policy is kept as
    # the last run left it (each tool sets its own: test_ner_on_jax checks it after SWAG's bf16).
    policy = keras.config.dtype_policy()
    keras.backend.clear_session(free_memory=False)
    keras.config.set_dtype_policy(policy)
    logger = logging.getLogger(_StepPrograms.LOGGER)
    level, programs = logger.level, _StepPrograms()
    logger.setLevel(logging.DEBUG)
    logger.addFilter(programs)
    try:
        return tools.run_tool(module, argv)
    finally:
        logger.removeFilter(programs)
        logger.setLevel(level)
        STEP_PROGRAMS[0] = programs.count


def run_plan(plan: Sequence[Sequence], results: str) -> None:
    """Runs ``plan``'s ``(name, module, argv)`` in order in this process (``run_tool``); writes
    name -> {code, stderr, step_programs} to ``results`` (JSON)."""
    import importlib

    from absl import flags as absl_flags
    from absl import logging as absl_logging

    # As absl.app.run sets up a tool's process (its log lines at INFO, through absl's handler
    # on the root logger), the handler writing to the capture of the run in progress.
    absl_flags.FLAGS.mark_as_parsed()
    absl_flags.FLAGS.verbosity = 0
    absl_logging.use_absl_handler()
    absl_logging.get_absl_handler().python_handler.setStream(_CurrentStderr())
    found = {}
    for name, module, argv in plan:
        run = run_tool(importlib.import_module(module), argv)
        found[name] = {"code": run.code, "stderr": run.stderr, "step_programs": STEP_PROGRAMS[0]}
    with open(results, "w", encoding="utf-8") as f:
        json.dump(found, f)


def run_in_one_process(plan: Sequence[Sequence], folder, env: dict, timeout: float = 600
                       ) -> Dict[str, dict]:
    """``plan`` (``[(name, module, argv), ...]``) run in one new process (``--runs``) with
    ``env``; its plan and results files are written in ``folder``.

    Returns:
        name -> {code, stderr, step_programs}.
    """
    plan_path, results = os.path.join(folder, "plan.json"), os.path.join(folder, "results.json")
    with open(plan_path, "w", encoding="utf-8") as f:
        json.dump([[name, module, [str(a) for a in argv]] for name, module, argv in plan], f)
    proc = subprocess.run([sys.executable, "-m", "tests.bert_tasks.jax_tools", "--runs",
                           plan_path, results], cwd=paths.ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(results, encoding="utf-8") as f:
        return json.load(f)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a JAX coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_device(env: dict) -> dict:
    """``env`` with one CPU device per JAX process."""
    return dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=1")


def processes(command: Callable[..., List[str]], port: int, count: int, env: dict, logs,
              *extra: str, ids=None) -> list:
    """``count`` processes of ``command(*cluster_flags, *extra)`` joined at
    127.0.0.1:``port`` (``ids``: only those process ids), stderr to ``logs``-<id>.log.

    Returns:
        ``[(Popen, log file), ...]``.
    """
    procs = []
    for index in (range(count) if ids is None else ids):
        log = open("%s-%d.log" % (logs, index), "w")
        procs.append((subprocess.Popen(
            command("--coordinator_address=127.0.0.1:%d" % port, "--num_processes=%d" % count,
                    "--process_id=%d" % index, *extra),
            cwd=paths.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log), log))
    return procs


def kill_one_then_rerun(command: Callable[..., List[str]], out, env: dict, folder,
                        checkpoint: str) -> dict:
    """Two processes of ``command`` (one CPU device each) writing ``out``: process 1 killed
    with SIGKILL once ``out/jax_checkpoints/<checkpoint>`` is complete, process 0 left to find
    out; then both started again.

    Returns:
        ``survivor``: (process 0's exit code, seconds it took to exit after the kill, its
        stderr); ``codes``: the rerun's exit codes; ``logs``: its two stderrs.
    """
    env = one_device(env)
    first = processes(command, free_port(), 2, env, os.path.join(folder, "first"))
    done = os.path.join(out, "jax_checkpoints", checkpoint, "commit_success.txt")
    deadline = time.monotonic() + 400
    while not os.path.exists(done) and time.monotonic() < deadline:
        for proc, _ in first:
            assert proc.poll() is None, open(os.path.join(folder, "first-0.log")).read()[-3000:]
        time.sleep(0.05)
    first[1][0].kill()
    killed = time.monotonic()
    try:
        code = first[0][0].wait(timeout=180)
    except subprocess.TimeoutExpired:
        first[0][0].kill()
        code = "still running after 180 s"
    seconds = time.monotonic() - killed
    for proc, log in first:
        proc.wait()
        log.close()
    again = processes(command, free_port(), 2, env, os.path.join(folder, "again"))
    codes = [proc.wait(timeout=400) for proc, _ in again]
    for _, log in again:
        log.close()
    read = lambda name: open(os.path.join(folder, name)).read()  # noqa: E731
    return {"survivor": (code, seconds, read("first-0.log")), "codes": codes,
            "logs": [read("again-%d.log" % i) for i in (0, 1)]}


def main(work: str, init_checkpoint: str, classifier_data: str, classifier_checkpoint: str
         ) -> None:
    from bert_cli import run_classifier, run_ner, run_squad, run_swag

    def _model(out, max_seq_length):
        return ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
                "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
                "--output_dir=%s" % out, "--max_seq_length=%d" % max_seq_length]

    def _common(out, max_seq_length):
        return _model(out, max_seq_length) + ["--init_checkpoint=%s" % init_checkpoint]

    runs, step_programs = {}, {}

    def run(name, module, argv):
        runs[name] = run_tool(module, argv)
        step_programs[name] = STEP_PROGRAMS[0]

    # The newest checkpoint of the classifier run with TensorFlow installed (its input read
    # with tf.data), evaluated without TensorFlow (no --init_checkpoint: the newest
    # checkpoint of --output_dir): the eval and test records written and read with numpy.
    # First: as in a process of its own, no other tool has run.
    evaluated = os.path.join(work, "tf_data_eval")
    os.makedirs(os.path.join(evaluated, "jax_checkpoints"))
    shutil.copytree(classifier_checkpoint, os.path.join(
        evaluated, "jax_checkpoints", os.path.basename(classifier_checkpoint)))
    run("tf_data_eval", run_classifier, _model(evaluated, 64) + [
        "--task_name=mrpc", "--data_dir=%s" % classifier_data, "--do_eval", "--do_predict"])

    train = squad_slice(os.path.join(SQUAD, "input_train_style_slice.json"),
                        os.path.join(work, "squad_train.json"), 16)
    dev = squad_slice(os.path.join(SQUAD, "input_dev_slice.json"),
                      os.path.join(work, "squad_dev.json"), 12)
    run("squad", run_squad, _common(os.path.join(work, "squad"), 64) + [
        "--doc_stride=24", "--max_query_length=16", "--predict_batch_size=64", "--do_train",
        "--do_predict", "--version_2_with_negative", "--train_file=%s" % train,
        "--predict_file=%s" % dev, "--train_batch_size=4", "--num_train_epochs=1",
        "--learning_rate=1e-4"])

    swag_dir = os.path.join(work, "swag_data")
    os.makedirs(swag_dir)
    with open(os.path.join(SWAG, "val.first91rows.csv"), encoding="utf-8") as f:
        rows = f.readlines()[:25]
    with open(os.path.join(swag_dir, "train.csv"), "w", encoding="utf-8") as f:
        f.writelines(rows)
    jsonl = os.path.join(SWAG, "hf-transformers-tests-sample.jsonl")
    # (Here and for NER, predicting in the eval's batches runs the eval's compiled forward.)
    run("swag", run_swag, _common(os.path.join(work, "swag"), 48) + [
        "--data_dir=%s" % swag_dir, "--eval_file=%s" % jsonl, "--predict_file=%s" % jsonl,
        "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
        "--num_train_epochs=1", "--eval_batch_size=4", "--predict_batch_size=4",
        "--mixed_precision=bf16"])

    conll = os.path.join(work, "conll")
    os.makedirs(conll)
    conll_sentences(os.path.join(CONLL, "train.txt"), os.path.join(conll, "train.txt"), 60)
    conll_sentences(os.path.join(CONLL, "valid.txt"), os.path.join(conll, "valid.txt"), 40)
    conll_sentences(os.path.join(CONLL, "train.txt"), os.path.join(conll, "test.txt"), 30)
    run("ner", run_ner, _common(os.path.join(work, "ner"), 64) + [
        "--data_dir=%s" % conll, "--do_train", "--do_eval", "--do_predict",
        "--train_batch_size=8", "--num_train_epochs=15", "--learning_rate=3e-4",
        "--eval_batch_size=16", "--predict_batch_size=16", "--iterations_per_loop=5"])

    mrpc = glue_slice(os.path.join(paths.DATA, "glue", "MRPC"), os.path.join(work, "mrpc"),
                      {"train": 8, "dev": 8})
    run("export_dir", run_classifier, _common(os.path.join(work, "refused"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_train",
        "--export_dir=%s" % os.path.join(work, "models")])

    # A TF1 checkpoint needs TensorFlow: one line, nothing written.
    run("tf1_checkpoint", run_classifier, _common(os.path.join(work, "tf1"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_train",
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt")])

    # Evaluating without training, from the Hugging Face folder (no step to read: 0).
    run("eval_only", run_classifier, _common(os.path.join(work, "eval_only"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_eval"])

    # Resume without TensorFlow (the numpy input re-read to the checkpoint's position): the
    # last checkpoint of a whole run set aside and removed, the run again resumes from the one
    # before it (dropout on). The test's classifier training (its data and flags: the step its
    # processes compiled, read from the compilation cache).
    from modeling.training.backends.jax import checkpoints

    resume = os.path.join(work, "resume")
    flags = _common(resume, 64) + ["--task_name=mrpc", "--data_dir=%s" % classifier_data,
                                   "--do_train"] + CLASSIFIER_TRAINING
    run("whole", run_classifier, flags)
    if runs["whole"].code == 0:
        shutil.copy(os.path.join(resume, "train_steps.jsonl"),
                    os.path.join(work, "whole-train_steps.jsonl"))
        last = checkpoints.checkpoints_in(resume)[-1][1]  # set aside as resume-whole/<step>
        os.makedirs(os.path.join(work, "resume-whole"))
        os.replace(last, os.path.join(work, "resume-whole", os.path.basename(last)))
        run("resumed", run_classifier, flags)

    with open(os.path.join(work, "runs.json"), "w", encoding="utf-8") as f:
        json.dump({name: {"code": done.code, "stderr": done.stderr[-50000:],
                          "step_programs": step_programs[name]}
                   for name, done in runs.items()}, f)


if __name__ == "__main__":
    if sys.argv[1] == "--runs":
        with open(sys.argv[2], encoding="utf-8") as f:
            run_plan(json.load(f), sys.argv[3])
    else:
        main(*sys.argv[1:5])
