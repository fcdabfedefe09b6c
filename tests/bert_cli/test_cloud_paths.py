"""Every tool with every path on a TensorFlow filesystem (no local disk): create_pretraining_data
-> run_pretraining -> run_classifier -> run_squad -> extract_features -> convert_checkpoint.

Here on ``ram://`` (TensorFlow's in-process filesystem, so the tools run in this process); the
same pipeline on ``gs://`` against a loopback GCS emulator, with a kill -9 and resume, is
``test_gcs_pipeline.py``. Each output must exist under the URL and nothing may appear in a local
folder named after the scheme (``os.path.abspath("ram://x")`` is ``<cwd>/ram:/x``).
"""

from __future__ import annotations

import json
import os
from typing import List, Sequence, Tuple

import pytest

from bert_cli import (convert_checkpoint, create_pretraining_data, extract_features,
                      run_classifier, run_pretraining, run_squad)
from bert_common import atomic, files
from tests import paths
from tests.support import tools

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
MRPC = os.path.join(paths.DATA, "glue", "MRPC")
SQUAD_DEV = os.path.join(paths.GOLDEN, "squad", "v1.1_short", "input_dev_slice.json")
SAMPLE = os.path.join(paths.GOLDEN, "inputs", "sample_text.txt")
SEQ, PREDS = 64, 10


def run_tool(module, argv: Sequence[str]) -> Tuple[int, str]:
    """``module.main`` in this process on fresh flags; returns (exit status, stderr)."""
    run = tools.run_tool(module, argv)
    return run.code, run.stderr


def _copy_in(local: str, url: str) -> str:
    files.makedirs(os.path.dirname(url))
    files.copy(local, url)
    return url


def _head_lines(local: str, url: str, n: int) -> str:
    with open(local, encoding="utf-8") as f:
        head = [next(f) for _ in range(n)]
    files.makedirs(os.path.dirname(url))
    with atomic.atomic_open(url) as f:
        f.writelines(head)
    return url


def stage_inputs(root: str) -> dict:
    """The inputs of the pipeline, copied under ``root``."""
    model = root + "/model"
    for suffix in (".index", ".data-00000-of-00001"):
        _copy_in(os.path.join(TINY, "bert_model.ckpt" + suffix), model + "/bert_model.ckpt" + suffix)
    squad = json.load(open(SQUAD_DEV, encoding="utf-8"))
    squad["data"] = squad["data"][:1]
    files.makedirs(root + "/squad")
    with atomic.atomic_open(root + "/squad/dev.json") as f:
        json.dump(squad, f)
    for split, n in (("train", 17), ("dev", 9), ("test", 9)):
        _head_lines(os.path.join(MRPC, split + ".tsv"), "%s/mrpc/%s.tsv" % (root, split), n)
    with atomic.atomic_open(_copy_in(SAMPLE, root + "/in/corpus.txt") + ".pairs") as f:
        f.write("The cat sat on the mat. ||| It was warm.\nA second line.\n")
    return {"config": _copy_in(os.path.join(TINY, "bert_config.json"), model + "/bert_config.json"),
            "vocab": _copy_in(paths.GOLDEN_VOCAB, model + "/vocab.txt"),
            "ckpt": model + "/bert_model.ckpt", "corpus": root + "/in/corpus.txt",
            "sentences": root + "/in/corpus.txt.pairs", "mrpc": root + "/mrpc",
            "squad": root + "/squad/dev.json"}


def pretraining_flags(root: str, inputs: dict, steps: int) -> List[str]:
    return ["--input_file=%s/records/*.tfrecord" % root, "--output_dir=%s/pretrain" % root,
            "--bert_config_file=%s" % inputs["config"], "--init_checkpoint=%s" % inputs["ckpt"],
            "--do_train", "--do_eval", "--train_batch_size=4", "--eval_batch_size=4",
            "--num_train_steps=%d" % steps, "--num_warmup_steps=1", "--save_checkpoints_steps=2",
            "--iterations_per_loop=2", "--max_eval_steps=2", "--max_seq_length=%d" % SEQ,
            "--max_predictions_per_seq=%d" % PREDS]


