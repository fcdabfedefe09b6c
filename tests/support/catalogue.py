"""The bad-input catalogue's shared pieces (``tests/bert_cli/test_bad_inputs.py`` for flag
values, vocabs and checkpoints, ``test_bad_files.py`` for input files): the inputs every case
reads, one argv builder per tool on the tiny model, and ``check_case``, the one assertion of
every case: exit status 1, exactly one ``<tool>: error:`` line holding the expected parts, no
traceback, and the run's folder as it was (no new or changed file but what the case allows)."""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Callable, List, NamedTuple, Optional, Sequence

from tests import paths
from tests.support.slices import conll_sentences, glue_slice, head_lines, squad_slice
from tests.support.tools import assert_one_error_line, run_tool, snapshot

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
TINY_CONFIG = os.path.join(TINY, "bert_config.json")
TINY_CKPT = os.path.join(TINY, "bert_model.ckpt")
TRAJ = os.path.join(paths.GOLDEN, "pretraining_trajectory")
TRAJ_RECORDS = os.path.join(TRAJ, "seq64_seed12345_dupe1.tfrecord")
SAMPLE_TEXT = os.path.join(paths.GOLDEN, "inputs", "sample_text.txt")


# ------------------------------------------------------------------------------ shared inputs


def _vocab_without(src: str, dst: str, token: str) -> str:
    with open(src, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() != token]
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return dst


def _writable_copy(src_dir: str, dst_dir: str) -> str:
    shutil.copytree(src_dir, dst_dir)
    os.chmod(dst_dir, 0o755)
    for name in os.listdir(dst_dir):
        os.chmod(os.path.join(dst_dir, name), 0o644)
    return dst_dir


