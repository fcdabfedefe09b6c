"""A catalogue of bad input, tool by tool: every case exits with status 1, prints exactly one
``<tool>: error: <message>`` line naming the flag (and its value) or the file, no traceback, and
leaves the run's folder as it was (no new or changed file: listed before and after).

Flags that cannot work (NaN or out-of-range learning rate, epochs, warmup, batch sizes, step
counts, sequence lengths, create_pretraining_data's probabilities) fail before any work; so do
a vocab without the special tokens a tool needs, an empty or truncated checkpoint, and a
convert_checkpoint output that would be misnamed or overwrite another model's files. A record
file damaged part-way is only found when the reader gets there: one line naming it, and no
checkpoint. A config without a key that has a class default is read with the original's
default, and a warning names the file and the keys.

Every case runs ``main`` in this process on fresh flags, on the tiny model and a few examples.
"""

import hashlib
import json
import logging
import os
import re
import shutil
from typing import Callable, List, NamedTuple, Optional, Sequence

import pytest

from bert_cli import (convert_checkpoint, create_pretraining_data, extract_features,
                      run_classifier, run_ner, run_pretraining, run_squad, run_swag)
from tests import paths
from tests.support.tools import run_tool

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


def _head_lines(src: str, dst: str, count: int) -> str:
    with open(src, encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return dst


def _first_sentences(src: str, dst: str, count: int) -> str:
    out, seen = [], 0
    with open(src, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip():
                seen += 1
                if seen >= count:
                    break
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(out)
    return dst


def _squad_slice(src: str, dst: str, num_questions: int) -> str:
    with open(src, encoding="utf-8") as f:
        root = json.load(f)
    left = num_questions
    for article in root["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = paragraph["qas"][:max(left, 0)]
            left -= len(paragraph["qas"])
        article["paragraphs"] = [p for p in article["paragraphs"] if p["qas"]]
    root["data"] = [a for a in root["data"] if a["paragraphs"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(root, f)
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


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The inputs every case reads (never written by a case): data slices, broken vocabs,
    an empty folder, a truncated checkpoint, damaged record files."""
    root = str(tmp_path_factory.mktemp("bad_inputs_work"))
    w = {"root": root}

    def path(*names):
        return os.path.join(root, *names)

    os.makedirs(path("mrpc"))
    for split, n in (("train", 16), ("dev", 8), ("test", 8)):
        _head_lines(os.path.join(paths.DATA, "glue", "MRPC", split + ".tsv"),
                    path("mrpc", split + ".tsv"), n + 1)
    w["mrpc"] = path("mrpc")
    os.makedirs(path("swag"))
    _head_lines(os.path.join(paths.DATA, "swag", "val.first91rows.csv"),
                path("swag", "train.csv"), 9)
    _head_lines(os.path.join(paths.DATA, "swag", "val.first91rows.csv"),
                path("swag", "val.csv"), 5)
    w["swag"] = path("swag")
    squad = os.path.join(paths.GOLDEN, "squad", "v1.1_short")
    w["squad_train"] = _squad_slice(os.path.join(squad, "input_train_style_slice.json"),
                                    path("squad_train.json"), 4)
    w["squad_dev"] = _squad_slice(os.path.join(squad, "input_dev_slice.json"),
                                  path("squad_dev.json"), 4)
    os.makedirs(path("conll"))
    conll = os.path.join(paths.DATA, "conll2003")
    _first_sentences(os.path.join(conll, "train.txt"), path("conll", "train.txt"), 12)
    _first_sentences(os.path.join(conll, "valid.txt"), path("conll", "valid.txt"), 6)
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


def _snapshot(folder: str) -> dict:
    """Relative path -> sha256 of every file under ``folder``."""
    out = {}
    for base, _, names in os.walk(folder):
        for name in names:
            full = os.path.join(base, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


class Case(NamedTuple):
    id: str
    module: object
    argv: Callable[[dict, str], List[str]]  # (work, run folder) -> argv
    expect: Sequence[str]  # substrings of the error line (format keys of work / "run")
    setup: Optional[Callable[[dict, str], None]] = None  # files already in the run folder
    allowed_new: str = r"^$"  # new files that may appear (regex on the relative path)


def _pretraining(w, run, *extra):
    return ["--bert_config_file=%s" % os.path.join(TRAJ, "init", "bert_config.json"),
            "--input_file=%s" % TRAJ_RECORDS, "--output_dir=%s" % os.path.join(run, "out"),
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--train_batch_size=8",
            "--eval_batch_size=8", "--max_eval_steps=1", "--num_train_steps=2",
            "--num_warmup_steps=1", "--learning_rate=1e-3", "--do_train", *extra]


def _classifier(w, run, *extra):
    return ["--task_name=mrpc", "--data_dir=%s" % w["mrpc"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=8", "--num_train_epochs=1", *extra]


def _swag(w, run, *extra):
    return ["--data_dir=%s" % w["swag"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=4", "--num_train_epochs=1", *extra]


def _squad(w, run, *extra):
    return ["--train_file=%s" % w["squad_train"], "--predict_file=%s" % w["squad_dev"],
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--bert_config_file=%s" % TINY_CONFIG,
            "--output_dir=%s" % os.path.join(run, "out"), "--init_checkpoint=%s" % TINY_CKPT,
            "--max_seq_length=64", "--doc_stride=24", "--max_query_length=16", "--do_train",
            "--do_predict", "--train_batch_size=4", "--num_train_epochs=1", *extra]


def _ner(w, run, *extra):
    return ["--data_dir=%s" % w["conll"], "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--bert_config_file=%s" % TINY_CONFIG, "--output_dir=%s" % os.path.join(run, "out"),
            "--init_checkpoint=%s" % TINY_CKPT, "--max_seq_length=32", "--do_train", "--do_eval",
            "--train_batch_size=8", "--num_train_epochs=1", *extra]


def _extract(w, run, *extra):
    return ["--input_file=%s" % w["sentences"],
            "--output_file=%s" % os.path.join(run, "features.jsonl"),
            "--bert_config_file=%s" % TINY_CONFIG, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--init_checkpoint=%s" % TINY_CKPT, "--layers=-1", "--max_seq_length=32", *extra]


def _create(w, run, *extra):
    return ["--input_file=%s" % SAMPLE_TEXT, "--output_file=%s" % os.path.join(run, "out.tfrecord"),
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--max_seq_length=32",
            "--max_predictions_per_seq=5", "--dupe_factor=1", "--show_progress=false", *extra]


def _convert(w, run, *extra):
    return ["--input=%s" % TINY_CKPT, "--output=%s" % os.path.join(run, "bert_model.ckpt"),
            "--bert_config_file=%s" % TINY_CONFIG, *extra]


def _with(builder, *extra):
    return lambda w, run: builder(w, run, *[e.format(**w, run=run) for e in extra])


def _write(name, text_key=None, text=None):
    def setup(w, run):
        with open(os.path.join(run, name), "w", encoding="utf-8") as f:
            f.write(w[text_key] if text_key else text)
    return setup


# Values that cannot work, flag by flag: (id, extra argv, expected in the error line).
_TRAINING_FLAGS = [
    ("lr_nan", "--learning_rate=nan", "--learning_rate=nan"),
    ("lr_zero", "--learning_rate=0", "--learning_rate=0"),
    ("lr_negative", "--learning_rate=-1e-4", "--learning_rate=-0.0001"),
    ("train_batch_0", "--train_batch_size=0", "--train_batch_size=0"),
    ("save_steps_0", "--save_checkpoints_steps=0", "--save_checkpoints_steps=0"),
    ("max_seq_length_2", "--max_seq_length=2", "--max_seq_length=2"),
]
_EPOCH_FLAGS = [
    ("epochs_negative", "--num_train_epochs=-1", "--num_train_epochs=-1"),
    ("epochs_nan", "--num_train_epochs=nan", "--num_train_epochs=nan"),
    ("warmup_above_1", "--warmup_proportion=1.5", "--warmup_proportion=1.5"),
    ("warmup_negative", "--warmup_proportion=-0.1", "--warmup_proportion=-0.1"),
]

CASES: List[Case] = []
for tool, builder in (("run_classifier", _classifier), ("run_swag", _swag),
                      ("run_squad", _squad), ("run_ner", _ner)):
    module = {"run_classifier": run_classifier, "run_swag": run_swag, "run_squad": run_squad,
              "run_ner": run_ner}[tool]
    for case_id, flag, expect in _TRAINING_FLAGS + _EPOCH_FLAGS:
        if tool == "run_squad" and case_id == "max_seq_length_2":
            continue  # run_squad's own check (> max_query_length + 3) comes first
        CASES.append(Case("%s-%s" % (tool, case_id), module, _with(builder, flag), [expect]))
    batch = "predict_batch_size" if tool == "run_squad" else "eval_batch_size"
    CASES.append(Case("%s-%s_0" % (tool, batch), module, _with(builder, "--%s=0" % batch),
                      ["--%s=0" % batch]))
    CASES.append(Case("%s-vocab_without_cls" % tool, module,
                      _with(builder, "--vocab_file={vocab_no_cls}"),
                      ["{vocab_no_cls}", "[CLS]"]))
    CASES.append(Case("%s-vocab_without_sep" % tool, module,
                      _with(builder, "--vocab_file={vocab_no_sep}"),
                      ["{vocab_no_sep}", "[SEP]"]))

for tool, builder, module in (("run_classifier", _classifier, run_classifier),
                              ("run_swag", _swag, run_swag), ("run_ner", _ner, run_ner),
                              ("extract_features", _extract, extract_features)):
    CASES.append(Case("%s-truncated_checkpoint" % tool, module,
                      _with(builder, "--init_checkpoint={truncated_ckpt}"),
                      ["{truncated_ckpt}", "truncated"]))
    CASES.append(Case("%s-empty_checkpoint_folder" % tool, module,
                      _with(builder, "--init_checkpoint={empty}"),
                      ["{empty}", "holds no checkpoint", "empty"]))

CASES += [
    Case("run_pretraining-%s" % case_id, run_pretraining, _with(_pretraining, flag), [expect])
    for case_id, flag, expect in _TRAINING_FLAGS + [
        ("eval_batch_negative", "--eval_batch_size=-1", "--eval_batch_size=-1"),
        ("num_train_steps_0", "--num_train_steps=0", "--num_train_steps=0"),
        ("warmup_steps_negative", "--num_warmup_steps=-1", "--num_warmup_steps=-1"),
        ("max_predictions_0", "--max_predictions_per_seq=0", "--max_predictions_per_seq=0"),
        ("accumulation_0", "--num_accumulation_steps=0", "--num_accumulation_steps=0"),
    ]
]
CASES += [
    Case("run_pretraining-truncated_checkpoint", run_pretraining,
         _with(_pretraining, "--init_checkpoint={truncated_ckpt}",
               "--bert_config_file=%s" % TINY_CONFIG),
         ["{truncated_ckpt}", "truncated"]),
    Case("run_pretraining-empty_checkpoint_folder", run_pretraining,
         _with(_pretraining, "--init_checkpoint={empty}", "--bert_config_file=%s" % TINY_CONFIG),
         ["{empty}", "holds no checkpoint"]),
    # Found when read (after the run's step log and TensorBoard file were opened): one line
    # naming the file, no checkpoint.
    Case("run_pretraining-truncated_records", run_pretraining,
         _with(_pretraining, "--input_file={truncated_records}", "--num_train_steps=50"),
         ["{truncated_records}", "truncated record at"],
         allowed_new=r"^out/(train_steps\.jsonl|train/events\.out\.tfevents\..*)$"),
    Case("run_pretraining-corrupted_records", run_pretraining,
         _with(_pretraining, "--input_file={flipped_records}", "--num_train_steps=50"),
         ["{flipped_records}", "corrupted record at"],
         allowed_new=r"^out/(train_steps\.jsonl|train/events\.out\.tfevents\..*)$"),
    Case("run_pretraining-corrupted_records_eval", run_pretraining,
         _with(_pretraining, "--input_file={flipped_records}", "--do_train=false", "--do_eval",
               "--max_eval_steps=50"),
         ["{flipped_records}", "corrupted record at"],
         allowed_new=r"^out/eval/events\.out\.tfevents\..*$"),
]

CASES += [
    Case("extract_features-batch_size_0", extract_features, _with(_extract, "--batch_size=0"),
         ["--batch_size"]),
    Case("extract_features-max_seq_length_2", extract_features,
         _with(_extract, "--max_seq_length=2"), ["--max_seq_length"]),
    Case("extract_features-vocab_without_cls", extract_features,
         _with(_extract, "--vocab_file={vocab_no_cls}"), ["{vocab_no_cls}", "[CLS]"]),
    Case("extract_features-vocab_without_unk", extract_features,
         _with(_extract, "--vocab_file={vocab_no_unk}"), ["{vocab_no_unk}", "[UNK]"]),
]

CASES += [
    Case("create_pretraining_data-%s" % case_id, create_pretraining_data, _with(_create, flag),
         [expect])
    for case_id, flag, expect in [
        ("masked_lm_prob_0", "--masked_lm_prob=0", "--masked_lm_prob=0"),
        ("masked_lm_prob_above_1", "--masked_lm_prob=1.5", "--masked_lm_prob=1.5"),
        ("masked_lm_prob_nan", "--masked_lm_prob=nan", "--masked_lm_prob=nan"),
        ("short_seq_prob_negative", "--short_seq_prob=-0.1", "--short_seq_prob=-0.1"),
        ("dupe_factor_0", "--dupe_factor=0", "--dupe_factor=0"),
        ("max_predictions_0", "--max_predictions_per_seq=0", "--max_predictions_per_seq=0"),
        ("max_seq_length_4", "--max_seq_length=4", "--max_seq_length=4"),
        ("num_workers_0", "--num_workers=0", "--num_workers=0"),
    ]
]
CASES += [
    Case("create_pretraining_data-vocab_without_mask", create_pretraining_data,
         _with(_create, "--vocab_file={vocab_no_mask}"), ["{vocab_no_mask}", "[MASK]"]),
    Case("create_pretraining_data-vocab_without_cls", create_pretraining_data,
         _with(_create, "--vocab_file={vocab_no_cls}"), ["{vocab_no_cls}", "[CLS]"]),
]

CASES += [
    Case("convert_checkpoint-output_%s" % ext.strip("."), convert_checkpoint,
         _with(_convert, "--output={run}/out%s" % ext), ["{run}/out%s" % ext, ".keras"])
    for ext in (".h5", ".json", ".safetensors", ".pt", ".bin")
]
CASES += [
    Case("convert_checkpoint-keras_format_without_keras_name", convert_checkpoint,
         _with(_convert, "--output={run}/model", "--output_format=keras"),
         ["{run}/model", ".keras"]),
    Case("convert_checkpoint-other_config_beside", convert_checkpoint, _convert,
         ["{run}/bert_config.json", "differs"], setup=_write("bert_config.json",
                                                            "other_config_text")),
    Case("convert_checkpoint-other_vocab_beside", convert_checkpoint,
         _with(_convert, "--vocab_file=%s" % paths.GOLDEN_VOCAB),
         ["{run}/vocab.txt", "differs"], setup=_write("vocab.txt", text="[UNK]\nhello\n")),
    Case("convert_checkpoint-empty_input_folder", convert_checkpoint,
         _with(_convert, "--input={empty}", "--bert_config_file="),
         ["{empty}", "holds no checkpoint", "empty"]),
    Case("convert_checkpoint-truncated_checkpoint", convert_checkpoint,
         _with(_convert, "--input={truncated_ckpt}"), ["{truncated_ckpt}", "truncated"]),
]


def _tool_name(module) -> str:
    return module.TOOL


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_nothing_written(case, work, tmp_path):
    run = str(tmp_path)
    if case.setup:
        case.setup(work, run)
    before = _snapshot(run)
    result = run_tool(case.module, case.argv(work, run))
    after = _snapshot(run)

    tool = _tool_name(case.module)
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("%s: error:" % tool)]
    assert result.code == 1, result.stderr[-3000:]
    assert len(errors) == 1, result.stderr[-3000:]
    for expected in case.expect:
        assert expected.format(**work, run=run) in errors[0], errors[0]
    assert "Traceback" not in result.stderr
    changed = {name for name in before if after.get(name) != before[name]}
    assert not changed, changed  # nothing overwritten or removed
    new = {name for name in after if name not in before}
    assert all(re.match(case.allowed_new, name) for name in new), new
    assert not any(name.endswith(".index") or name.startswith("out/ckpt") for name in new)


# ------------------------------------------------------------------- what still works (tests
# of the refusals' other side)


def test_identical_config_beside_a_tf1_output_stays(tmp_path):
    """A bert_config.json equal to the one being written (here: other formatting) is left as
    it is and the conversion succeeds; the checkpoint is written."""
    with open(TINY_CONFIG, encoding="utf-8") as f:
        same = json.dumps(json.load(f))  # one line: other bytes, same config
    (tmp_path / "bert_config.json").write_text(same, encoding="utf-8")
    result = run_tool(convert_checkpoint, _convert({}, str(tmp_path)))
    assert result.code == 0, result.stderr[-3000:]
    assert (tmp_path / "bert_config.json").read_text(encoding="utf-8") == same
    assert (tmp_path / "bert_model.ckpt.index").exists()


def test_config_key_defaults_are_logged(tmp_path, caplog):
    """A config without hidden_size is read with the original's class default (faithful: 768)
    and one warning names the file and every key that took its default."""
    from modeling.config import BertConfig

    with open(TINY_CONFIG, encoding="utf-8") as f:
        config = json.load(f)
    del config["hidden_size"], config["type_vocab_size"]
    config.update(num_attention_heads=12)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        read = BertConfig.from_json_file(str(path))
    assert read.hidden_size == 768 and read.type_vocab_size == 16
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0]
    assert "hidden_size=768" in warnings[0] and "type_vocab_size=16" in warnings[0]

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        BertConfig.from_json_file(TINY_CONFIG)  # every key given: nothing said
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_missing_token_is_a_key_error_and_an_input_error(work):
    """convert_tokens_to_ids of a token the vocab lacks: still a KeyError (as the original),
    and an InputError naming the vocab file (one line in every tool)."""
    from bert_common.errors import InputError
    from data.tokenization import wordpiece

    for tokenizer_class in (wordpiece.FullTokenizer, wordpiece.FastFullTokenizer):
        tokenizer = tokenizer_class(work["vocab_no_cls"])
        with pytest.raises(KeyError) as err:
            tokenizer.convert_tokens_to_ids(["[CLS]", "hello"])
        assert isinstance(err.value, InputError)
        assert str(err.value) == "vocab file %s has no [CLS] token" % work["vocab_no_cls"]
        with pytest.raises(wordpiece.VocabError, match=r"has no \[CLS\] token"):
            wordpiece.require_tokens(tokenizer, ("[UNK]", "[CLS]", "[SEP]"))
        wordpiece.require_tokens(tokenizer, ("[UNK]", "[SEP]", "[MASK]"))  # all there


def test_check_values_checks_only_the_flags_a_tool_defines():
    """``bert_cli.flags.check_values``: NaN and infinity never pass; a flag the tool does not
    define is not looked at; --num_train_steps counts only with --do_train."""
    from absl import flags

    from bert_cli import flags as cli_flags

    def values(*argv):
        fv = flags.FlagValues()
        run_pretraining.define_flags(fv)
        fv(["run_pretraining.py", *argv])
        return fv

    cli_flags.check_values(values())  # the defaults work
    with pytest.raises(cli_flags.FlagError, match=r"^--learning_rate=inf must be a positive "):
        cli_flags.check_values(values("--learning_rate=inf"))
    cli_flags.check_values(values("--num_train_steps=0"))  # no --do_train: not used
    with pytest.raises(cli_flags.FlagError, match=r"^--num_train_steps=0 .*--do_train"):
        cli_flags.check_values(values("--num_train_steps=0", "--do_train"))

    only = flags.FlagValues()
    flags.DEFINE_float("warmup_proportion", 2.0, "", flag_values=only)
    only(["tool"])
    with pytest.raises(cli_flags.FlagError, match=r"^--warmup_proportion=2 must be a number "
                                                  r"in \[0, 1\]$"):
        cli_flags.check_values(only)