def run_pipeline(root: str, inputs: dict, run=run_tool, pretrain=None,
                 pretrain_steps: int = 4) -> None:
    """The tools in order on ``root``: ``run(module, argv) -> (exit status, stderr)`` runs one
    (default: in this process), ``pretrain(argv)`` run_pretraining (default: ``run``). Asserts
    every output is in place."""
    def ok(module, argv):
        code, err = run(module, argv)
        assert code == 0, "%s: %s" % (module.TOOL, err[-3000:])

    ok(create_pretraining_data, [
        "--input_file=%s" % inputs["corpus"], "--output_file=%s/records/pt.tfrecord" % root,
        "--vocab_file=%s" % inputs["vocab"], "--max_seq_length=%d" % SEQ,
        "--max_predictions_per_seq=%d" % PREDS, "--dupe_factor=1", "--show_progress=false"])
    argv = pretraining_flags(root, inputs, pretrain_steps)
    if pretrain is None:
        ok(run_pretraining, argv)
    else:
        pretrain(argv)
    export = root + "/pretrain/export"
    common = ["--vocab_file=%s" % inputs["vocab"], "--bert_config_file=%s/bert_config.json" % export,
              "--init_checkpoint=%s/bert_model.ckpt" % export, "--max_seq_length=%d" % SEQ]
    ok(run_classifier, common + [
        "--task_name=mrpc", "--data_dir=%s" % inputs["mrpc"], "--output_dir=%s/mrpc" % root,
        "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
        "--num_train_epochs=1", "--save_checkpoints_steps=1", "--keep_checkpoint_max=1",
        "--export_dir=%s/models/mrpc" % root])  # TF Serving's base path: writes version 1
    ok(run_squad, common + [
        "--do_predict", "--predict_file=%s" % inputs["squad"], "--output_dir=%s/squad_out" % root,
        "--doc_stride=24", "--max_query_length=16"])
    ok(extract_features, [
        "--input_file=%s" % inputs["sentences"], "--output_file=%s/features.jsonl" % root,
        "--vocab_file=%s" % inputs["vocab"], "--bert_config_file=%s/bert_config.json" % export,
        "--init_checkpoint=%s/bert_model.ckpt" % export, "--max_seq_length=%d" % SEQ,
        "--layers=-1"])
    ok(convert_checkpoint, ["--input=%s/bert_model.ckpt" % export,
                            "--bert_config_file=%s/bert_config.json" % export,
                            "--output=%s/converted/model.keras" % root])

    expected = [
        "records/pt.tfrecord", "pretrain/ckpt-%d.index" % pretrain_steps,
        "pretrain/eval_results.txt",
        "pretrain/train_steps.jsonl", "pretrain/export/bert_model.ckpt.index",
        "pretrain/export/bert_config.json", "mrpc/train.tf_record", "mrpc/eval_results.txt",
        "mrpc/test_results.tsv", "mrpc/MRPC.tsv", "models/mrpc/1/saved_model.pb",
        "squad_out/predictions.json", "squad_out/nbest_predictions.json", "features.jsonl",
        "converted/model.keras"]
    missing = [name for name in expected if not files.exists(root + "/" + name)]
    assert not missing, missing
    assert files.glob(root + "/pretrain/train/events.out.tfevents.*")  # TensorBoard
    for logs in ("pretrain/eval", "mrpc/train", "mrpc/eval"):  # loss, lr, eval metrics
        assert files.glob("%s/%s/events.out.tfevents.*" % (root, logs)), logs
    # --keep_checkpoint_max=1: only the last of the 2 fine-tuning checkpoints is kept.
    assert [n for n in files.listdir(root + "/mrpc") if n.endswith(".index")] == [
        "model.ckpt-2.index"]
    with files.open(root + "/features.jsonl") as f:
        assert len(f.read().splitlines()) == 2
    # No temporary left behind anywhere.
    leftovers = [folder + "/" + name for folder, dirs, names in _walk(root)
                 for name in names + dirs if name.startswith(".") and name.endswith(".tmp")]
    assert not leftovers, leftovers


def _walk(root: str):
    import tensorflow as tf

    return tf.io.gfile.walk(root)


@pytest.fixture
def in_tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_whole_pipeline_on_ram_paths(in_tmp_cwd):
    root = "ram://pipeline-%s" % in_tmp_cwd.name
    run_pipeline(root, stage_inputs(root))
    assert os.listdir(in_tmp_cwd) == []  # nothing under ./ram:
