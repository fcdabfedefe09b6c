"""What a fine-tuning task is to the one driver (``bert_tasks.driver.run``), and the settings
every task shares.

A task is a small class (Model Garden's ``Task``, flat): it reads its splits, builds its model
on the encoder, gives the training batches and the loss, evaluates, writes its prediction files
and exports. The driver does everything else, the same way for every task: checks, strategy and
precision, tokenizer, ``--output_dir``, seeding, restoring a checkpoint, the original's step
count and optimizer, training with resume, ``eval_results.txt`` and TensorBoard.

* ``Task``: the hooks a task fills in; ``build_model`` and ``train_dataset`` are required, the
  rest do nothing unless overridden.
* ``Context``: what a hook sees: the settings, the ``BertConfig``, and from the strategy on the
  strategy, the tokenizer and the path of a file in ``output_dir``.
* ``FinetuningSettings``: the settings every task shares, by the command-line flags' names and
  with their defaults (``bert_cli.finetuning`` defines the flags from these fields). The
  driver reads the settings by attribute, so a tool passes its absl flag values and Python code
  passes a ``FinetuningSettings`` (a subclass for a task's own settings).

The classifier, SQuAD, SWAG and NER tasks live beside their functions (``bert_tasks.classifier
.ClassifierTask``, ...); ``docs/your-own-task.md`` writes a new one.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, Optional, Tuple

from absl import logging


def _setting(default: Any, help_text: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass
class FinetuningSettings:
    """The settings every fine-tuning task shares: the fine-tuning tools' flags, same names and
    defaults (run_classifier's; a tool may change a default, e.g. run_squad's
    ``max_seq_length=384``).

    Example::

        settings = FinetuningSettings(bert_config_file="uncased_L-12_H-768_A-12/bert_config.json",
                                      vocab_file="uncased_L-12_H-768_A-12/vocab.txt",
                                      init_checkpoint="uncased_L-12_H-768_A-12/bert_model.ckpt",
                                      output_dir="out", do_train=True, do_eval=True)
    """

    # The model and the run's folder.
    bert_config_file: Optional[str] = _setting(
        None, "The config json file of the pre-trained BERT model.")
    vocab_file: Optional[str] = _setting(
        None, "The vocabulary file that the BERT model was trained on.")
    output_dir: Optional[str] = _setting(
        None, "The output directory where the model checkpoints, records and results will be "
        "written.")
    init_checkpoint: Optional[str] = _setting(
        None, "Initial checkpoint: TF1 prefix/folder, HF folder or .safetensors, .keras or "
        ".weights.h5.")
    do_lower_case: bool = _setting(True, "Whether to lower case the input text.")
    max_seq_length: int = _setting(
        128, "The maximum total input sequence length after WordPiece tokenization.")
    # What to do.
    do_train: bool = _setting(False, "Whether to run training.")
    do_eval: bool = _setting(False, "Whether to run eval on the dev set.")
    do_predict: bool = _setting(False, "Whether to run the model in inference mode on the "
                                       "test set.")
    export_dir: Optional[str] = _setting(
        None, "TF Serving model base path, e.g. models/task: writes the task's SavedModel as its "
        "next version <export_dir>/1, 2, ... (the folder may hold only version folders).")
    # The original's training settings.
    train_batch_size: int = _setting(32, "Total batch size for training.")
    eval_batch_size: int = _setting(8, "Total batch size for eval.")
    predict_batch_size: int = _setting(8, "Total batch size for predict.")
    learning_rate: float = _setting(5e-5, "The initial learning rate for Adam.")
    num_train_epochs: float = _setting(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = _setting(
        0.1, "Proportion of training to perform linear learning rate warmup for.")
    # This port's.
    length_aware_batching: bool = _setting(
        True, "Eval/predict: group examples of similar length and cut each batch to its longest "
        "example; train: cut each batch (same batches). Off on TPU (static shapes).")
    fast_tokenizer: bool = _setting(True, "Use FastFullTokenizer (same output as "
                                          "FullTokenizer).")
    random_seed: int = _setting(12345, "Seed of the shuffle, dropout and head init.")
    # Defined for every training tool by bert_cli.flags (kept equal to them: tested).
    strategy: str = "default"
    use_tpu: bool = False
    tpu_name: Optional[str] = None
    tpu_zone: Optional[str] = None
    gcp_project: Optional[str] = None
    master: Optional[str] = None
    num_tpu_cores: int = 0
    num_gpus: int = 0
    all_reduce_alg: str = "auto"
    coordinator_address: Optional[str] = None
    num_processes: Optional[int] = None
    process_id: Optional[int] = None
    initialization_timeout: int = 300
    mixed_precision: Optional[str] = None
    use_xla: bool = False
    xla_optimizer: bool = True
    xla_kernels: bool = True
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    keep_checkpoint_max: int = 5


def own_fields() -> Tuple[dataclasses.Field, ...]:
    """The ``FinetuningSettings`` fields that carry a flag help text (defined by
    ``bert_cli.finetuning``; the others are ``bert_cli.flags``' shared flags)."""
    return tuple(f for f in dataclasses.fields(FinetuningSettings) if "help" in f.metadata)


@dataclasses.dataclass
class Context:
    """What the driver hands a task's hooks.

    Attributes:
        settings: the run's settings (absl flag values or a ``FinetuningSettings``).
        bert_config: the ``BertConfig`` of ``settings.bert_config_file``.
        warn: says a warning in one line (the tools: ``<tool>: warning: ...`` on stderr).
        strategy: the ``tf.distribute.Strategy`` (set before ``prepare``; None on JAX).
        tokenizer: the tokenizer of ``vocab_file`` / ``do_lower_case`` (set before ``prepare``).
        tpu: whether ``strategy`` is a TPU strategy (static shapes, padded batches).
        writer: this process writes the run's results (predictions, metrics, exports): the
            one process of a run, or the chief (TensorFlow) / process 0 (JAX) of several.
            Every process computes them.
    """

    settings: Any
    bert_config: Any
    warn: Callable[[str], None] = logging.warning
    strategy: Any = None
    tokenizer: Any = None
    tpu: bool = False
    writer: bool = True

    def path(self, name: str) -> str:
        """A file of the run's folder.

        Args:
            name: the file's name.

        Returns:
            ``name`` in ``settings.output_dir``.
        """
        return os.path.join(self.settings.output_dir, name)

    @property
    def seq_length(self) -> Optional[int]:
        """The model's static sequence length: ``max_seq_length`` on TPU, else None (any)."""
        return self.settings.max_seq_length if self.tpu else None


def resolve_strategy(strategy: Any = None) -> Tuple[Any, bool]:
    """A prediction's strategy and whether it is a TPU one (static shapes, padded batches).

    Args:
        strategy: a ``tf.distribute.Strategy``, or None (TensorFlow's default).

    Returns:
        ``(strategy, tpu)``; on another Keras backend ``(strategy, False)``, without
        importing TensorFlow (which may not be installed there).
    """
    from modeling.training import backends

    return backends.current("predict").resolve_strategy(strategy)


class Task:
    """A fine-tuning task: the hooks that ``bert_tasks.driver.run`` calls, in this order.

    1. ``check(ctx)``: the task's own checks of the settings, before any file is read (raise
       ``bert_common.errors.FlagError`` naming the flag).
    2. ``read(ctx)``: read and check the input of every split the run needs; bad data fails
       here, before a model is built or a file written.
    3. ``prepare(ctx)``: with the tokenizer, work that can still fail before anything is written
       (e.g. NER's windows).
    4. ``build_model(ctx)``: the task model, built in the strategy's scope (static sequence
       length ``ctx.seq_length`` on TPU).
    5. ``train_dataset(ctx)``: with ``do_train``: writes its records and returns the training
       batches (``train_batch_size``, repeated) and the number of training examples (the step
       count is the original's ``int(examples / batch size * epochs)``). The loss is
       ``per_example_loss(outputs, batch)`` ([B] losses, or per-token losses with
       ``loss_weights`` naming the batch's weights).
    6. ``evaluate(ctx, model)``: with ``do_eval``: writes the task's evaluation files and
       returns the metrics for ``eval_results.txt`` (the driver adds ``global_step`` and
       writes them to TensorBoard), or None.
    7. ``predict(ctx, model)``: with ``do_predict``: writes the prediction files.
    8. ``export(ctx, model)``: always called last; exports what the settings ask for (e.g.
       ``export_dir``).

    ``actions`` names the settings that make a run do something ("At least one of ... must be
    set" names them); ``loss_weights`` is ``finetune``'s (None: the mean over examples).
    """

    actions: Tuple[str, ...] = ("do_train", "do_eval", "do_predict", "export_dir")
    loss_weights: Optional[str] = None

    def check(self, ctx: Context) -> None:
        """The task's own checks of ``ctx.settings`` (nothing by default).

        Args:
            ctx: the run's context.

        Raises:
            FlagError: naming the flag (the task's option) that cannot work.
        """

    def read(self, ctx: Context) -> None:
        """Reads the input of every split the run needs (nothing by default).

        Args:
            ctx: the run's context (``do_train``/``do_eval``/``do_predict`` say which splits).

        Raises:
            InputError: a bad file, naming it (and the line).
        """

    def prepare(self, ctx: Context) -> None:
        """Work with the tokenizer before anything is written (nothing by default).

        Args:
            ctx: the run's context, with ``strategy`` and ``tokenizer`` set.
        """

    def build_model(self, ctx: Context):
        """The task model, called in the strategy's scope.

        Args:
            ctx: the run's context (``bert_config``, ``seq_length``).

        Returns:
            A ``keras.Model`` (e.g. a ``modeling.heads`` model on a ``BertModel``) taking the
            batches' ``input_ids``/``input_mask``/``segment_ids`` [B, S].
        """
        raise NotImplementedError("%s.build_model" % type(self).__name__)

    def train_dataset(self, ctx: Context):
        """Writes the training records and returns the training input.

        Args:
            ctx: the run's context.

        Returns:
            ``(batches, num_examples)``: a ``tf.data.Dataset`` of global batches
            (``train_batch_size``, repeated) and the number of training examples.
        """
        raise NotImplementedError("%s.train_dataset" % type(self).__name__)

    def per_example_loss(self, outputs: Dict[str, Any], batch: Dict[str, Any]):
        """The loss of each example of a batch (traced in the train step).

        Args:
            outputs: the model's outputs on the batch.
            batch: the batch (its labels).

        Returns:
            float [B] (or per token [B, S], with ``loss_weights``).
        """
        raise NotImplementedError("%s.per_example_loss" % type(self).__name__)

    def evaluate(self, ctx: Context, model) -> Optional[Dict[str, float]]:
        """Evaluates ``model`` and writes the task's evaluation files.

        Args:
            ctx: the run's context.
            model: the task model.

        Returns:
            name -> value for ``eval_results.txt`` (None: no ``eval_results.txt``).
        """
        return None

    def predict(self, ctx: Context, model) -> None:
        """Writes the prediction files (nothing by default).

        Args:
            ctx: the run's context.
            model: the task model.
        """

    def export(self, ctx: Context, model) -> None:
        """Exports what the settings ask for (nothing by default).

        Args:
            ctx: the run's context.
            model: the task model.
        """
