"""Pre-training on Keras' JAX backend: ``run_pretraining.py`` under ``KERAS_BACKEND=jax``.

``pretrain_on_jax(settings)`` runs the job of ``bert_tasks.pretraining.pretrain`` with the same
flags, model, losses, optimizer rules (``modeling.training.update_rules``), step log, eval
metrics (``modeling.training.pretraining_metrics``) and eval file, without TensorFlow:

* input: where TensorFlow is installed, the TensorFlow path's tf.data pipeline
  (``data.pretraining.dataset.pretraining_dataset``: the same batches, parallel reading and
  parsing) read as numpy, its iterator state saved beside each checkpoint; without TensorFlow
  the records read with numpy (``data.numpy_records``), repeated, in file order with
  ``--deterministic``, else the files and a 10,000-record buffer shuffled per epoch from
  ``--random_seed``;
* the step: ``modeling.training.jax_training.make_train_step`` (compiled, ``mixed_bfloat16``
  with ``--mixed_precision=bf16``); several local devices (GPUs, TPU cores) train data-parallel
  (``keras.distribution.DataParallel``: the batch split over them, one update);
* the job (``modeling.training.jax_trainer``, shared with the fine-tuning tools): checkpoints
  every ``--save_checkpoints_steps`` and at the end, ``output_dir/jax-ckpt-N.npz``, written
  atomically, holding every model and optimizer value (the dropout seeds among them),
  the step and the records read; the newest ``--keep_checkpoint_max`` are kept. A rerun resumes
  from the newest: the values, the step log cut at its step, the tf.data iterator restored (the
  numpy input re-read up to its position). Resume is exact: the run ends bit for bit where an
  uninterrupted one ends (CPU);
* TensorBoard scalars in ``output_dir/train`` (loss, learning rate, global norm, the head
  losses; tensorboard's own event writer) and the eval results in ``output_dir/eval``;
* the export: ``output_dir/export/bert_model.ckpt`` (Google's names) where TensorFlow is
  installed, else ``export/model.weights.h5``; ``bert_config.json`` beside it.

Flags of the TensorFlow path only (``--strategy`` other than default, ``--use_tpu``,
``--num_cpu_devices``, ``--num_accumulation_steps`` > 1, fp16, ``clip_then_sum``) stop the run
with one line naming the flag (``modeling.training.backends.jax.check_settings``, the table
every tool uses).
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional

import numpy as np
from absl import logging

from bert_common import atomic
from bert_common import files as fs
from bert_common.errors import FlagError, InputError
from modeling import backend

SHUFFLE_BUFFER = 10000


# ------------------------------------------------------------------------------------ input

def _record_stream(paths: List[str], names, deterministic: bool, seed: int
                   ) -> Iterator[Dict[str, np.ndarray]]:
    """Every record's features, epoch after epoch (see the module docstring)."""
    from data import numpy_records

    epoch = 0
    while True:
        read = 0
        rng = np.random.default_rng([seed, epoch])
        order = list(paths) if deterministic else [paths[i] for i in rng.permutation(len(paths))]
        buffer: List[Dict[str, np.ndarray]] = []
        for path in order:
            for features in numpy_records.examples(path):
                read += 1
                try:
                    row = {n: features[n] for n in names}
                except KeyError as e:
                    raise InputError("%s: a record has no feature %s" % (path, e)) from None
                if deterministic:
                    yield row
                    continue
                buffer.append(row)
                if len(buffer) >= SHUFFLE_BUFFER:
                    yield buffer.pop(int(rng.integers(len(buffer))))
        while buffer:
            yield buffer.pop(int(rng.integers(len(buffer))))
        if not read:  # else the repeat would spin for ever
            raise InputError("--input_file: %s hold no records" % ", ".join(paths))
        epoch += 1


def batches(paths: List[str], batch_size: int, names, deterministic: bool, seed: int,
            skip_records: int = 0) -> Iterator[Dict[str, np.ndarray]]:
    """Training batches from the record stream, after ``skip_records`` records (a resumed
    run's position: the stream is re-read up to it, so the batches are the ones an
    uninterrupted run reads next).

    Args:
        paths: the input files.
        batch_size: B.
        names: the features.
        deterministic: file order, no shuffling.
        seed: the shuffles' seed.
        skip_records: records already trained on.
    """
    stream = _record_stream(paths, names, deterministic, seed)
    for _ in range(skip_records):
        next(stream)
    from data import numpy_records

    while True:
        yield numpy_records.stack_rows([next(stream) for _ in range(batch_size)])


# ------------------------------------------------------------------------------------ job

