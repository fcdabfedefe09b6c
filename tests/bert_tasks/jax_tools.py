"""The SQuAD, SWAG (bf16) and NER tools, a classifier evaluated from the tf.data run's
checkpoint, a classifier resumed, and refused flags, run in one process under
KERAS_BACKEND=jax (tests/bert_tasks/test_jax_finetuning.py; one process saves the imports),
which the test starts without TensorFlow (tests/support/no_tensorflow): records written and
read with numpy.

``python -m tests.bert_tasks.jax_tools WORKDIR INIT_CHECKPOINT CLASSIFIER_DATA CLASSIFIER_CKPT``
builds small slices of the shared data in WORKDIR, runs each tool's ``main`` on fresh flags
(``run_tool``) from the tiny model's INIT_CHECKPOINT (a Hugging Face folder:
a TF1 checkpoint needs TensorFlow), each into ``WORKDIR/<name>``, evaluates CLASSIFIER_CKPT (the
``jax-ckpt-<step>.npz`` of the test's classifier run with TensorFlow installed, on the GLUE folder
CLASSIFIER_DATA) into ``WORKDIR/tf_data_eval``, and writes ``WORKDIR/runs.json``: name ->
{code, stderr}.

``compilation_cache_env`` (for the tests that start JAX processes): one persistent compilation
cache for all of them in a test session.
"""

import json
import logging
import os
import shutil
import sys

from tests import paths
from tests.support import tools
from tests.support.slices import conll_sentences, glue_slice, squad_slice

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
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


def run_tool(module, argv):
    """``tests.support.tools.run_tool``, with each run's log lines in its own stderr: the log
    handler that an earlier run in this process made (Python's, on the root logger) keeps the
    stream it was made with, that run's capture; it is pointed at the current one first."""
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # noqa: E721 - not a FileHandler
            handler.setStream(_CurrentStderr())
    return tools.run_tool(module, argv)


def main(work: str, init_checkpoint: str, classifier_data: str, classifier_checkpoint: str
         ) -> None:
    from bert_cli import run_classifier, run_ner, run_squad, run_swag

    def _model(out, max_seq_length):
        return ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
                "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
                "--output_dir=%s" % out, "--max_seq_length=%d" % max_seq_length]

    def _common(out, max_seq_length):
        return _model(out, max_seq_length) + ["--init_checkpoint=%s" % init_checkpoint]

    runs = {}
    # The newest checkpoint of the classifier run with TensorFlow installed (its input read
    # with tf.data), evaluated without TensorFlow (no --init_checkpoint: the newest
    # jax-ckpt-<step>.npz of --output_dir): the eval and test records written and read with
    # numpy. First: as in a process of its own, no other tool has run.
    evaluated = os.path.join(work, "tf_data_eval")
    os.makedirs(evaluated)
    shutil.copy(classifier_checkpoint, evaluated)
    runs["tf_data_eval"] = run_tool(run_classifier, _model(evaluated, 64) + [
        "--task_name=mrpc", "--data_dir=%s" % classifier_data, "--do_eval", "--do_predict"])

    train = squad_slice(os.path.join(SQUAD, "input_train_style_slice.json"),
                        os.path.join(work, "squad_train.json"), 16)
    dev = squad_slice(os.path.join(SQUAD, "input_dev_slice.json"),
                      os.path.join(work, "squad_dev.json"), 12)
    runs["squad"] = run_tool(run_squad, _common(os.path.join(work, "squad"), 64) + [
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
    runs["swag"] = run_tool(run_swag, _common(os.path.join(work, "swag"), 48) + [
        "--data_dir=%s" % swag_dir, "--eval_file=%s" % jsonl, "--predict_file=%s" % jsonl,
        "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
        "--num_train_epochs=1", "--eval_batch_size=4", "--mixed_precision=bf16"])

    conll = os.path.join(work, "conll")
    os.makedirs(conll)
    conll_sentences(os.path.join(CONLL, "train.txt"), os.path.join(conll, "train.txt"), 60)
    conll_sentences(os.path.join(CONLL, "valid.txt"), os.path.join(conll, "valid.txt"), 40)
    conll_sentences(os.path.join(CONLL, "train.txt"), os.path.join(conll, "test.txt"), 30)
    runs["ner"] = run_tool(run_ner, _common(os.path.join(work, "ner"), 64) + [
        "--data_dir=%s" % conll, "--do_train", "--do_eval", "--do_predict",
        "--train_batch_size=8", "--num_train_epochs=15", "--learning_rate=3e-4",
        "--eval_batch_size=16", "--iterations_per_loop=5"])

    mrpc = glue_slice(os.path.join(paths.DATA, "glue", "MRPC"), os.path.join(work, "mrpc"),
                      {"train": 8, "dev": 8})
    runs["export_dir"] = run_tool(run_classifier, _common(os.path.join(work, "refused"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_train",
        "--export_dir=%s" % os.path.join(work, "models")])

    # A TF1 checkpoint needs TensorFlow: one line, nothing written.
    runs["tf1_checkpoint"] = run_tool(run_classifier, _common(os.path.join(work, "tf1"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_train",
        "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt")])

    # Evaluating without training, from the Hugging Face folder (no step to read: 0).
    runs["eval_only"] = run_tool(run_classifier, _common(os.path.join(work, "eval_only"), 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc, "--do_eval"])

    # Resume without TensorFlow (the numpy input re-read to the checkpoint's position): the
    # last checkpoint of a whole run set aside and removed, the run again resumes from the one
    # before it (dropout on).
    mrpc16 = glue_slice(os.path.join(paths.DATA, "glue", "MRPC"), os.path.join(work, "mrpc16"),
                        {"train": 16})
    resume = os.path.join(work, "resume")
    flags = _common(resume, 64) + [
        "--task_name=mrpc", "--data_dir=%s" % mrpc16, "--do_train", "--train_batch_size=4",
        "--num_train_epochs=2", "--save_checkpoints_steps=4", "--iterations_per_loop=2",
        "--learning_rate=1e-3"]
    runs["whole"] = run_tool(run_classifier, flags)
    if runs["whole"].code == 0:
        shutil.copy(os.path.join(resume, "train_steps.jsonl"),
                    os.path.join(work, "whole-train_steps.jsonl"))
        os.replace(os.path.join(resume, "jax-ckpt-8.npz"),
                   os.path.join(work, "whole-jax-ckpt-8.npz"))
        runs["resumed"] = run_tool(run_classifier, flags)

    with open(os.path.join(work, "runs.json"), "w", encoding="utf-8") as f:
        json.dump({name: {"code": run.code, "stderr": run.stderr[-50000:]}
                   for name, run in runs.items()}, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
