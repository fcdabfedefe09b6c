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

Every case runs ``main`` in this process on fresh flags, on the tiny model and a few examples
(``tests/support/catalogue.py``); bad input files are in ``test_bad_files.py``.
"""

import json
import logging
from typing import List

import pytest

from bert_cli import (convert_checkpoint, create_pretraining_data, extract_features,
                      run_classifier, run_ner, run_pretraining, run_squad, run_swag)
from tests import paths
from tests.support.catalogue import (TINY_CONFIG, Case, build_work, check_case, classifier,
                                     convert, create, extract, ner, pretraining, squad, swag,
                                     with_flags, write_file)
from tests.support.tools import run_tool


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return build_work(str(tmp_path_factory.mktemp("bad_inputs_work")))


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
for tool, builder in (("run_classifier", classifier), ("run_swag", swag),
                      ("run_squad", squad), ("run_ner", ner)):
    module = {"run_classifier": run_classifier, "run_swag": run_swag, "run_squad": run_squad,
              "run_ner": run_ner}[tool]
    for case_id, flag, expect in _TRAINING_FLAGS + _EPOCH_FLAGS:
        if tool == "run_squad" and case_id == "max_seq_length_2":
            continue  # run_squad's own check (> max_query_length + 3) comes first
        CASES.append(Case("%s-%s" % (tool, case_id), module, with_flags(builder, flag), [expect]))
    batch = "predict_batch_size" if tool == "run_squad" else "eval_batch_size"
    CASES.append(Case("%s-%s_0" % (tool, batch), module, with_flags(builder, "--%s=0" % batch),
                      ["--%s=0" % batch]))
    CASES.append(Case("%s-vocab_without_cls" % tool, module,
                      with_flags(builder, "--vocab_file={vocab_no_cls}"),
                      ["{vocab_no_cls}", "[CLS]"]))
    CASES.append(Case("%s-vocab_without_sep" % tool, module,
                      with_flags(builder, "--vocab_file={vocab_no_sep}"),
                      ["{vocab_no_sep}", "[SEP]"]))

for tool, builder, module in (("run_classifier", classifier, run_classifier),
                              ("run_swag", swag, run_swag), ("run_ner", ner, run_ner),
                              ("extract_features", extract, extract_features)):
    CASES.append(Case("%s-truncated_checkpoint" % tool, module,
                      with_flags(builder, "--init_checkpoint={truncated_ckpt}"),
                      ["{truncated_ckpt}", "truncated"]))
    CASES.append(Case("%s-empty_checkpoint_folder" % tool, module,
                      with_flags(builder, "--init_checkpoint={empty}"),
                      ["{empty}", "holds no checkpoint", "empty"]))

CASES += [
    Case("run_pretraining-%s" % case_id, run_pretraining, with_flags(pretraining, flag), [expect])
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
         with_flags(pretraining, "--init_checkpoint={truncated_ckpt}",
               "--bert_config_file=%s" % TINY_CONFIG),
         ["{truncated_ckpt}", "truncated"]),
    Case("run_pretraining-empty_checkpoint_folder", run_pretraining,
         with_flags(pretraining, "--init_checkpoint={empty}", "--bert_config_file=%s" % TINY_CONFIG),
         ["{empty}", "holds no checkpoint"]),
    # Found when read (after the run's step log and TensorBoard file were opened): one line
    # naming the file, no checkpoint.
    Case("run_pretraining-truncated_records", run_pretraining,
         with_flags(pretraining, "--input_file={truncated_records}", "--num_train_steps=50"),
         ["{truncated_records}", "truncated record at"],
         allowed_new=r"^out/(train_steps\.jsonl|train/events\.out\.tfevents\..*)$"),
    Case("run_pretraining-corrupted_records", run_pretraining,
         with_flags(pretraining, "--input_file={flipped_records}", "--num_train_steps=50"),
         ["{flipped_records}", "corrupted record at"],
         allowed_new=r"^out/(train_steps\.jsonl|train/events\.out\.tfevents\..*)$"),
    Case("run_pretraining-corrupted_records_eval", run_pretraining,
         with_flags(pretraining, "--input_file={flipped_records}", "--do_train=false", "--do_eval",
               "--max_eval_steps=50"),
         ["{flipped_records}", "corrupted record at"],
         allowed_new=r"^out/eval/events\.out\.tfevents\..*$"),
]

CASES += [
    Case("extract_features-batch_size_0", extract_features, with_flags(extract, "--batch_size=0"),
         ["--batch_size"]),
    Case("extract_features-max_seq_length_2", extract_features,
         with_flags(extract, "--max_seq_length=2"), ["--max_seq_length"]),
    Case("extract_features-vocab_without_cls", extract_features,
         with_flags(extract, "--vocab_file={vocab_no_cls}"), ["{vocab_no_cls}", "[CLS]"]),
    Case("extract_features-vocab_without_unk", extract_features,
         with_flags(extract, "--vocab_file={vocab_no_unk}"), ["{vocab_no_unk}", "[UNK]"]),
]

CASES += [
    Case("create_pretraining_data-%s" % case_id, create_pretraining_data, with_flags(create, flag),
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
         with_flags(create, "--vocab_file={vocab_no_mask}"), ["{vocab_no_mask}", "[MASK]"]),
    Case("create_pretraining_data-vocab_without_cls", create_pretraining_data,
         with_flags(create, "--vocab_file={vocab_no_cls}"), ["{vocab_no_cls}", "[CLS]"]),
]

CASES += [
    Case("convert_checkpoint-output_%s" % ext.strip("."), convert_checkpoint,
         with_flags(convert, "--output={run}/out%s" % ext), ["{run}/out%s" % ext, ".keras"])
    for ext in (".h5", ".json", ".safetensors", ".pt", ".bin")
]
CASES += [
    Case("convert_checkpoint-keras_format_without_keras_name", convert_checkpoint,
         with_flags(convert, "--output={run}/model", "--output_format=keras"),
         ["{run}/model", ".keras"]),
    Case("convert_checkpoint-other_config_beside", convert_checkpoint, convert,
         ["{run}/bert_config.json", "differs"], setup=write_file("bert_config.json",
                                                            "other_config_text")),
    Case("convert_checkpoint-other_vocab_beside", convert_checkpoint,
         with_flags(convert, "--vocab_file=%s" % paths.GOLDEN_VOCAB),
         ["{run}/vocab.txt", "differs"], setup=write_file("vocab.txt", text="[UNK]\nhello\n")),
    Case("convert_checkpoint-empty_input_folder", convert_checkpoint,
         with_flags(convert, "--input={empty}", "--bert_config_file="),
         ["{empty}", "holds no checkpoint", "empty"]),
    Case("convert_checkpoint-tfhub_with_a_head", convert_checkpoint,
         with_flags(convert, "--output={run}/hub", "--output_format=tfhub",
                    "--model=pretraining"), ["--output_format=tfhub", "--model=pretraining"]),
    Case("convert_checkpoint-tfhub_with_labels", convert_checkpoint,
         with_flags(convert, "--output={run}/hub", "--output_format=tfhub", "--labels=a,b"),
         ["--output_format=tfhub", "--labels does not apply"]),
    Case("convert_checkpoint-truncated_checkpoint", convert_checkpoint,
         with_flags(convert, "--input={truncated_ckpt}"), ["{truncated_ckpt}", "truncated"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_nothing_written(case, work, tmp_path):
    check_case(case, work, str(tmp_path))


# ------------------------------------------------------------------- what still works (tests
# of the refusals' other side)


def test_identical_config_beside_a_tf1_output_stays(tmp_path):
    """A bert_config.json equal to the one being written (here: other formatting) is left as
    it is and the conversion succeeds; the checkpoint is written."""
    with open(TINY_CONFIG, encoding="utf-8") as f:
        same = json.dumps(json.load(f))  # one line: other bytes, same config
    (tmp_path / "bert_config.json").write_text(same, encoding="utf-8")
    result = run_tool(convert_checkpoint, convert({}, str(tmp_path)))
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
    """``bert_common.checks.check_values``: NaN and infinity never pass; a flag the tool does not
    define is not looked at; --num_train_steps counts only with --do_train."""
    from absl import flags

    from bert_common import checks
    from bert_common.errors import FlagError

    def values(*argv):
        fv = flags.FlagValues()
        run_pretraining.define_flags(fv)
        fv(["run_pretraining.py", *argv])
        return fv

    checks.check_values(values())  # the defaults work
    with pytest.raises(FlagError, match=r"^--learning_rate=inf must be a positive "):
        checks.check_values(values("--learning_rate=inf"))
    checks.check_values(values("--num_train_steps=0"))  # no --do_train: not used
    with pytest.raises(FlagError, match=r"^--num_train_steps=0 .*--do_train"):
        checks.check_values(values("--num_train_steps=0", "--do_train"))

    only = flags.FlagValues()
    flags.DEFINE_float("warmup_proportion", 2.0, "", flag_values=only)
    only(["tool"])
    with pytest.raises(FlagError, match=r"^--warmup_proportion=2 must be a number "
                                        r"in \[0, 1\]$"):
        checks.check_values(only)