def _truncate_half(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def build_work(root: str) -> dict:
    """The inputs every case reads (never written by a case), under ``root``: data slices,
    broken vocabs, an empty folder, a truncated checkpoint, damaged record files."""
    w = {"root": root}

    def path(*names):
        return os.path.join(root, *names)

    w["mrpc"] = glue_slice(os.path.join(paths.DATA, "glue", "MRPC"), path("mrpc"),
                           {"train": 16, "dev": 8, "test": 8})
    os.makedirs(path("swag"))
    swag = os.path.join(paths.DATA, "swag", "val.first91rows.csv")
    head_lines(swag, path("swag", "train.csv"), 9)
    head_lines(swag, path("swag", "val.csv"), 5)
    w["swag"] = path("swag")
    squad = os.path.join(paths.GOLDEN, "squad", "v1.1_short")
    w["squad_train"] = squad_slice(os.path.join(squad, "input_train_style_slice.json"),
                                   path("squad_train.json"), 4)
    w["squad_dev"] = squad_slice(os.path.join(squad, "input_dev_slice.json"),
                                 path("squad_dev.json"), 4)
    os.makedirs(path("conll"))
    conll = os.path.join(paths.DATA, "conll2003")
    conll_sentences(os.path.join(conll, "train.txt"), path("conll", "train.txt"), 12)
    conll_sentences(os.path.join(conll, "valid.txt"), path("conll", "valid.txt"), 6)
    w["conll"] = path("conll")
    with open(path("sentences.txt"), "w", encoding="utf-8") as f:
        f.write("Hello world.\nThe cat sat ||| on the mat.\n")
    w["sentences"] = path("sentences.txt")

    for token in ("[CLS]", "[SEP]", "[UNK]", "[MASK]"):
        w["vocab_no_" + token.strip("[]").lower()] = _vocab_without(
            paths.GOLDEN_VOCAB, path("vocab_without_%s.txt" % token.strip("[]")), token)
    os.makedirs(path("empty_folder"))
    w["empty"] = path("empty_folder")
    _writable_copy(TINY, path("truncated_ckpt"))
    _truncate_half(path("truncated_ckpt", "bert_model.ckpt.data-00000-of-00001"))
    w["truncated_ckpt"] = path("truncated_ckpt", "bert_model.ckpt")

    with open(TRAJ_RECORDS, "rb") as f:
        records = f.read()
    with open(path("truncated.tfrecord"), "wb") as f:
        f.write(records[:len(records) // 2])
    flipped = bytearray(records)
    middle = len(flipped) // 2
    flipped[middle:middle + 64] = bytes(b ^ 0xFF for b in flipped[middle:middle + 64])
    with open(path("flipped.tfrecord"), "wb") as f:
        f.write(bytes(flipped))
    w["truncated_records"] = path("truncated.tfrecord")
    w["flipped_records"] = path("flipped.tfrecord")

    # A config of another model (bert_config.json beside a convert output).
    with open(TINY_CONFIG, encoding="utf-8") as f:
        other = json.load(f)
    other.update(hidden_size=32, intermediate_size=64)
    w["other_config_text"] = json.dumps(other, indent=2)
    return w


# ---------------------------------------------------------------------------------- the runs


class Case(NamedTuple):
    id: str
    module: object
    argv: Callable[[dict, str], List[str]]  # (work, run folder) -> argv
    expect: Sequence[str]  # substrings of the error line (format keys of work / "run")
    setup: Optional[Callable[[dict, str], None]] = None  # files already in the run folder
    allowed_new: str = r"^$"  # new files that may appear (regex on the relative path)


def pretraining(w, run, *extra):
    return ["--bert_config_file=%s" % os.path.join(TRAJ, "init", "bert_config.json"),
            "--input_file=%s" % TRAJ_RECORDS, "--output_dir=%s" % os.path.join(run, "out"),
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--train_batch_size=8",
            "--eval_batch_size=8", "--max_eval_steps=1", "--num_train_steps=2",
            "--num_warmup_steps=1", "--learning_rate=1e-3", "--do_train", *extra]


def classifier(w, run, *extra):
    return ["--task_name=mrpc", "--data_dir=%s" % w["mrpc"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=8", "--num_train_epochs=1", *extra]


def swag(w, run, *extra):
    return ["--data_dir=%s" % w["swag"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=4", "--num_train_epochs=1", *extra]


def squad(w, run, *extra):
    return ["--train_file=%s" % w["squad_train"], "--predict_file=%s" % w["squad_dev"],
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--bert_config_file=%s" % TINY_CONFIG,
            "--output_dir=%s" % os.path.join(run, "out"), "--init_checkpoint=%s" % TINY_CKPT,
            "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16", "--do_train",
            "--do_predict", "--train_batch_size=4", "--num_train_epochs=1", *extra]


def ner(w, run, *extra):
    return ["--data_dir=%s" % w["conll"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=8", "--num_train_epochs=1", *extra]


def extract(w, run, *extra):
    return ["--input_file=%s" % w["sentences"],
            "--output_file=%s" % os.path.join(run, "features.jsonl"),
            "--bert_config_file=%s" % TINY_CONFIG, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--init_checkpoint=%s" % TINY_CKPT, "--layers=-1", "--max_seq_length=32", *extra]


def create(w, run, *extra):
    return ["--input_file=%s" % SAMPLE_TEXT, "--output_file=%s" % os.path.join(run, "out.tfrecord"),
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--max_seq_length=32",
            "--max_predictions_per_seq=5", "--dupe_factor=1", "--show_progress=false", *extra]


def convert(w, run, *extra):
    return ["--input=%s" % TINY_CKPT, "--output=%s" % os.path.join(run, "bert_model.ckpt"),
            "--bert_config_file=%s" % TINY_CONFIG, *extra]


def with_flags(builder, *extra):
    return lambda w, run: builder(w, run, *[e.format(**w, run=run) for e in extra])


def write_file(name, text_key=None, text=None):
    def setup(w, run):
        with open(os.path.join(run, name), "w", encoding="utf-8") as f:
            f.write(w[text_key] if text_key else text)
    return setup


def check_case(case: Case, work: dict, run: str) -> None:
    """Runs ``case`` in the folder ``run`` and asserts the catalogue's contract."""
    if case.setup:
        case.setup(work, run)
    before = snapshot(run)
    result = run_tool(case.module, case.argv(work, run))
    after = snapshot(run)

    assert_one_error_line(result, case.module.TOOL,
                          *[expected.format(**work, run=run) for expected in case.expect])
    changed = {name for name in before if after.get(name) != before[name]}
    assert not changed, changed  # nothing overwritten or removed
    new = {name for name in after if name not in before}
    assert all(re.match(case.allowed_new, name) for name in new), new
    assert not any(name.endswith(".index") or name.startswith("out/ckpt") for name in new)
