"""SWAG multiple choice: records, datasets, in-order predictions and the eval metrics.

* ``dataset(record_file, ...)``: batches of SWAG records (ids/mask/segments [B, 4, S]).
* ``predict_examples(model, examples, ...)``: writes the records, returns ``logits`` /
  ``probabilities`` [N, 4] in example order.
* ``eval_metrics(examples, result)``: ``eval_accuracy``, ``eval_loss`` and ``loss``.
* ``SwagTask``: the task as the one driver (``bert_tasks.driver``) runs it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, TYPE_CHECKING

import numpy as np
from absl import logging

from bert_common.errors import FlagError
from bert_tasks import driver
from bert_tasks.task import Context, Task, resolve_strategy
from data import swag
from data.glue import dataset as glue_dataset
from data.glue import metrics as glue_metrics
from modeling.heads.classifier import per_example_classifier_loss
from modeling.training import finetuning

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None) -> "tf.data.Dataset":
    """Batches of ``record_file``: ``input_ids``/``input_mask``/``segment_ids`` [B, 4, S],
    ``label_ids`` [B], ``is_real_example`` [B], ``example_index`` [B] off training.

    Args:
        record_file: the SWAG TFRecord file.
        max_seq_length: S of the records.
        batch_size: B.
        is_training: repeated, shuffled full batches (else every record once).
        length_aware: batch records of similar length, each batch cut to its longest.
        static_shapes: every batch [B, 4, S] (TPU).
        seed: the shuffle seed.

    Returns:
        A ``tf.data.Dataset`` of feature dicts (without TensorFlow installed, a
        ``data.glue.numpy_dataset.NumpyDataset`` of the same batches).
    """
    return glue_dataset.task_dataset(record_file, swag.record_spec(max_seq_length),
                                     batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed)


def predict_examples(model, examples: List, tokenizer, record_file: str, *, max_seq_length: int,
                     batch_size: int, strategy: Optional["tf.distribute.Strategy"] = None,
                     length_aware: bool = True) -> Dict[str, np.ndarray]:
    """Writes ``record_file``; returns ``logits``/``probabilities`` [N, 4] and ``label_ids``
    [N] in example order. On TPU the last example is repeated up to a full batch (static
    shapes) and the copies are dropped from the result.

    Args:
        model: the multiple-choice model.
        examples: the ``SwagExample``s.
        tokenizer: the ``FullTokenizer``.
        record_file: the TFRecord file to write.
        max_seq_length: S.
        batch_size: B.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        length_aware: length-aware batching (off on a TPU).

    Returns:
        name -> array.
    """
    strategy, tpu = resolve_strategy(strategy)
    n = len(examples)
    if tpu and n % batch_size:
        examples = list(examples) + [examples[-1]] * (-n % batch_size)
    swag.write_tf_records(examples, max_seq_length, tokenizer, record_file)
    batches = dataset(record_file, max_seq_length, batch_size, False, length_aware=length_aware,
                      static_shapes=tpu)
    out = finetuning.predict(model, batches, ["logits", "probabilities"], total=len(examples),
                             strategy=strategy, label=os.path.basename(record_file))
    order = out.pop(glue_dataset.EXAMPLE_INDEX)
    return {k: glue_dataset.restore_order(order, v)[:n] for k, v in out.items()}


def eval_metrics(examples: List, result: Dict[str, np.ndarray]) -> Dict[str, float]:
    """``eval_accuracy`` of the highest-scoring ending, ``eval_loss`` (mean cross-entropy) and
    ``loss`` for labelled ``examples`` and their ``result`` (``logits`` [N, 4]).

    Args:
        examples: the labelled ``SwagExample``s.
        result: ``predict_examples``' output for them.

    Returns:
        name -> float.
    """
    labels = np.array([e.label for e in examples])
    logits = result["logits"]
    loss = glue_metrics.mean_cross_entropy(logits, labels)
    return {"eval_accuracy": glue_metrics.accuracy(np.argmax(logits, -1), labels),
            "eval_loss": loss, "loss": loss}


# swag split -> the file stem of the swagaf layout (train.csv, val.csv, test.csv; or .jsonl).
SPLIT_STEMS = {"train": "train", "eval": "val", "predict": "test"}


@dataclasses.dataclass
class SwagTask(Task):
    """SWAG multiple choice as the driver runs it (run_swag): each example is 4 sequences
    ``[CLS] sent1 [SEP] sent2 endingN [SEP]``, scored by the pooled output and a softmax over 4.

    ``do_eval`` returns ``eval_accuracy``, ``eval_loss`` and ``loss``; ``do_predict`` writes
    ``test_results.tsv`` (4 probabilities per example).

    Args:
        data_dir: the folder of ``train``/``val``/``test`` ``.csv`` (swagaf) or ``.jsonl``.
        train_file, eval_file, predict_file: a split's file, instead of ``data_dir``'s.

    Example::

        driver.run(SwagTask(data_dir="swagaf/data"), settings)
    """

    actions = ("do_train", "do_eval", "do_predict")

    data_dir: Optional[str] = None
    train_file: Optional[str] = None
    eval_file: Optional[str] = None
    predict_file: Optional[str] = None

    def read(self, ctx: Context) -> None:
        """See ``Task.read``: the examples of each split (train and eval need labels).
        """
        s = ctx.settings
        self.examples = {}
        for split, wanted in (("train", s.do_train), ("eval", s.do_eval),
                              ("predict", s.do_predict)):
            if wanted:
                stem = SPLIT_STEMS[split]
                path = driver.split_file(self, split, (stem + ".csv", stem + ".jsonl"))
                self.examples[split] = swag.read_swag_examples(path)
        for split in ("train", "eval"):
            unlabelled = [e.origin for e in self.examples.get(split, []) if e.label is None]
            if unlabelled:
                raise FlagError("%s: no label, but the %s split needs labels"
                                % (unlabelled[0], split))

    def build_model(self, ctx: Context):
        """See ``Task.build_model``: a multiple-choice model of 4 endings.
        """
        from modeling.heads import multiple_choice as multiple_choice_head

        return multiple_choice_head.build_multiple_choice_model(
            ctx.bert_config, swag.NUM_CHOICES, seq_length=ctx.seq_length)

    def train_dataset(self, ctx: Context):
        """See ``Task.train_dataset``.
        """
        s = ctx.settings
        train_file = ctx.path("train.tf_record")
        swag.write_tf_records(self.examples["train"], s.max_seq_length, ctx.tokenizer,
                              train_file)
        batches = dataset(train_file, s.max_seq_length, s.train_batch_size, True,
                          length_aware=s.length_aware_batching, static_shapes=ctx.tpu,
                          seed=s.random_seed)
        return batches, len(self.examples["train"])

    def per_example_loss(self, outputs, batch):
        """See ``Task.per_example_loss``: cross-entropy over the endings.
        """
        return per_example_classifier_loss(outputs, batch)

    def _predict(self, ctx: Context, model, split: str, batch_size: int):
        s = ctx.settings
        return predict_examples(model, self.examples[split], ctx.tokenizer,
                                ctx.path("%s.tf_record" % split),
                                max_seq_length=s.max_seq_length, batch_size=batch_size,
                                strategy=ctx.strategy, length_aware=s.length_aware_batching)

    def evaluate(self, ctx: Context, model) -> Dict[str, float]:
        """See ``Task.evaluate``: accuracy and loss of the eval split.
        """
        return eval_metrics(self.examples["eval"],
                            self._predict(ctx, model, "eval", ctx.settings.eval_batch_size))

    def predict(self, ctx: Context, model) -> None:
        """See ``Task.predict``: ``test_results.tsv`` (the endings' probabilities).
        """
        from data.glue import submission

        result = self._predict(ctx, model, "predict", ctx.settings.predict_batch_size)
        if not ctx.writer:
            return
        path = ctx.path("test_results.tsv")
        submission.write_probabilities(path, result["probabilities"])
        logging.info("wrote %s", path)
