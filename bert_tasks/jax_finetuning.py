"""The fine-tuning tools on Keras' JAX backend: ``bert_tasks.driver.run`` under
``KERAS_BACKEND=jax`` (run_classifier, run_squad, run_swag, run_ner; docs/jax.md).

The driver runs every task the same way on both backends: the same checks, input files and
records, task model, per-example loss, the original's step count and AdamWeightDecay schedule,
metrics, prediction files and HF export. On JAX:

* the input is the task's own pipeline read as numpy batches: its ``tf.data`` pipeline where
  TensorFlow is installed (on the CPU: it is kept off the accelerators, which JAX uses), else
  the same rule in numpy (``data.glue.numpy_dataset``: the records written and read without
  TensorFlow); each batch is padded to its length bucket (``jax_training.length_bucket``: one
  compiled step per bucket, exact for the task models);
* the step: ``jax_training.make_train_step`` with the objective of the TensorFlow path
  (``jax_training.mean_loss``: the mean over examples, or over weighted tokens for NER);
  several local devices train data-parallel (``keras.distribution.DataParallel``);
* the job: ``modeling.training.jax_trainer.train``: ``output_dir/jax-ckpt-<step>.npz``
  checkpoints (atomic; weights, optimizer, dropout seeds, step) with the tf.data iterator's
  state beside each (the numpy input re-reads to its position instead), exact resume,
  ``train_steps.jsonl``, TensorBoard in ``output_dir/train``, progress lines;
* evaluating or predicting without ``--do_train`` and ``--init_checkpoint`` reads the newest
  ``jax-ckpt-<step>.npz`` of ``output_dir``;
* after training, ``output_dir/export/bert_model.ckpt`` (Google's TF1 names, the task head
  included; ``model.weights.h5`` where TensorFlow is not installed) and ``bert_config.json``:
  the TensorFlow tools take over from either as ``--init_checkpoint``, e.g. a TF Serving export
  with ``--init_checkpoint=<output_dir>/export/bert_model.ckpt --export_dir=...``
  (``--export_dir`` itself is TensorFlow's: refused here with one line).

Flags of the TensorFlow path only (``--strategy`` other than default, ``--use_tpu``,
``--mixed_precision=fp16``, ``--export_dir``) stop the run before anything is written
(``modeling.training.backends.jax.check_settings``, the table every tool uses).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from absl import logging


def prepare(settings: Any):
    """TensorFlow, where installed, kept off the accelerators (it only feeds the input); the
    dtype policy (``--mixed_precision=bf16``); then Keras' data parallelism over the local
    devices; before the model is built.

    Args:
        settings: the run's settings.

    Returns:
        ``jax_trainer.distribute``'s result.
    """
    import keras

    from modeling import backend
    from modeling.training import jax_trainer

    if backend.tensorflow_installed():
        import tensorflow as tf

        for kind in ("GPU", "TPU"):
            try:
                tf.config.set_visible_devices([], kind)
            except (RuntimeError, ValueError):  # initialised already, or no such device type
                pass
    keras.config.set_dtype_policy("mixed_bfloat16" if settings.mixed_precision == "bf16"
                                  else "float32")
    logging.info("KERAS_BACKEND=jax: devices %s; input read with %s", jax_trainer.device_names(),
                 "tf.data" if backend.tensorflow_installed() else "numpy (no TensorFlow)")
    batch = settings.train_batch_size if settings.do_train else 0
    return jax_trainer.distribute(batch, "--train_batch_size")


def restore_newest(settings: Any, model) -> Optional[int]:
    """Without ``--do_train`` and ``--init_checkpoint``: the newest ``jax-ckpt-<step>.npz`` of
    ``output_dir`` into ``model``.

    Args:
        settings: the run's settings.
        model: the task model.

    Returns:
        The checkpoint's step, or None when ``output_dir`` has none.
    """
    from modeling.training import jax_trainer

    found = jax_trainer.restore_newest_model(settings.output_dir, model)
    if found is None:
        return None
    logging.warning("no --init_checkpoint: using the newest checkpoint in --output_dir, %s "
                    "(step %d)", found[0], found[1])
    return found[1]


def train(settings: Any, model, dataset, per_example_loss: Callable, num_train_steps: int,
          num_warmup_steps: int, loss_weights: Optional[str] = None) -> int:
    """``do_train`` on JAX: the original's AdamWeightDecay schedule, then
    ``jax_trainer.train`` into ``output_dir`` (resuming from its newest checkpoint), then the
    TF1 export.

    Args:
        settings: the run's settings.
        model: the task model.
        dataset: the task's training batches (``train_batch_size``, repeated): a ``tf.data``
            pipeline, or a ``data.glue.numpy_dataset.NumpyDataset``.
        per_example_loss: the task's loss, ``(outputs, batch) -> [B]`` (or per token).
        num_train_steps: the steps to train to.
        num_warmup_steps: the warmup steps.
        loss_weights: the batch's weights of a per-token loss, or None.

    Returns:
        The global step after training.
    """
    import keras

    import modeling
    from bert_tasks.pretraining import export_for_finetuning
    from data.glue.numpy_dataset import NumpyDataset
    from modeling.training import finetuning, jax_trainer, jax_training

    optimizer = modeling.create_optimizer(settings.learning_rate, num_train_steps,
                                          num_warmup_steps)
    optimizer.build(model.trainable_variables)
    from modeling.layers import embeddings

    # The original clips by a norm that counts the word table's rows per occurrence (its
    # gradient is IndexedSlices): the same norm here (the TensorFlow trainer's rule).
    step_fn = jax_training.make_train_step(
        model, optimizer, loss=jax_training.mean_loss(per_example_loss, loss_weights),
        input_names=finetuning.MODEL_INPUT_NAMES,
        occurrence_norm=embeddings.sparse_gradient_tables(model))
    batch_size = settings.train_batch_size
    longest = jax_training.max_positions(model) or settings.max_seq_length

    def pad(batch):
        seq = batch["input_ids"].shape[-1]
        return jax_training.pad_batch(batch, jax_training.length_bucket(seq, longest))

    if isinstance(dataset, NumpyDataset):  # a resumed run re-reads to its position
        data = jax_trainer.ReReadInput(lambda records: map(pad, dataset.batches_after(records)))
    else:
        data = jax_trainer.TFDataInput(dataset, pad)
    step = jax_trainer.train(
        model, optimizer, step_fn, data,
        output_dir=settings.output_dir,
        num_train_steps=num_train_steps, batch_size=batch_size,
        steps_per_loop=settings.iterations_per_loop,
        save_checkpoints_steps=settings.save_checkpoints_steps,
        keep_checkpoint_max=settings.keep_checkpoint_max,
        distribution=keras.distribution.distribution())
    logging.info("exported %s (the TensorFlow tools' --init_checkpoint)",
                 export_for_finetuning(model, settings, step))
    return step


__all__ = ["check_settings", "prepare", "restore_newest", "train"]
