"""Masked LM / next sentence pre-training: the job of ``run_pretraining.py``.

``pretrain(settings)`` runs it as the original's flags say (``bert_cli/run_pretraining.py``
documents them): the settings and input files checked before any training, the strategy and
precision, the pre-training model and the original's optimizer (or LAMB) on the one trainer
(checkpoints with the data position: a rerun resumes), the export under Google's names for
fine-tuning, and the original's eval metrics. ``settings`` is read by attribute: a tool's absl
flag values, or any object with the same names.

With ``KERAS_BACKEND=jax`` (docs/jax.md) the same job runs on JAX, with the same flags, model,
losses, optimizer (``modeling.training.optimizers``), step log, eval metrics
(``modeling.training.pretraining_metrics``) and eval file, and without TensorFlow where it is
not installed:

* input: where TensorFlow is installed, the tf.data pipeline above read as numpy (the same
  batches), its iterator state saved beside each checkpoint; without TensorFlow the records read
  with numpy (``data.pretraining.numpy_input``);
* the step: ``modeling.training.backends.jax.steps.make_train_step`` with the TensorFlow
  path's ``PretrainingObjective`` (compiled, ``mixed_bfloat16`` with
  ``--mixed_precision=bf16``); several local devices (GPUs, TPU cores)
  train data-parallel (``keras.distribution.DataParallel``: the batch split over them, one
  update);
* the loop: the one training job (``modeling.training.job``: step log, progress, TensorBoard
  in ``output_dir/train``, checkpoint cadence), with Orbax checkpoints ``output_dir/jax_checkpoints/N``
  (``backends.jax.checkpoints``) every ``--save_checkpoints_steps`` and at the end, written
  atomically, holding every model and optimizer value (the dropout seeds among them), the step
  and the records read; the newest ``--keep_checkpoint_max`` are kept. A rerun resumes from the
  newest, exactly: it ends bit for bit where an uninterrupted one ends (CPU);
* the eval results in ``output_dir/eval`` (tensorboard's own event writer);
* the export: ``bert_tasks.exports.checkpoint.export_for_finetuning`` (``model.weights.h5``
  where TensorFlow is not installed).

Flags of the TensorFlow path only (``--strategy`` other than default, ``--use_tpu``,
``--num_cpu_devices``, ``--num_accumulation_steps`` > 1, fp16, ``clip_then_sum``) stop a JAX run
with one line naming the flag (``modeling.training.backends.jax.settings.check_settings``).
"""

from __future__ import annotations

import contextlib
from typing import Dict, Optional

from absl import logging

from bert_common import checks
from bert_common import files as fs
from bert_common.errors import FlagError, InputError


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise FlagError(message)


def check_settings(settings) -> None:
    """Checks that need no TensorFlow (run before the strategy is created).

    Args:
        settings: the run's settings (the tool's flag values).

    Raises:
        FlagError: a missing or bad flag.
    """
    _require(settings.do_train or settings.do_eval, "At least one of `do_train` or `do_eval` must be True.")
    _require(bool(settings.bert_config_file), "--bert_config_file is required")
    _require(bool(settings.input_file), "--input_file is required")
    _require(bool(settings.output_dir), "--output_dir is required")
    # Batch sizes, step counts, --learning_rate (NaN too), --max_seq_length, --num_train_steps
    # with --do_train: the checks every tool shares.
    checks.check_values(settings)
    _require(settings.max_predictions_per_seq <= settings.max_seq_length,
             "--max_predictions_per_seq=%d is larger than --max_seq_length=%d"
             % (settings.max_predictions_per_seq, settings.max_seq_length))
    if settings.init_checkpoint:
        path = settings.init_checkpoint
        exists = fs.exists(path) or fs.exists(path + ".index")
        _require(exists, "--init_checkpoint=%s: no such checkpoint" % path)




