"""The SQuAD, SWAG (bf16) and NER tools, a classifier resumed, and a refused flag, run in one
process under
KERAS_BACKEND=jax (tests/bert_tasks/test_jax_finetuning.py; one process saves the imports),
which the test starts without TensorFlow (tests/support/no_tensorflow): records written and
read with numpy.

``python -m tests.bert_tasks.jax_tools WORKDIR INIT_CHECKPOINT`` builds small slices of the
shared data in WORKDIR, runs each tool's ``main`` on fresh flags
(``tests.support.tools.run_tool``) from the tiny model's INIT_CHECKPOINT (a Hugging Face folder:
a TF1 checkpoint needs TensorFlow), each into ``WORKDIR/<name>``, and writes
``WORKDIR/runs.json``: name -> {code, stderr}.
"""

import json
import os
import shutil
import sys

from tests import paths
from tests.support.slices import conll_sentences, glue_slice, squad_slice
from tests.support.tools import run_tool

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
SQUAD = os.path.join(paths.GOLDEN, "squad", "v2.0_short")
SWAG = os.path.join(paths.DATA, "swag")
CONLL = os.path.join(paths.DATA, "conll2003")


def main(work: str, init_checkpoint: str) -> None:
    from bert_cli import run_classifier, run_ner, run_squad, run_swag

    def _common(out, max_seq_length):
        return ["--vocab_file=%s" % paths.GOLDEN_VOCAB,
                "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
                "--init_checkpoint=%s" % init_checkpoint,
                "--output_dir=%s" % out, "--max_seq_length=%d" % max_seq_length]

    runs = {}
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
        json.dump({name: {"code": run.code, "stderr": run.stderr[-6000:]}
                   for name, run in runs.items()}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
