"""The value checks every tool and the fine-tuning driver share, written once.

``check_values(settings)`` reads values by name from ``settings``: the absl flag values of a tool
(``bert_cli``) or a settings object with the same attribute names (``bert_tasks.driver``). It
checks only the names ``settings`` has, so each tool checks the flags it defines. A value that
cannot work raises ``FlagError`` naming the flag and the value (``--train_batch_size=0 must be
at least 1``), before any data is read or anything is written.
"""

from __future__ import annotations

import math
from typing import Any

from bert_common.errors import FlagError


# The value checks every tool shares (``check_values``), by flag name; a tool checks the ones
# it defines. Integers that count something (>= 1):
_POSITIVE_INTEGERS = ("train_batch_size", "eval_batch_size", "predict_batch_size", "batch_size",
                      "save_checkpoints_steps", "iterations_per_loop", "keep_checkpoint_max",
                      "max_eval_steps", "num_accumulation_steps", "max_predictions_per_seq",
                      "dupe_factor", "num_workers", "doc_stride", "n_best_size",
                      "max_answer_length")
_NON_NEGATIVE_INTEGERS = ("num_warmup_steps", "max_query_length", "lstm_units",
                          "num_tpu_cores", "num_gpus", "num_cpu_devices")
# Floats: name -> (low, low included, high, high included); high None = unbounded. NaN and
# infinity never pass.
_FLOAT_RANGES = {
    "learning_rate": (0.0, False, None, False),
    "num_train_epochs": (0.0, False, None, False),
    "warmup_proportion": (0.0, True, 1.0, True),
    "masked_lm_prob": (0.0, False, 1.0, True),
    "short_seq_prob": (0.0, True, 1.0, True),
}
# Floats any number (infinity too) can be, but not NaN.
_NOT_NAN = ("null_score_diff_threshold",)
# [CLS] a [SEP]: the shortest sequence a tool can build (create_pretraining_data: 5).
MIN_SEQ_LENGTH = 3
_SHORTEST_SEQUENCES = {3: "[CLS] a [SEP]", 5: "[CLS] A [SEP] B [SEP]"}


def check_seq_length(max_seq_length: int, max_position_embeddings: int) -> None:
    """The original's check of ``--max_seq_length`` against the model's positions (every tool
    that builds a model from ``--bert_config_file``).

    Args:
        max_seq_length: the flag's value.
        max_position_embeddings: the config's.

    Raises:
        FlagError: the sequences are longer than the model's positions.
    """
    if max_seq_length > max_position_embeddings:
        raise FlagError("Cannot use sequence length %d because the BERT model was only trained "
                        "up to sequence length %d" % (max_seq_length, max_position_embeddings))


def _interval(low, low_in, high, high_in) -> str:
    if high is None:
        return "a positive number" if (low == 0 and not low_in) else "a number >= %g" % low
    return "a number in %s%g, %g%s" % ("[" if low_in else "(", low, high,
                                       "]" if high_in else ")")


def check_values(settings: Any, min_seq_length: int = MIN_SEQ_LENGTH) -> None:
    """``FlagError`` naming the first flag whose value cannot work, before any work is done.

    The one place for the checks the training and inference tools share; each tool calls it
    from its validate step (the fine-tuning tools through ``bert_tasks.driver.run``)
    and checks only the flags it defines: batch sizes and step counts >= 1;
    ``--learning_rate`` and ``--num_train_epochs`` positive and finite (NaN and infinity never
    pass); ``--warmup_proportion`` in [0, 1]; ``--max_seq_length`` >= ``min_seq_length``;
    ``--num_train_steps`` >= 1 with ``--do_train``; create_pretraining_data's
    ``--masked_lm_prob`` in (0, 1], ``--short_seq_prob`` in [0, 1], ``--dupe_factor`` >= 1.

    Args:
        settings: absl flag values or a settings object (only the attributes it has are checked).
        min_seq_length: the least ``max_seq_length`` the tool can work with.

    Raises:
        FlagError: naming the flag.
    """
    def setting(name):
        return getattr(settings, name, None)  # absl: AttributeError for a flag not defined

    def defined(name):
        return setting(name) is not None

    for name in _POSITIVE_INTEGERS:
        if defined(name) and setting(name) < 1:
            raise FlagError("--%s=%d must be at least 1" % (name, setting(name)))
    for name in _NON_NEGATIVE_INTEGERS:
        if defined(name) and setting(name) < 0:
            raise FlagError("--%s=%d must not be negative" % (name, setting(name)))
    for name, (low, low_in, high, high_in) in _FLOAT_RANGES.items():
        if not defined(name):
            continue
        value = float(setting(name))
        ok = (math.isfinite(value) and (value > low or (low_in and value == low))
              and (high is None or value < high or (high_in and value == high)))
        if not ok:
            raise FlagError("--%s=%g must be %s" % (name, value,
                                                    _interval(low, low_in, high, high_in)))
    for name in _NOT_NAN:
        if defined(name) and math.isnan(setting(name)):
            raise FlagError("--%s=nan must be a number" % name)
    if defined("max_seq_length") and setting("max_seq_length") < min_seq_length:
        raise FlagError("--max_seq_length=%d is too small: at least %d is needed (%s)"
                        % (setting("max_seq_length"), min_seq_length,
                           _SHORTEST_SEQUENCES.get(min_seq_length, "the special tokens")))
    training = not defined("do_train") or bool(setting("do_train"))
    if training and defined("num_train_steps") and setting("num_train_steps") < 1:
        raise FlagError("--num_train_steps=%d must be at least 1 with --do_train"
                        % setting("num_train_steps"))