def load_init_checkpoint(model, path: str) -> None:
    """``--init_checkpoint`` into ``model`` (any format ``load_checkpoint`` reads);
    ``CheckpointError`` when no variable of the model is in it.

    Args:
        model: the pre-training model.
        path: the checkpoint.

    Raises:
        CheckpointError: no variable of the model is in it.
    """
    from modeling import checkpoints

    report = checkpoints.load_checkpoint(model, path, log=False)
    logging.info("%s", report.summary())
    if not report.loaded:
        raise checkpoints.CheckpointError("--init_checkpoint=%s: no BERT variable of the model "
                                          "found in it" % path)


def check_batches(settings, replicas: int) -> None:
    """Global batches that split evenly over replicas (and micro-batches).

    Args:
        settings: the run's settings (the tool's flag values).
        replicas: the strategy's replicas in sync.

    Raises:
        FlagError: a batch size that does not split evenly.
    """
    if settings.do_train:
        per_update = replicas * settings.num_accumulation_steps
        _require(settings.train_batch_size % per_update == 0,
                 "--train_batch_size=%d is not divisible by %d replicas x "
                 "--num_accumulation_steps=%d" % (settings.train_batch_size, replicas,
                                                  settings.num_accumulation_steps))
    if settings.do_eval:
        _require(settings.eval_batch_size % replicas == 0, "--eval_batch_size=%d is not divisible "
                 "by %d replicas" % (settings.eval_batch_size, replicas))


def build_trainer(settings, config, strategy, precision):
    """The model, the original's optimizer (or LAMB) and the trainer, from the flags.

    Args:
        settings: the run's settings (the tool's flag values).
        config: the ``BertConfig``.
        strategy: the ``tf.distribute.Strategy``.
        precision: the ``Precision`` set (``strategies.set_precision``).

    Returns:
        The ``trainer.Trainer``.
    """
    from modeling.heads.pretraining import BertPretrainingModel
    from modeling.training import optimizers, strategies
    from modeling.training import objectives as pretraining_objective
    from modeling.training.backends.tensorflow import steps as trainer

    reduction = settings.gradient_reduction
    if reduction == "auto":
        reduction = "clip_then_sum" if strategies.is_tpu(strategy) else "mean_then_clip"
    with strategy.scope():
        model = BertPretrainingModel(config, seq_length=settings.max_seq_length,
                                     max_predictions_per_seq=settings.max_predictions_per_seq)
        optimizer = optimizers.create_optimizer(
            settings.learning_rate, max(settings.num_train_steps, 1), settings.num_warmup_steps,
            optimizer=settings.optimizer, one_step_ahead=not settings.corrected_lr_schedule,
            gradient_reduction=reduction, loss_scale=precision.loss_scale)
    return trainer.Trainer(model, optimizer, pretraining_objective.PretrainingObjective(),
                           strategy, _job_config(settings))


def _job_config(settings):
    """The training job's settings from the flags (every backend; the step's own are read by
    TensorFlow's trainer only)."""
    from modeling.training import job

    return job.TrainerConfig(
        model_dir=settings.output_dir, num_train_steps=settings.num_train_steps,
        steps_per_loop=settings.iterations_per_loop,
        save_checkpoints_steps=settings.save_checkpoints_steps,
        num_accumulation_steps=settings.num_accumulation_steps,
        keep_checkpoint_max=settings.keep_checkpoint_max, use_xla=settings.use_xla,
        fuse_optimizer=settings.xla_optimizer and not settings.deterministic,
        fused_kernels=settings.xla_kernels and not settings.deterministic)


