"""The one fine-tuning driver: train, evaluate, predict and export any ``Task``.

``run(task, settings)`` is the original run_classifier/run_squad ``main`` written once, with the
original Estimator's conventions:

1. the settings checked (``bert_common.checks``: NaN, 0 or out-of-range values; at least one of
   the task's ``actions``; the task's own ``check``; ``max_seq_length`` within the model's
   positions; ``export_dir`` usable; the casing against a known Google checkpoint's name);
2. the task reads every split it needs (bad data fails before anything is written);
3. strategy and precision (``strategy``/``use_tpu``/TPU names, ``mixed_precision``), the
   tokenizer (its vocab must hold [UNK], [CLS] and [SEP]), the task's ``prepare``;
4. ``output_dir`` created and proved writable, every seed set from ``random_seed``;
5. the task model built in the strategy's scope, ``init_checkpoint`` loaded (without
   ``do_train`` and ``init_checkpoint``: the newest ``model.ckpt-<step>`` in ``output_dir``, as
   the Estimator's ``model_dir``);
6. ``do_train``: the original's step count and AdamWeightDecay schedule, then the one trainer
   (``modeling.training.finetuning.finetune``): checkpoints ``model.ckpt-<step>`` with the
   optimizer state and data position in ``output_dir`` (a rerun resumes), TensorBoard in
   ``output_dir/train``;
7. ``do_eval``: the task's metrics, with ``global_step``, into ``eval_results.txt`` and
   TensorBoard (``output_dir/eval``); ``do_predict``: the task's prediction files; then the
   task's exports.

Under ``KERAS_BACKEND=jax`` (docs/jax.md) the same run, with the same checks, input files and
records, task model, per-example loss, step count and schedule, metrics, prediction files and
HF export, trains on JAX (``_OnJax``: the backend is chosen once, as a value, ``backend_job``):

* the input is the task's own pipeline read as numpy batches: its ``tf.data`` pipeline where
  TensorFlow is installed (on the CPU: it is kept off the accelerators, which JAX uses), else
  the same rule in numpy (``data.glue.numpy_dataset``); each batch is padded to its length
  bucket (``backends.jax.predict.length_bucket``: one compiled step per bucket, exact for the
  task models);
* the step: ``backends.jax.steps.make_train_step`` with the objective of the TensorFlow path
  (``objectives.mean_loss_objective``); several devices train data-parallel
  (``keras.distribution.DataParallel``), those of several processes too
  (``--coordinator_address``, ``--num_processes``, ``--process_id``:
  ``backends.jax.cluster``): each reads the same batches and places its own rows, process 0
  alone writes the results, predictions and exports (``Context.writer``);
* the loop: the one training job (``modeling.training.job``: ``train_steps.jsonl``,
  TensorBoard, progress lines), with Orbax checkpoints ``output_dir/jax_checkpoints/<step>`` and the
  tf.data iterator's state beside each (the numpy input re-reads to its position instead),
  exact resume;
* evaluating or predicting without ``do_train`` and ``init_checkpoint`` reads the newest
  checkpoint of ``output_dir``;
* after training, ``exports.checkpoint.export_for_finetuning``: the TensorFlow tools take over from
  it as ``--init_checkpoint`` (a TF Serving export among them); the flags of TensorFlow's path
  only (``export_dir`` among them) stop the run before anything is written
  (``modeling.training.backends.jax.settings.check_settings``).

Bad input raises an ``InputError`` subclass whose message names the flag or file (the tools
print it as one line, exit status 1). The command-line tools (``bert_cli/run_*.py``) pass their
absl flag values as ``settings``; Python code passes a ``FinetuningSettings``.

``docs/your-own-task.md`` has a whole task of your own.

Example::

    from bert_common.results import read_eval_results
    from bert_tasks import driver
    from bert_tasks.classifier import ClassifierTask
    from bert_tasks.task import FinetuningSettings

    settings = FinetuningSettings(bert_config_file="uncased_L-12_H-768_A-12/bert_config.json",
                                  vocab_file="uncased_L-12_H-768_A-12/vocab.txt",
                                  init_checkpoint="uncased_L-12_H-768_A-12/bert_model.ckpt",
                                  output_dir="out", do_train=True, do_eval=True,
                                  num_train_epochs=1.0)
    driver.run(ClassifierTask("mrpc", data_dir="glue/MRPC"), settings)
    read_eval_results("out/eval_results.txt")  # {eval_accuracy, eval_f1, eval_loss, global_step}
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Optional, Sequence

from absl import logging

from bert_common import checks, files
from bert_common.errors import FlagError
from bert_tasks.task import Context, Task

# The special tokens every fine-tuning task's features use ([UNK]: load_vocab checks it).
FINETUNING_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


def run(task: Task, settings: Any, *, warn: Optional[Callable[[str], None]] = None) -> Context:
    """Runs ``task`` as ``settings`` say (see the module): train, evaluate, predict, export.

    Args:
        task: the task (``ClassifierTask``, ``SquadTask``, ``SwagTask``, ``NerTask`` or your
            own ``Task``).
        settings: absl flag values or a ``FinetuningSettings`` (a subclass with the task's own
            settings, if it reads them there).
        warn: how a warning is said (default: ``logging.warning``).

    Returns:
        The run's ``Context`` (settings, config, strategy, tokenizer).

    Raises:
        InputError: bad settings or input, naming the flag or the file.
    """
    from modeling.config import BertConfig

    on = backend_job()
    on.check(settings)
    logging.set_verbosity(logging.INFO)
    ctx = Context(settings=settings,
                  bert_config=BertConfig.from_json_file(settings.bert_config_file),
                  warn=warn or logging.warning)
    check_settings(task, ctx)
    task.read(ctx)
    on.prepare(ctx)
    ctx.tokenizer = tokenizer_from_settings(settings)  # a bad vocab: nothing written
    task.prepare(ctx)
    start_output_dir(settings)

    with ctx.strategy.scope() if ctx.strategy is not None else contextlib.nullcontext():
        model = task.build_model(ctx)
    global_step = on.restore(model, settings, task)
    if settings.do_train:
        dataset, num_examples = task.train_dataset(ctx)
        global_step = train(on, settings, model, dataset, task.per_example_loss, num_examples,
                            loss_weights=task.loss_weights)
    if getattr(settings, "do_eval", False):
        logging.info("***** Running evaluation *****")
        metrics = task.evaluate(ctx, model)
        if metrics is not None and ctx.writer:
            write_metrics(settings.output_dir, metrics, global_step)
    if settings.do_predict:
        logging.info("***** Running prediction *****")
        task.predict(ctx, model)
    if ctx.writer:
        task.export(ctx, model)
    return ctx


# ------------------------------------------------------------------------------------ checks


def check_settings(task: Task, ctx: Context) -> None:
    """The checks every task shares, then ``task.check``.

    Args:
        task: the task (its ``actions`` and ``check``).
        ctx: the run's context (settings and config).

    Raises:
        FlagError: naming the flag whose value cannot work.
    """
    from data.tokenization import wordpiece

    settings = ctx.settings
    checks.check_values(settings)  # NaN/negative rates, batch 0, ...: before any data is read
    checks.check_values(task)  # the task's own numbers by the same rules (e.g. doc_stride)
    if not any(getattr(settings, name, None) for name in task.actions):
        flags_only = all(name.startswith("do_") for name in task.actions)
        names = ["`%s`" % name for name in task.actions]
        listed = names[0] if len(names) == 1 else "%s or %s" % (", ".join(names[:-1]),
                                                                names[-1])
        raise FlagError("At least one of %s must be %s." % (listed,
                                                           "True" if flags_only else "set"))
    task.check(ctx)
    checks.check_seq_length(settings.max_seq_length, ctx.bert_config.max_position_embeddings)
    if getattr(settings, "export_dir", None):
        from bert_tasks.exports import saved_model

        saved_model.check_export_base(settings.export_dir, "--export_dir",
                                      {"--output_dir": settings.output_dir})
    try:
        wordpiece.validate_case_matches_checkpoint(settings.do_lower_case,
                                                   settings.init_checkpoint)
    except ValueError as e:
        raise FlagError(str(e)) from None


def _without_training(task: Task) -> str:
    """What a run without training does, for the message of a missing checkpoint:
    "evaluate, predict or export"."""
    words = [word for name, word in (("do_eval", "evaluate"), ("do_predict", "predict"),
                                     ("export_dir", "export")) if name in task.actions]
    if len(words) < 2:
        return words[0] if words else "run"
    return "%s or %s" % (", ".join(words[:-1]), words[-1])


# ------------------------------------------------------------------------------- the run's parts


def tokenizer_from_settings(settings: Any):
    """The tokenizer of ``vocab_file`` / ``do_lower_case`` (``FastFullTokenizer`` with
    ``fast_tokenizer``, else ``FullTokenizer``).

    Args:
        settings: the run's settings.

    Returns:
        The tokenizer.

    Raises:
        VocabError: naming the file and the token, when the vocab lacks one of
            ``FINETUNING_TOKENS``.
    """
    from data.tokenization import wordpiece

    tokenizer_class = (wordpiece.FastFullTokenizer if settings.fast_tokenizer
                       else wordpiece.FullTokenizer)
    tokenizer = tokenizer_class(vocab_file=settings.vocab_file,
                                do_lower_case=settings.do_lower_case)
    wordpiece.require_tokens(tokenizer, FINETUNING_TOKENS)
    return tokenizer


def start_output_dir(settings: Any) -> None:
    """``output_dir`` created and proved writable; python, numpy, TF and Keras (initializers,
    dropout) seeded with ``random_seed``.

    Args:
        settings: the run's settings.

    Raises:
        FlagError: ``output_dir`` is not writable.
    """
    import keras

    files.prepare_output_dir(settings.output_dir)
    keras.utils.set_random_seed(settings.random_seed)


def split_file(settings: Any, split: str, names: Sequence[str]) -> str:
    """The input file of ``split`` (train/eval/predict): ``<split>_file`` if set (it must
    exist), else the first of ``names`` found in ``data_dir``.

    Args:
        settings: anything with ``<split>_file`` and ``data_dir`` (a task, or the settings).
        split: ``train``, ``eval`` or ``predict``.
        names: the file names to look for in ``data_dir``, in order.

    Returns:
        The path.

    Raises:
        FlagError: naming the flag or the folder and what was expected.
    """
    explicit = getattr(settings, "%s_file" % split)
    if explicit:
        if not files.isfile(explicit):
            raise FlagError("--%s_file=%s: %s" % (split, explicit, "a folder, not a file"
                                                  if files.isdir(explicit) else "no such file"))
        return explicit
    data_dir = settings.data_dir
    if not data_dir:
        raise FlagError("--do_%s needs --%s_file or --data_dir" % (split, split))
    if not files.isdir(data_dir):
        raise FlagError("--data_dir=%s: no such directory" % data_dir)
    for name in names:
        path = os.path.join(data_dir, name)
        if files.isfile(path):
            return path
        if files.isdir(path):
            raise FlagError("--data_dir=%s: %s is a folder, not a file" % (data_dir, name))
    raise FlagError("--data_dir=%s has no %s split (expected %s)"
                    % (data_dir, split, " or ".join(names)))


def restore_checkpoint(model, settings: Any, without_training: str) -> Optional[str]:
    """Loads ``init_checkpoint`` into ``model`` (the load report is logged) and returns it.

    Without ``do_train`` and ``init_checkpoint`` the newest checkpoint in ``output_dir`` is
    loaded instead (as the original Estimator's ``model_dir``); if there is none, raises
    ``FlagError("--init_checkpoint is needed to <without_training> without --do_train (no
    checkpoint in --output_dir=<dir>)")``.

    Args:
        model: the task model.
        settings: the run's settings (``init_checkpoint``, ``do_train``, ``output_dir``).
        without_training: what the run does without training, for the message.

    Returns:
        The checkpoint loaded; None when nothing was loaded (training from the random
        initialisation).
    """
    from modeling import checkpoints

    init_checkpoint = settings.init_checkpoint
    if not settings.do_train and not init_checkpoint:
        # (TF1 checkpoints are TensorFlow's: without it, there is none to find.)
        init_checkpoint = checkpoints.tf1.latest_checkpoint(settings.output_dir)
        if init_checkpoint is None:
            raise FlagError("--init_checkpoint is needed to %s without --do_train (no checkpoint "
                            "in --output_dir=%s)" % (without_training, settings.output_dir))
        # Said, not silent: after an interrupted run the newest checkpoint is a partial one.
        logging.warning("no --init_checkpoint: using the newest checkpoint in --output_dir, %s "
                        "(step %d); if its training was interrupted, rerun with --do_train to "
                        "finish it first", init_checkpoint,
                        checkpoints.checkpoint_step(init_checkpoint))
    if init_checkpoint:
        logging.info("%s", checkpoints.load_checkpoint(model, init_checkpoint, log=False).summary())
    return init_checkpoint


def _restore_step(model, settings: Any, task: Task) -> int:
    """``restore_checkpoint`` (naming what ``task`` does without training); the step the
    values come from (0 when training)."""
    from modeling import checkpoints

    init_checkpoint = restore_checkpoint(model, settings, _without_training(task))
    return 0 if settings.do_train else checkpoints.checkpoint_step(init_checkpoint)


def count_train_steps(num_examples: int, settings: Any) -> int:
    """The original's ``int(num_examples / train_batch_size * num_train_epochs)``.

    Args:
        num_examples: the training examples.
        settings: the run's settings.

    Returns:
        The number of training steps.

    Raises:
        FlagError: naming both flags, when that is no step at all.
    """
    num_train_steps = int(num_examples / settings.train_batch_size
                          * settings.num_train_epochs)
    if num_train_steps <= 0:
        raise FlagError("%d training examples, --train_batch_size=%d and --num_train_epochs=%g "
                        "give no training step" % (num_examples, settings.train_batch_size,
                                                   settings.num_train_epochs))
    return num_train_steps


def train(on: Any, settings: Any, model, dataset, per_example_loss: Callable,
          num_examples: int, loss_weights: Optional[str] = None) -> int:
    """``do_train``: the original's step count and AdamWeightDecay schedule from the settings,
    then the one training job on the run's backend into ``output_dir`` (resuming from its
    newest checkpoint).

    Args:
        on: the run's backend (``_OnTensorFlow`` or ``_OnJax``).
        settings: the run's settings.
        model: the task model.
        dataset: the training batches (``train_batch_size``, repeated).
        per_example_loss: the task's loss, ``(outputs, batch) -> [B]`` (or per token).
        num_examples: training examples (the step count).
        loss_weights: the batch's weights of a per-token loss (NER: the mean over scored
            tokens), or None.

    Returns:
        The global step after training.
    """
    num_train_steps = count_train_steps(num_examples, settings)
    num_warmup_steps = int(num_train_steps * settings.warmup_proportion)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", num_examples)
    logging.info("  Batch size = %d", settings.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    return on.train(settings, model, dataset, per_example_loss, num_train_steps,
                    num_warmup_steps, loss_weights)


def write_metrics(output_dir: str, metrics: dict, global_step: int) -> None:
    """``metrics`` with ``global_step`` into ``output_dir/eval_results.txt`` (``key = value``,
    as the original) and as TensorBoard scalars in ``output_dir/eval``.

    Args:
        output_dir: the run's folder.
        metrics: name -> value.
        global_step: the step evaluated.
    """
    from bert_common.results import write_eval_results, write_eval_summaries

    metrics = dict(metrics, global_step=global_step)
    write_eval_results(os.path.join(output_dir, "eval_results.txt"), metrics)
    write_eval_summaries(output_dir, metrics, global_step)


# ------------------------------------------------------------------------------- the backends


def backend_job() -> Any:
    """The part of a job that differs by Keras backend, chosen once, as a value, for the
    fine-tuning tools (``run``) and pre-training (``bert_tasks.pretraining.pretrain``):
    ``_OnTensorFlow`` or ``_OnJax`` (any other Keras backend), by ``name``."""
    from modeling import backend

    return _OnTensorFlow() if backend.TENSORFLOW else _OnJax()


class _OnTensorFlow:
    """The run on TensorFlow: a ``tf.distribute`` strategy and its precision, TF1 checkpoints,
    ``finetuning.finetune`` (the one training job with TensorFlow's steps)."""

    name = "tensorflow"
    strategy = precision = None  # set by ``prepare``

    def check(self, settings: Any) -> None:
        """Nothing: every setting is TensorFlow's."""

    def prepare(self, ctx: Context) -> None:
        """The strategy (before any other TensorFlow op), the dtype policy, the XLA check
        (before anything is written)."""
        from modeling.training import strategies
        from modeling.training.backends.tensorflow import execution

        settings = ctx.settings
        ctx.strategy = self.strategy = strategies.strategy_from_settings(settings)
        self.precision = strategies.set_precision(settings.mixed_precision)
        ctx.tpu = strategies.is_tpu(ctx.strategy)
        execution.check_use_xla(ctx.strategy, settings.use_xla)

    def restore(self, model, settings: Any, task: Task) -> int:
        """``restore_checkpoint``; the step the values come from (0 when training)."""
        return _restore_step(model, settings, task)

    def train(self, settings: Any, model, dataset, per_example_loss: Callable,
              num_train_steps: int, num_warmup_steps: int,
              loss_weights: Optional[str]) -> int:
        """``finetune`` with the original's optimizer, in the strategy's scope."""
        from modeling.training import finetuning, optimizers, strategies

        strategy = self.strategy
        with strategy.scope():
            optimizer = optimizers.create_optimizer(
                settings.learning_rate, num_train_steps, num_warmup_steps,
                loss_scale=self.precision.loss_scale, use_tpu=strategies.is_tpu(strategy))
        result = finetuning.finetune(
            model, optimizer, dataset, per_example_loss, model_dir=settings.output_dir,
            num_train_steps=num_train_steps, strategy=strategy,
            steps_per_loop=settings.iterations_per_loop,
            save_checkpoints_steps=settings.save_checkpoints_steps,
            keep_checkpoint_max=settings.keep_checkpoint_max,
            use_xla=settings.use_xla, loss_weights=loss_weights,
            fuse_optimizer=settings.xla_optimizer, fused_kernels=settings.xla_kernels)
        return result.global_step


class _OnJax:
    """The run on Keras' JAX backend (see the module): the TensorFlow-only flags refused, the
    devices, Orbax checkpoints, the one training job with JAX's steps."""

    name = "jax"

    def check(self, settings: Any) -> None:
        """The flags of TensorFlow's path only, refused with one line."""
        from modeling.training.backends.jax.settings import check_settings as check_jax

        check_jax(settings)

    def prepare(self, ctx: Context) -> None:
        """TensorFlow, where installed, kept off the accelerators (it only feeds the input);
        the dtype policy (``--mixed_precision=bf16``); the cluster of several processes
        (``backends.jax.cluster``: process 0 writes the results); then Keras' data
        parallelism over every device; before the model is built. No ``tf.distribute`` strategy
        (``ctx.strategy`` stays None)."""
        import keras

        from modeling.training import inputs
        from modeling.training.backends.jax import cluster, steps

        settings = ctx.settings
        cluster.start(settings)  # before any other JAX call
        ctx.writer = cluster.is_writer()  # every process computes, process 0 writes
        with_tf = inputs.tensorflow_for_input() is not None  # tf.data feeds the input
        keras.config.set_dtype_policy("mixed_bfloat16" if settings.mixed_precision == "bf16"
                                      else "float32")
        logging.info("KERAS_BACKEND=jax: devices %s; input read with %s", steps.device_names(),
                     "tf.data" if with_tf else "numpy (no TensorFlow)")
        steps.distribute(settings.train_batch_size if settings.do_train else 0,
                         "--train_batch_size")

    def restore(self, model, settings: Any, task: Task) -> int:
        """Without ``do_train`` and ``init_checkpoint``: the newest checkpoint of
        ``output_dir`` if there is one; else ``restore_checkpoint``. The step the values come
        from (0 when training)."""
        from modeling.training.backends.jax import checkpoints as jax_checkpoints

        if not settings.do_train and not settings.init_checkpoint:
            found = jax_checkpoints.restore_newest_model(settings.output_dir, model)
            if found is not None:
                logging.warning("no --init_checkpoint: using the newest checkpoint in "
                                "--output_dir, %s (step %d)", found[0], found[1])
                return found[1]
        return _restore_step(model, settings, task)

    def train(self, settings: Any, model, dataset, per_example_loss: Callable,
              num_train_steps: int, num_warmup_steps: int,
              loss_weights: Optional[str]) -> int:
        """The original's AdamWeightDecay schedule, the one training job with JAX's steps into
        ``output_dir`` (resuming from its newest checkpoint), then the TF1 export.

        ``dataset``: a ``tf.data`` pipeline, or a ``data.glue.numpy_dataset.NumpyDataset``."""
        import keras

        import modeling
        from data.glue.numpy_dataset import NumpyDataset
        from bert_tasks.exports.checkpoint import export_for_finetuning
        from modeling.layers import embeddings
        from modeling.training import inputs, job, objectives
        from modeling.training.backends.jax import cluster, predict, steps

        optimizer = modeling.create_optimizer(settings.learning_rate, num_train_steps,
                                              num_warmup_steps)
        optimizer.build(model.trainable_variables)
        # The original clips by a norm that counts the word table's rows per occurrence (its
        # gradient is IndexedSlices): the same norm here (the TensorFlow trainer's rule).
        step_fn = steps.make_train_step(
            model, optimizer, objectives.mean_loss_objective(per_example_loss, loss_weights),
            occurrence_norm=embeddings.sparse_gradient_tables(model))
        longest = predict.max_positions(model) or settings.max_seq_length

        def pad(batch):
            seq = batch["input_ids"].shape[-1]
            return predict.pad_batch(batch, predict.length_bucket(seq, longest))

        if isinstance(dataset, NumpyDataset):  # a resumed run re-reads to its position
            data = inputs.ReReadInput(lambda records: map(pad, dataset.batches_after(records)))
        else:
            data = inputs.TFDataInput(dataset, pad)
        config = job.TrainerConfig(model_dir=settings.output_dir, num_train_steps=num_train_steps,
                                   steps_per_loop=settings.iterations_per_loop,
                                   save_checkpoints_steps=settings.save_checkpoints_steps,
                                   keep_checkpoint_max=settings.keep_checkpoint_max)
        step = job.train(
            steps.Steps(model, optimizer, step_fn, data, config,
                        batch_size=settings.train_batch_size,
                        distribution=keras.distribution.distribution()), config).global_step
        if cluster.is_writer():
            logging.info("exported %s (the TensorFlow tools' --init_checkpoint)",
                         export_for_finetuning(model, settings.output_dir,
                                               settings.bert_config_file, step))
        return step