def pretrain_on_jax(settings) -> Optional[Dict[str, float]]:
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
    from bert_tasks.pretraining import check_settings, load_init_checkpoint
    from data.pretraining import schema
    from modeling.training import jax_trainer
    from modeling.training.backends import jax as jax_backend

    check_settings(settings)
    jax_backend.check_settings(settings)
    config = modeling.BertConfig.from_json_file(settings.bert_config_file)
    if settings.max_seq_length > config.max_position_embeddings:
        raise FlagError("Cannot use sequence length %d because the BERT model was only trained "
                        "up to sequence length %d" % (settings.max_seq_length,
                                                      config.max_position_embeddings))
    from data.pretraining.sharded import input_files

    paths = input_files(settings.input_file)
    if backend.tensorflow_installed():
        # The TensorFlow path's check of the files' first records against the flags (one
        # rule; it reads them with TensorFlow). Without TensorFlow an empty input stops the
        # run when the stream finds no record.
        from data.pretraining import dataset as pd

        pd.check_input_files(paths, settings.max_seq_length, settings.max_predictions_per_seq)
    fs.prepare_output_dir(settings.output_dir)
    keras.utils.set_random_seed(settings.random_seed)
    if settings.mixed_precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    distribution = jax_trainer.distribute(
        settings.train_batch_size if settings.do_train else settings.eval_batch_size,
        "--train_batch_size" if settings.do_train else "--eval_batch_size")
    model = modeling.BertPretrainingModel(config, seq_length=settings.max_seq_length)
    optimizer = modeling.create_optimizer(
        settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps,
        optimizer=settings.optimizer, one_step_ahead=not settings.corrected_lr_schedule)
    optimizer.build(model.trainable_variables)
    logging.info("KERAS_BACKEND=jax: %d input files; devices %s; policy %s", len(paths),
                 jax_trainer.device_names(), keras.config.dtype_policy().name)
    own = jax_trainer.checkpoints_in(settings.output_dir)
    if not own and settings.init_checkpoint:
        load_init_checkpoint(model, settings.init_checkpoint)
    step = 0
    if settings.do_train:
        step = _train(settings, model, optimizer, paths, distribution, schema.FEATURE_NAMES)
        export(model, settings, step)
    elif own:
        step = jax_trainer.restore_newest_model(settings.output_dir, model)[1]
    if settings.do_eval:
        return evaluate(settings, model, paths, step, distribution)
    return None


def _train(settings, model, optimizer, paths, distribution, names) -> int:
    from modeling.training import jax_trainer, jax_training

    if backend.tensorflow_installed():
        # The TensorFlow path's pipeline (parallel reading and parsing, the same batches):
        # its iterator state is checkpointed, so a resumed run reads nothing twice.
        from data.pretraining import dataset as pd

        data = jax_trainer.TFDataInput(pd.pretraining_dataset(
            paths, settings.max_seq_length, settings.max_predictions_per_seq,
            settings.train_batch_size, is_training=True, deterministic=settings.deterministic,
            seed=settings.random_seed))
    else:
        data = jax_trainer.ReReadInput(lambda records: batches(
            paths, settings.train_batch_size, names, settings.deterministic,
            settings.random_seed, skip_records=records))
    return jax_trainer.train(
        model, optimizer, jax_training.make_train_step(model, optimizer), data,
        output_dir=settings.output_dir, num_train_steps=settings.num_train_steps,
        batch_size=settings.train_batch_size, steps_per_loop=settings.iterations_per_loop,
        save_checkpoints_steps=settings.save_checkpoints_steps,
        keep_checkpoint_max=settings.keep_checkpoint_max, distribution=distribution)


def export(model, settings, step: int) -> str:
    """``export/bert_model.ckpt`` (TF1 names) where TensorFlow is installed, else
    ``export/model.weights.h5``; ``bert_config.json`` beside it. Returns the path written."""
    folder = os.path.join(settings.output_dir, "export")
    fs.makedirs(folder)
    if backend.tensorflow_installed():
        from bert_tasks.pretraining import export_for_finetuning

        return export_for_finetuning(model, settings, step)
    path = os.path.join(folder, "model.weights.h5")
    # A staged path with the final name (Keras wants the suffix), renamed in when complete; a
    # killed run's staging folder is removed by the next run that writes here.
    with atomic.atomic_path(path) as temp:
        model.save_weights(temp)
    with atomic.atomic_open(os.path.join(folder, "bert_config.json")) as f:
        f.write(fs.read_text(settings.bert_config_file))
    logging.info("Exported %s (TensorFlow is not installed: the TensorFlow tools load it as "
                 "--init_checkpoint of the same model)", path)
    return path


def evaluate(settings, model, paths, step: int, distribution) -> Dict[str, float]:
    """``--max_eval_steps`` batches in file order: the original's metrics, written to
    ``eval_results.txt`` and TensorBoard (``output_dir/eval``)."""
    import jax

    from bert_common.results import summary_scalars, write_eval_results
    from bert_tasks.pretraining import EVAL_RESULTS
    from data import numpy_records
    from data.pretraining import schema
    from modeling.training import jax_trainer, pretraining_metrics

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    # The values as arguments: closed over, they would be constants of the program (a slow
    # compile of its own per run, never found in a compilation cache).
    @jax.jit
    def metrics(trainable, non_trainable, batch):
        outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
        return pretraining_metrics.eval_metrics(outputs, batch)

    sums: Dict[str, List[float]] = {}
    logging.info("***** Running evaluation on JAX *****  batch size %d, %d steps",
                 settings.eval_batch_size, settings.max_eval_steps)
    for index, batch in enumerate(numpy_records.batches(paths, settings.eval_batch_size,
                                                        schema.FEATURE_NAMES)):
        if index >= settings.max_eval_steps:
            break
        values = jax.device_get(metrics(trainable, non_trainable,
                                        jax_trainer.shard(batch, distribution)))
        for name, (num, den) in values.items():
            total = sums.setdefault(name, [0.0, 0.0])
            total[0] += float(num)
            total[1] += float(den)
    if not sums:
        raise InputError("--input_file: fewer records than one --eval_batch_size=%d batch"
                         % settings.eval_batch_size)
    results = {k: sums[k][0] / sums[k][1] if sums[k][1] else 0.0
               for k in pretraining_metrics.EVAL_KEYS}
    results["global_step"] = step
    write_eval_results(os.path.join(settings.output_dir, EVAL_RESULTS), results)
    writer = jax_trainer.ScalarWriter(os.path.join(settings.output_dir, "eval"))
    writer.write(step, summary_scalars(results))
    writer.close()
    return results


__all__ = ["pretrain_on_jax"]