def evaluate(settings, model, files, strategy, global_step: int, chief: bool) -> Dict[str, float]:
    """``--max_eval_steps`` batches in file order: the original's metric_fn values, written to
    ``eval_results.txt`` and TensorBoard (``output_dir/eval``) by the chief.

    Args:
        settings: the run's settings (the tool's flag values).
        model: the pre-training model.
        files: the input record files.
        strategy: the ``tf.distribute.Strategy``.
        global_step: the step evaluated (logged and written).
        chief: this process writes the results.

    Returns:
        metric name -> float.
    """
    from data.pretraining import dataset as pd
    from modeling.training import evaluation, pretraining_metrics
    from modeling.training import objectives as pretraining_objective

    logging.info("***** Running evaluation *****  batch size %d, %d steps",
                 settings.eval_batch_size, settings.max_eval_steps)
    eval_data = pd.pretraining_dataset(files, settings.max_seq_length, settings.max_predictions_per_seq,
                                       settings.eval_batch_size, is_training=False)
    results = evaluation.evaluate(model, eval_data, pretraining_metrics.eval_metrics,
                                  settings.max_eval_steps, strategy,
                                  model_inputs=pretraining_objective.model_inputs)
    return _write_eval(settings, results, global_step, chief)


def pretrain(settings) -> Optional[Dict[str, float]]:
    """The whole pre-training job as ``settings`` say; returns the eval results (None without
    eval).

    Args:
        settings: the run's settings (the tool's flag values).

    Returns:
        The eval results (metric name -> float), or None.

    Raises:
        FlagError: a missing or bad flag.
    """
    from bert_tasks import driver

    if driver.backend_job().name != "tensorflow":  # KERAS_BACKEND=jax: docs/jax.md
        return _pretrain_on_jax(settings)
    config, strategy, precision = _setup(settings)  # the strategy before any other TF op
    import keras
    import tensorflow as tf

    from bert_tasks.exports.checkpoint import export_for_finetuning
    from data.pretraining import dataset as pd
    from data.pretraining import corpus_shards
    from modeling.training import strategies

    chief = strategies.is_chief(strategy)
    if chief:
        fs.prepare_output_dir(settings.output_dir)
    files = corpus_shards.input_files(settings.input_file)
    pd.check_input_files(files, settings.max_seq_length, settings.max_predictions_per_seq)
    check_batches(settings, strategy.num_replicas_in_sync)
    logging.info("%d input files; %d replicas; precision %s", len(files),
                 strategy.num_replicas_in_sync, precision.policy)
    keras.utils.set_random_seed(settings.random_seed)
    if settings.deterministic:  # the other --deterministic choices: build_trainer, the dataset
        tf.config.experimental.enable_op_determinism()  # for the rest of the process
    trainer = build_trainer(settings, config, strategy, precision)
    global_step = _restore(settings, trainer)
    if settings.do_train:
        logging.info("***** Running training *****  batch size %d, %d steps",
                     settings.train_batch_size, settings.num_train_steps)
        with _reading(settings, files):
            global_step = trainer.train(_training_data(settings, files)).global_step
        if chief:
            export_for_finetuning(trainer.model, settings.output_dir,
                                  settings.bert_config_file, global_step)
    if settings.do_eval:
        with _reading(settings, files):
            return evaluate(settings, trainer.model, files, strategy, global_step, chief)
    return None


def _setup(settings):
    """The flags checked, then (config, strategy, precision); the strategy before any other
    TensorFlow op (multi-worker and TPU set-up must come first)."""
    check_settings(settings)
    from modeling.config import BertConfig
    from modeling.training import strategies
    from modeling.training.backends.tensorflow import execution

    config = BertConfig.from_json_file(settings.bert_config_file)
    checks.check_seq_length(settings.max_seq_length, config.max_position_embeddings)
    precision = strategies.set_precision(settings.mixed_precision)
    if settings.num_cpu_devices > 1:
        strategies.split_cpu(settings.num_cpu_devices)
    strategy = strategies.strategy_from_settings(settings)
    execution.check_use_xla(strategy, settings.use_xla)  # before anything is written
    return config, strategy, precision


