"""The bad-input catalogue, input files: for every tool, its main input missing, a folder
instead of a file, empty, not valid UTF-8 (or not records), and malformed (a row with too few
fields, JSON cut short, a CoNLL line without a tag, records of another tool); a config that
does not parse, and a config of another shape than the checkpoint. Every case: exit 1, one
``<tool>: error:`` line naming the file (and the line where there is one), no traceback, nothing
new or changed in the run's folder (``tests/support/catalogue.check_case``).

Flag values, vocabs without special tokens and damaged checkpoints are in
``test_bad_inputs.py``.
"""

import json
import os
import shutil
from typing import List

import pytest

from bert_cli import (build_vocab, convert_checkpoint, create_pretraining_data,
                      extract_features, run_classifier, run_ner, run_pretraining, run_squad,
                      run_swag)
from tests import paths
from tests.support.catalogue import (SAMPLE_TEXT, TINY_CKPT, TINY_CONFIG, Case, build_work,
                                     check_case, classifier, convert, create, extract, ner,
                                     pretraining, squad, swag, with_flags)

# A line that is not UTF-8: Latin-1 "é" (0xE9) followed by ASCII.
_NOT_UTF8 = b"caf\xe9 au lait\n"


def _insert_line(src: str, dst: str, line: bytes, at: int = 1) -> str:
    """``src`` with ``line`` inserted as line ``at + 1``."""
    with open(src, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines.insert(at, line)
    with open(dst, "wb") as f:
        f.writelines(lines)
    return dst


def _folder_with(src_dir: str, dst_dir: str, name: str, content) -> str:
    """A copy of the data folder ``src_dir`` whose file ``name`` is replaced: ``None`` removes
    it, ``"folder"`` makes it a folder, bytes are its new content, a callable
    ``(src, dst) -> None`` writes it from the original."""
    shutil.copytree(src_dir, dst_dir)
    target = os.path.join(dst_dir, name)
    original = target + ".orig"
    os.rename(target, original)
    if content == "folder":
        os.makedirs(target)
    elif isinstance(content, bytes):
        with open(target, "wb") as f:
            f.write(content)
    elif content is not None:
        content(original, target)
    os.remove(original)
    return dst_dir


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bad_files_work"))
    w = build_work(root)

    def path(*names):
        return os.path.join(root, *names)

    w["missing"] = path("no_such_file.txt")
    os.makedirs(path("a_folder", "inside"))
    w["folder"] = path("a_folder")
    with open(path("zero_bytes.txt"), "wb"):
        pass
    w["zero_bytes"] = path("zero_bytes.txt")
    w["text_not_utf8"] = _insert_line(SAMPLE_TEXT, path("text_not_utf8.txt"), _NOT_UTF8)
    w["vocab_not_utf8"] = _insert_line(paths.GOLDEN_VOCAB, path("vocab_not_utf8.txt"),
                                       _NOT_UTF8, at=500)
    with open(path("not_records.tfrecord"), "wb") as f:
        f.write(b"these are not TFRecords, only a line of text\n" * 20)
    w["not_records"] = path("not_records.tfrecord")

    # Configs: cut short, not UTF-8, and narrower than the tiny checkpoint (hidden 64).
    with open(TINY_CONFIG, "rb") as f:
        config_bytes = f.read()
    with open(path("config_cut.json"), "wb") as f:
        f.write(config_bytes[:len(config_bytes) // 2])
    w["config_cut"] = path("config_cut.json")
    with open(path("config_not_utf8.json"), "wb") as f:
        f.write(config_bytes.replace(b'"hidden_act"', b'"hidden_act\xe9"', 1))
    w["config_not_utf8"] = path("config_not_utf8.json")
    other = json.loads(config_bytes)
    other.update(hidden_size=32, intermediate_size=64)
    with open(path("config_narrower.json"), "w", encoding="utf-8") as f:
        json.dump(other, f)
    w["config_narrower"] = path("config_narrower.json")

    # GLUE (MRPC): a folder without train.tsv or with a bad one; a file given as --data_dir.
    mrpc = w["mrpc"]
    for kind, content in (("missing", None), ("folder", "folder"), ("empty", b""),
                          ("not_utf8", lambda s, d: _insert_line(s, d, _NOT_UTF8)),
                          ("malformed", lambda s, d: _insert_line(s, d, b"1\tonly two\n", 3))):
        w["mrpc_" + kind] = _folder_with(mrpc, path("mrpc_" + kind), "train.tsv", content)
    w["mrpc_train"] = os.path.join(mrpc, "train.tsv")
    # SWAG
    swag = w["swag"]
    for kind, content in (("missing", None), ("folder", "folder"), ("empty", b""),
                          ("not_utf8", lambda s, d: _insert_line(s, d, _NOT_UTF8, 2)),
                          ("malformed", lambda s, d: _insert_line(s, d, b"0,lsmdc,too,few\n", 2))):
        w["swag_" + kind] = _folder_with(swag, path("swag_" + kind), "train.csv", content)
    # CoNLL
    conll = w["conll"]
    for kind, content in (("missing", None), ("folder", "folder"), ("empty", b""),
                          ("not_utf8", lambda s, d: _insert_line(s, d, b"caf\xe9 NN I-NP O\n", 3)),
                          ("malformed", lambda s, d: _insert_line(s, d, b"lonely\n", 3))):
        w["conll_" + kind] = _folder_with(conll, path("conll_" + kind), "train.txt", content)
    # SQuAD
    with open(w["squad_train"], "rb") as f:
        squad_bytes = f.read()
    with open(path("squad_cut.json"), "wb") as f:
        f.write(squad_bytes[:len(squad_bytes) // 2])
    w["squad_cut"] = path("squad_cut.json")
    with open(path("squad_not_utf8.json"), "wb") as f:
        f.write(squad_bytes.replace(b'"question": "', b'"question": "\xe9', 1))
    w["squad_not_utf8"] = path("squad_not_utf8.json")
    with open(path("squad_no_data.json"), "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "articles": []}, f)
    w["squad_no_data"] = path("squad_no_data.json")
    root_json = json.loads(squad_bytes)
    del root_json["data"][0]["paragraphs"][0]["qas"][0]["question"]
    with open(path("squad_no_question.json"), "w", encoding="utf-8") as f:
        json.dump(root_json, f)
    w["squad_no_question"] = path("squad_no_question.json")

    # Classifier records where pre-training records are expected.
    w["classifier_records"] = path("classifier_records.tfrecord")
    import tensorflow as tf

    with tf.io.TFRecordWriter(w["classifier_records"]) as writer:
        feature = {"input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 64)),
                   "label_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[0]))}
        for _ in range(16):
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                         .SerializeToString())
    return w


def _build_vocab(w, run, *extra):
    return ["--input_file=%s" % SAMPLE_TEXT, "--output_file=%s" % os.path.join(run, "vocab.txt"),
            "--vocab_size=300", "--show_progress=false", *extra]


def _config_cases(tool: str, module, builder, wider_needs=()) -> List[Case]:
    """A config cut short, a config that is not UTF-8, a config of another width than the
    checkpoint (the message names the checkpoint, a variable and both shapes), no config."""
    return [
        Case("%s-config_cut_short" % tool, module,
             with_flags(builder, "--bert_config_file={config_cut}"), ["{config_cut}"]),
        Case("%s-config_not_utf8" % tool, module,
             with_flags(builder, "--bert_config_file={config_not_utf8}"),
             ["{config_not_utf8}", "UTF-8"]),
        Case("%s-config_other_shape" % tool, module,
             with_flags(builder, "--bert_config_file={config_narrower}", *wider_needs),
             [TINY_CKPT, "has shape [64] in the checkpoint but the model expects [32]"]),
        Case("%s-config_missing" % tool, module,
             with_flags(builder, "--bert_config_file={missing}"), ["{missing}"]),
    ]


def _file_cases(tool: str, module, builder, flag: str, prefix: str = "",
                folder_style: bool = False, name: str = "") -> List[Case]:
    """The main input missing, a folder, empty, not UTF-8, malformed. ``folder_style``: the
    flag names a data folder (``work[prefix + kind]``) whose file ``name`` is the bad one."""
    cases = []
    for kind in ("missing", "folder", "empty", "not_utf8", "malformed"):
        if folder_style:
            argv = with_flags(builder, "--%s={%s%s}" % (flag, prefix, kind))
            # The folder and the file (a missing or folder file: the folder and its name).
            expect = (["{%s%s}" % (prefix, kind), name] if kind in ("missing", "folder")
                      else ["{%s%s}/%s" % (prefix, kind, name)])
        else:
            key = {"missing": "missing", "folder": "folder", "empty": "zero_bytes"}.get(
                kind, prefix + kind)
            argv = with_flags(builder, "--%s={%s}" % (flag, key))
            expect = ["{%s}" % key]
        if kind == "not_utf8":
            expect.append("UTF-8")
        cases.append(Case("%s-%s_%s" % (tool, flag, kind), module, argv, expect))
    return cases


CASES: List[Case] = []
# Folders of examples (GLUE, SWAG, CoNLL): the training file.
CASES += _file_cases("run_classifier", run_classifier, classifier, "data_dir", "mrpc_",
                     folder_style=True, name="train.tsv")
CASES += _file_cases("run_swag", run_swag, swag, "data_dir", "swag_", folder_style=True,
                     name="train.csv")
CASES += _file_cases("run_ner", run_ner, ner, "data_dir", "conll_", folder_style=True,
                     name="train.txt")
CASES += [
    Case("run_classifier-data_dir_is_a_file", run_classifier,
         with_flags(classifier, "--data_dir={mrpc_train}"), ["{mrpc_train}"]),
    Case("run_ner-data_dir_is_a_file", run_ner,
         with_flags(ner, "--data_dir={zero_bytes}"), ["{zero_bytes}"]),
]
# SQuAD JSON, training and predict files.
CASES += [
    Case("run_squad-train_file_missing", run_squad,
         with_flags(squad, "--train_file={missing}"), ["{missing}"]),
    Case("run_squad-train_file_folder", run_squad,
         with_flags(squad, "--train_file={folder}"), ["{folder}"]),
    Case("run_squad-train_file_empty", run_squad,
         with_flags(squad, "--train_file={zero_bytes}"), ["{zero_bytes}"]),
    Case("run_squad-train_file_not_utf8", run_squad,
         with_flags(squad, "--train_file={squad_not_utf8}"), ["{squad_not_utf8}", "UTF-8"]),
    Case("run_squad-train_file_cut_short", run_squad,
         with_flags(squad, "--train_file={squad_cut}"), ["{squad_cut}"]),
    Case("run_squad-train_file_no_data", run_squad,
         with_flags(squad, "--train_file={squad_no_data}"), ["{squad_no_data}", "data"]),
    Case("run_squad-train_file_question_missing", run_squad,
         with_flags(squad, "--train_file={squad_no_question}"),
         ["{squad_no_question}", "question"]),
    Case("run_squad-predict_file_cut_short", run_squad,
         with_flags(squad, "--predict_file={squad_cut}"), ["{squad_cut}"]),
]
# Text for create_pretraining_data, build_vocab and extract_features.
for tool, module, builder in (("create_pretraining_data", create_pretraining_data, create),
                              ("build_vocab", build_vocab, _build_vocab),
                              ("extract_features", extract_features, extract)):
    CASES += [
        Case("%s-input_file_missing" % tool, module,
             with_flags(builder, "--input_file={missing}"), ["{missing}"]),
        Case("%s-input_file_folder" % tool, module,
             with_flags(builder, "--input_file={folder}"), ["{folder}"]),
        Case("%s-input_file_empty" % tool, module,
             with_flags(builder, "--input_file={zero_bytes}"), ["{zero_bytes}"]),
        Case("%s-input_file_not_utf8" % tool, module,
             with_flags(builder, "--input_file={text_not_utf8}"),
             ["{text_not_utf8}", "2", "UTF-8"]),
    ]
# Pre-training records: none, a folder, empty, not records, records of another tool.
CASES += [
    Case("run_pretraining-input_file_missing", run_pretraining,
         with_flags(pretraining, "--input_file={missing}"), ["{missing}"]),
    Case("run_pretraining-input_file_folder", run_pretraining,
         with_flags(pretraining, "--input_file={folder}"), ["{folder}"]),
    Case("run_pretraining-input_file_empty", run_pretraining,
         with_flags(pretraining, "--input_file={zero_bytes}"), ["{zero_bytes}"]),
    Case("run_pretraining-input_file_not_records", run_pretraining,
         with_flags(pretraining, "--input_file={not_records}"), ["{not_records}"]),
    Case("run_pretraining-input_file_other_records", run_pretraining,
         with_flags(pretraining, "--input_file={classifier_records}"),
         ["{classifier_records}", "not a pre-training record"]),
]
# Vocabs: missing, a folder, empty, not UTF-8 (once per tool that reads one).
for tool, module, builder in (("create_pretraining_data", create_pretraining_data, create),
                              ("run_classifier", run_classifier, classifier),
                              ("run_swag", run_swag, swag), ("run_squad", run_squad, squad),
                              ("run_ner", run_ner, ner),
                              ("extract_features", extract_features, extract)):
    CASES += [
        Case("%s-vocab_missing" % tool, module, with_flags(builder, "--vocab_file={missing}"),
             ["{missing}"]),
        Case("%s-vocab_folder" % tool, module, with_flags(builder, "--vocab_file={folder}"),
             ["{folder}"]),
        Case("%s-vocab_empty" % tool, module, with_flags(builder, "--vocab_file={zero_bytes}"),
             ["{zero_bytes}"]),
        Case("%s-vocab_not_utf8" % tool, module,
             with_flags(builder, "--vocab_file={vocab_not_utf8}"),
             ["{vocab_not_utf8}", "501", "UTF-8"]),
    ]
# Configs and checkpoints of another shape.
for tool, module, builder in (("run_classifier", run_classifier, classifier),
                              ("run_swag", run_swag, swag), ("run_squad", run_squad, squad),
                              ("run_ner", run_ner, ner),
                              ("extract_features", extract_features, extract),
                              ("convert_checkpoint", convert_checkpoint, convert)):
    CASES += _config_cases(tool, module, builder)
CASES += _config_cases("run_pretraining", run_pretraining, pretraining,
                       wider_needs=("--init_checkpoint=%s" % TINY_CKPT,))
CASES += [
    Case("convert_checkpoint-input_missing", convert_checkpoint,
         with_flags(convert, "--input={missing}"), ["{missing}"]),
    Case("convert_checkpoint-input_not_a_checkpoint", convert_checkpoint,
         with_flags(convert, "--input={zero_bytes}"), ["{zero_bytes}"]),
    Case("run_classifier-init_checkpoint_missing", run_classifier,
         with_flags(classifier, "--init_checkpoint={missing}"), ["{missing}"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_file_is_one_line_and_nothing_written(case, work, tmp_path):
    check_case(case, work, str(tmp_path))


@pytest.mark.parametrize("existing_output_dir", [False, True])
def test_records_damaged_after_the_checked_one_leave_nothing(existing_output_dir, work,
                                                             tmp_path):
    """A record file whose first record passes the check but the next is cut short: the
    failure comes from the first training batch. One line naming the file; no event file,
    no folder left by the run (a new --output_dir is removed, an existing one is left as it
    was)."""
    from tests.support.catalogue import TRAJ_RECORDS
    from tests.support.tools import assert_one_error_line, run_tool, snapshot

    run = str(tmp_path / "run")
    os.makedirs(run)
    with open(TRAJ_RECORDS, "rb") as f:
        data = f.read()
    first = 16 + int.from_bytes(data[:8], "little")
    damaged = os.path.join(run, "damaged.tfrecord")
    with open(damaged, "wb") as f:
        f.write(data[:first + 20])
    if existing_output_dir:
        os.makedirs(os.path.join(run, "out"))
        with open(os.path.join(run, "out", "notes.txt"), "w") as f:
            f.write("mine")
    before = snapshot(run, folders=True), snapshot(run, stat=True)  # files untouched too
    result = run_tool(run_pretraining, with_flags(pretraining, "--input_file=%s" % damaged)(
        work, run))
    assert_one_error_line(result, run_pretraining.TOOL, damaged, "damaged TFRecord")
    assert (snapshot(run, folders=True), snapshot(run, stat=True)) == before
