"""Sentence (pair) classification and regression: records, datasets, in-order predictions.

* ``write_train_records(examples, ...)``: the training examples shuffled once, then written as
  records (see there why).
* ``dataset(record_file, ...)``: batches of classifier records (``data.glue.dataset``'s rule
  for training / eval / predict, length-aware off TPU).
* ``predict_examples(model, examples, ...)``: writes the examples' records and returns the
  model's outputs for the real examples, in example order.
* ``ClassifierTask``: the task as the one driver (``bert_tasks.driver``) runs it.

Example::

    result = predict_examples(model, dev_examples, ["0", "1"], tokenizer, "eval.tf_record",
                              max_seq_length=128, batch_size=8)
    metrics = data.glue.metrics.eval_metrics("mrpc", result)   # eval_accuracy, eval_f1, ...
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
from typing import Dict, List, Optional, TYPE_CHECKING

import numpy as np
from absl import logging

from bert_common.errors import FlagError
from bert_tasks.task import Context, Task, resolve_strategy
from data.glue import dataset as glue_dataset
from data.glue import features as glue_features
from data.glue import processors
from data.glue.processors import PaddingInputExample
from modeling.heads.classifier import per_example_classifier_loss
from modeling.training import finetuning

if TYPE_CHECKING:  # (annotations only: TensorFlow is imported where it is used)
    import tensorflow as tf


def write_train_records(examples: List, label_list: List[str], max_seq_length: int, tokenizer,
                        path: str, seed: int) -> None:
    """Writes the training ``examples`` to ``path`` as classifier records, in an order shuffled
    with ``random.Random(seed)`` (``examples`` itself is left as it is).

    The training input shuffles with the original's buffer of 100 records, which only mixes
    neighbours: GLUE files can come sorted (STS-B by genre and source, CoLA by source), and then
    each stretch of an epoch trains on one genre (CHANGELOG.md has what it cost on STS-B). The
    original's run_squad shuffles its training examples before writing them for the same reason ("to avoid having to make a very large
    shuffle buffer"); the classifier does the same here. The records of each example are the
    original's (``file_based_convert_examples_to_features``).

    Args:
        examples: the training ``InputExample``s.
        label_list: the label names, by label id.
        max_seq_length: the longest packed row.
        tokenizer: the ``FullTokenizer``.
        path: the TFRecord file to write.
        seed: the shuffle seed.
    """
    order = list(examples)
    random.Random(seed).shuffle(order)
    glue_features.file_based_convert_examples_to_features(order, label_list, max_seq_length,
                                                          tokenizer, path)


def per_example_loss(regression: bool):
    """The ``per_example_loss`` of ``finetune`` for this task (squared error for STS-B).

    Args:
        regression: a regression task.

    Returns:
        A function ``(outputs, batch) -> [B]``.
    """
    return functools.partial(per_example_classifier_loss, regression=regression)


def dataset(record_file: str, max_seq_length: int, batch_size: int, is_training: bool, *,
            regression: bool = False, length_aware: bool = True, static_shapes: bool = False,
            seed: Optional[int] = None) -> "tf.data.Dataset":
    """Batches of ``record_file`` (``input_ids``/``input_mask``/``segment_ids`` [B, S],
    ``label_ids`` [B], ``is_real_example`` [B], ``example_index`` [B] off training).

    Args:
        record_file: the classifier TFRecord file.
        max_seq_length: S of the records.
        batch_size: B.
        is_training: repeated, shuffled full batches (else every record once).
        regression: float labels.
        length_aware: batch records of similar length, each batch cut to its longest.
        static_shapes: every batch [B, S] (TPU).
        seed: the shuffle seed.

    Returns:
        A ``tf.data.Dataset`` of feature dicts (without TensorFlow installed, a
        ``data.glue.numpy_dataset.NumpyDataset`` of the same batches).
    """
    spec = glue_features.record_spec(max_seq_length, regression)
    return glue_dataset.task_dataset(record_file, spec, batch_size, is_training,
                                     length_aware=length_aware,
                                     static_shapes=static_shapes, seed=seed)


def predict_examples(model, examples: List, label_list: List[str], tokenizer, record_file: str,
                     *, max_seq_length: int, batch_size: int, regression: bool = False,
                     strategy: Optional["tf.distribute.Strategy"] = None,
                     length_aware: bool = True) -> Dict[str, np.ndarray]:
    """Writes ``record_file`` and returns the model's outputs (``logits``/``probabilities``
    [N, K], or ``predictions`` [N]) with ``label_ids`` [N] for the N real examples, in order.

    On TPU the examples are padded with ``PaddingInputExample`` to a multiple of the batch
    size, as the original (static shapes); padding rows are dropped from the result.

    Args:
        model: the classifier model.
        examples: the ``InputExample``s to predict.
        label_list: the label names.
        tokenizer: the ``FullTokenizer``.
        record_file: the TFRecord file to write.
        max_seq_length: S.
        batch_size: B.
        regression: a regression model.
        strategy: the ``tf.distribute.Strategy`` (None: the default).
        length_aware: length-aware batching (off on a TPU).

    Returns:
        name -> array, [N] or [N, K].

    Raises:
        RuntimeError: examples were lost in the input pipeline.
    """
    strategy, tpu = resolve_strategy(strategy)
    padded = list(examples)
    if tpu:
        padded += [PaddingInputExample()] * (-len(examples) % batch_size)
    glue_features.file_based_convert_examples_to_features(
        padded, label_list, max_seq_length, tokenizer, record_file)
    logging.info("  Num examples = %d (%d actual, %d padding)", len(padded), len(examples),
                 len(padded) - len(examples))
    names = ["predictions"] if regression else ["logits", "probabilities"]
    batches = dataset(record_file, max_seq_length, batch_size, False, regression=regression,
                      length_aware=length_aware, static_shapes=tpu)
    out = finetuning.predict(model, batches, names, total=len(padded), strategy=strategy,
                             label=os.path.basename(record_file))
    order = out.pop(glue_dataset.EXAMPLE_INDEX)
    result = {k: glue_dataset.restore_order(order, v) for k, v in out.items()}
    real = np.asarray(result.pop("is_real_example")) > 0
    if int(real.sum()) != len(examples):
        raise RuntimeError("lost examples in the input pipeline: %d of %d"
                           % (int(real.sum()), len(examples)))
    return {k: v[real] for k, v in result.items()}


@dataclasses.dataclass
class ClassifierTask(Task):
    """Sentence (pair) classification or regression as the driver runs it (run_classifier).

    Reads the processor's ``train``/``dev``/``test`` splits from ``data_dir``; ``do_eval``
    writes every GLUE metric of the task (``data.glue.metrics.eval_metrics``), ``do_predict``
    ``test_results.tsv`` and the GLUE submission file; exports a TF Serving SavedModel
    (``export_dir``) and a Hugging Face folder (``export_hf_dir``).

    Args:
        task_name: a GLUE/XNLI task or a TSV task (``data.glue.processors.PROCESSORS``).
        data_dir: the folder of the task's files.
        xnli_language: XNLI's language.
        export_hf_dir: where to write a Hugging Face folder, or None.

    Example::

        driver.run(ClassifierTask("mrpc", data_dir="glue/MRPC"), settings)
    """

    actions = ("do_train", "do_eval", "do_predict", "export_dir", "export_hf_dir")

    task_name: str
    data_dir: Optional[str] = None
    xnli_language: str = "zh"
    export_hf_dir: Optional[str] = None

    def check(self, ctx: Context) -> None:
        """See ``Task.check``: ``--data_dir`` is required to train, evaluate or predict.
        """
        s = ctx.settings
        if (s.do_train or s.do_eval or s.do_predict) and not self.data_dir:
            raise FlagError("--data_dir is required with --do_train/--do_eval/--do_predict")

    def read(self, ctx: Context) -> None:
        """See ``Task.read``: the task's processor, labels and examples of each split.
        """
        s = ctx.settings
        self.task_name = processors.canonical_task_name(self.task_name)
        self.processor = processors.get_processor(self.task_name, self.data_dir,
                                                  self.xnli_language)
        self.regression = self.processor.is_regression
        self.label_list = self.processor.get_labels()
        self.examples = {split: processors.get_examples(self.processor, split, self.data_dir)
                         for split, wanted in (("train", s.do_train), ("dev", s.do_eval),
                                               ("test", s.do_predict)) if wanted}

    def build_model(self, ctx: Context):
        """See ``Task.build_model``: a ``BertClassifier``.
        """
        from modeling.heads import classifier as classifier_head

        return classifier_head.build_classifier_model(
            ctx.bert_config, 1 if self.regression else len(self.label_list),
            seq_length=ctx.seq_length, regression=self.regression)

    def train_dataset(self, ctx: Context):
        """See ``Task.train_dataset``.
        """
        s = ctx.settings
        train_file = ctx.path("train.tf_record")
        write_train_records(self.examples["train"], self.label_list, s.max_seq_length,
                            ctx.tokenizer, train_file, s.random_seed)
        batches = dataset(train_file, s.max_seq_length, s.train_batch_size, True,
                          regression=self.regression, length_aware=s.length_aware_batching,
                          static_shapes=ctx.tpu, seed=s.random_seed)
        return batches, len(self.examples["train"])

    def per_example_loss(self, outputs, batch):
        """See ``Task.per_example_loss``: cross-entropy, or squared error for regression.
        """
        return per_example_classifier_loss(outputs, batch, regression=self.regression)

    def _predict(self, ctx: Context, model, split: str, record_name: str, batch_size: int):
        s = ctx.settings
        return predict_examples(model, self.examples[split], self.label_list, ctx.tokenizer,
                                ctx.path(record_name), max_seq_length=s.max_seq_length,
                                batch_size=batch_size, regression=self.regression,
                                strategy=ctx.strategy, length_aware=s.length_aware_batching)

    def evaluate(self, ctx: Context, model) -> Dict[str, float]:
        """See ``Task.evaluate``: the GLUE metrics of the dev split.
        """
        from data.glue import metrics as glue_metrics

        result = self._predict(ctx, model, "dev", "eval.tf_record", ctx.settings.eval_batch_size)
        return glue_metrics.eval_metrics(self.task_name, result, self.regression)

    def predict(self, ctx: Context, model) -> None:
        """See ``Task.predict``: the test split's submission files.
        """
        from data.glue import submission

        result = self._predict(ctx, model, "test", "predict.tf_record",
                               ctx.settings.predict_batch_size)
        if not ctx.writer:
            return
        for path in submission.write_test_results(ctx.settings.output_dir, self.processor,
                                                  self.examples["test"], result,
                                                  self.label_list, self.regression,
                                                  self.task_name):
            logging.info("wrote %s", path)

    def export(self, ctx: Context, model) -> None:
        """See ``Task.export``: ``export_dir`` (SavedModel) and ``export_hf_dir``.
        """
        s = ctx.settings
        if s.export_dir:
            from bert_tasks.exports import classifier as classifier_serving

            classifier_serving.ClassifierServingModule(
                model, s.vocab_file, s.do_lower_case, s.max_seq_length, self.label_list,
                self.regression).export_version(s.export_dir)
        if self.export_hf_dir:
            from bert_tasks.exports import hf as hf_export

            logging.info("exported %s", hf_export.export_hf_model(
                model, ctx.bert_config, self.export_hf_dir, s.vocab_file, s.do_lower_case,
                labels=self.label_list, regression=self.regression))