def _restore(settings, trainer) -> int:
    """The run's own newest checkpoint (the trainer resumes from it when training; loaded here
    for eval only), else ``--init_checkpoint``, else the random initialisation; the step."""
    from modeling import checkpoints

    own = trainer.latest_checkpoint()
    if own is None and settings.init_checkpoint:
        load_init_checkpoint(trainer.model, settings.init_checkpoint)  # a mismatch stops here
    elif own is None:
        logging.info("No --init_checkpoint: random initialisation (seed %d)", settings.random_seed)
    elif not settings.do_train:
        checkpoints.load_checkpoint(trainer.model, own)
        return checkpoints.checkpoint_step(own)
    return 0


def _training_data(settings, files):
    """The training input: a dataset with ``--deterministic``, else a function of the input
    context (per host: shuffled runs read only that host's files)."""
    from data.pretraining import dataset as pd

    def training_data(input_context=None):
        return pd.pretraining_dataset(
            files, settings.max_seq_length, settings.max_predictions_per_seq, settings.train_batch_size,
            is_training=True, deterministic=settings.deterministic, seed=settings.random_seed,
            input_context=input_context)

    return training_data() if settings.deterministic else training_data


@contextlib.contextmanager
def _reading(settings, files):
    """A record file damaged part-way, or one the sampled check did not read, stops the run
    with one line naming the file."""
    import tensorflow as tf

    from data.pretraining import dataset as pd

    try:
        yield
    except tf.errors.DataLossError as e:
        raise pd.damaged_record_error(files, e) from None
    except tf.errors.InvalidArgumentError as e:
        raise pd.find_bad_file(files, settings.max_seq_length, settings.max_predictions_per_seq,
                               e) from None


# ---------------------------------------------------------------------------- on JAX

def _pretrain_on_jax(settings) -> Optional[Dict[str, float]]:
    """The whole pre-training job on JAX (see the module docstring).

    Args:
        settings: the run's settings (``run_pretraining``'s flag values).

    Returns:
        The eval results, or None without ``--do_eval``.

    Raises:
        FlagError: a bad flag, or one of the TensorFlow path only.
        InputError: bad input files or a damaged checkpoint.
    """
    import keras

    import modeling
    from bert_tasks.exports.checkpoint import export_for_finetuning
    from data.pretraining import schema
    from modeling.training.backends.jax import checkpoints, cluster, steps
    from modeling.training.backends.jax.settings import check_settings as check_jax_settings

    check_settings(settings)
    check_jax_settings(settings)
    cluster.start(settings)  # before any other JAX call
    config = modeling.BertConfig.from_json_file(settings.bert_config_file)
    checks.check_seq_length(settings.max_seq_length, config.max_position_embeddings)
    from data.pretraining.corpus_shards import input_files

    paths = input_files(settings.input_file)
    from modeling.training import inputs

    with_tf = inputs.tensorflow_for_input() is not None  # tf.data reads the input (else numpy)
    if with_tf:
        # The TensorFlow path's check of the files' first records against the flags (one
        # rule; it reads them with TensorFlow). Without TensorFlow an empty input stops the
        # run when the stream finds no record.
        from data.pretraining import dataset as pd

        pd.check_input_files(paths, settings.max_seq_length, settings.max_predictions_per_seq)
    fs.prepare_output_dir(settings.output_dir)
    keras.utils.set_random_seed(settings.random_seed)
    if settings.mixed_precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    distribution = steps.distribute(
        settings.train_batch_size if settings.do_train else settings.eval_batch_size,
        "--train_batch_size" if settings.do_train else "--eval_batch_size")
    model = modeling.BertPretrainingModel(config, seq_length=settings.max_seq_length)
    optimizer = modeling.create_optimizer(
        settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps,
        optimizer=settings.optimizer, one_step_ahead=not settings.corrected_lr_schedule)
    optimizer.build(model.trainable_variables)
    logging.info("KERAS_BACKEND=jax: %d input files; devices %s; policy %s", len(paths),
                 steps.device_names(), keras.config.dtype_policy().name)
    own = checkpoints.checkpoints_in(settings.output_dir)
    if not own and settings.init_checkpoint:
        load_init_checkpoint(model, settings.init_checkpoint)
    step = 0
    if settings.do_train:
        step = _train_on_jax(settings, model, optimizer, paths, distribution, with_tf,
                             schema.FEATURE_NAMES)
        if cluster.is_writer():
            export_for_finetuning(model, settings.output_dir, settings.bert_config_file, step)
    elif own:
        step = checkpoints.restore_newest_model(settings.output_dir, model)[1]
    if settings.do_eval:
        return _evaluate_on_jax(settings, model, paths, step, distribution)
    return None


def _train_on_jax(settings, model, optimizer, paths, distribution, with_tf: bool,
                  names) -> int:
    from modeling.training import inputs, job, objectives
    from modeling.training.backends.jax import cluster, steps

    if with_tf:
        # The TensorFlow path's pipeline (parallel reading and parsing, the same batches) for
        # this process's devices only: its iterator state is checkpointed, so a resumed run
        # reads nothing twice.
        from data.pretraining import dataset as pd

        places, devices = cluster.device_places()
        data = inputs.TFDataInput(
            pd.device_rows_dataset(paths, settings.max_seq_length,
                                   settings.max_predictions_per_seq, settings.train_batch_size,
                                   places, devices, deterministic=settings.deterministic,
                                   seed=settings.random_seed),
            global_batch=settings.train_batch_size,
            share=cluster.input_share(settings.deterministic))
    else:
        from data.pretraining import numpy_input

        data = inputs.ReReadInput(lambda records: numpy_input.batches(
            paths, settings.train_batch_size, names, settings.deterministic,
            settings.random_seed, skip_records=records))
    config = _job_config(settings)
    return job.train(
        steps.Steps(model, optimizer,
                    steps.make_train_step(model, optimizer, objectives.PretrainingObjective()),
                    data, config, batch_size=settings.train_batch_size,
                    distribution=distribution), config).global_step


def _evaluate_on_jax(settings, model, paths, step: int, distribution) -> Dict[str, float]:
    """``--max_eval_steps`` batches in file order through the compiled forward: the original's
    metrics (``_write_eval``)."""
    import jax

    from data.records import numpy_reader
    from data.pretraining import schema
    from modeling.training import job, pretraining_metrics
    from modeling.training.backends.jax import cluster
    from modeling.training.backends.jax.steps import shard

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    # The values as arguments: closed over, they would be constants of the program (a slow
    # compile of its own per run, never found in a compilation cache).
    @jax.jit
    def metrics(trainable, non_trainable, batch):
        outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
        return pretraining_metrics.eval_metrics(outputs, batch)

    logging.info("***** Running evaluation on JAX *****  batch size %d, %d steps",
                 settings.eval_batch_size, settings.max_eval_steps)
    batches = (jax.device_get(metrics(trainable, non_trainable, shard(batch, distribution)))
               for batch in numpy_reader.batches(paths, settings.eval_batch_size,
                                                  schema.FEATURE_NAMES))
    return _write_eval(settings, job.streaming_means(batches, settings.max_eval_steps), step,
                       chief=cluster.is_writer())


def _write_eval(settings, means: Dict[str, float], global_step: int,
                chief: bool) -> Dict[str, float]:
    """The original's eval keys of ``means`` with ``global_step``, written to
    ``eval_results.txt`` and TensorBoard (``output_dir/eval``) by the chief (every backend).

    Raises:
        InputError: no eval batch at all.
    """
    from bert_tasks import driver
    from modeling.training import pretraining_metrics

    if not means:
        raise InputError("--input_file: fewer records than one --eval_batch_size=%d batch"
                         % settings.eval_batch_size)
    results = {key: means[key] for key in pretraining_metrics.EVAL_KEYS}
    results["global_step"] = global_step
    if chief:
        driver.write_metrics(settings.output_dir, results, global_step)
    return results
