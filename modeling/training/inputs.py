"""The training input behind one contract, on every backend: ``open(checkpoint, records)`` (the
batches from the position of the checkpoint resumed from), ``save(checkpoint)`` (its state with
a checkpoint being written; a JAX state goes with its checkpoint:
``backends.jax.checkpoints.remove_orphan_input_states``); on JAX, optionally ``local`` (the
batches are this process's rows of each global batch) and ``share`` (the name of this
process's own input state), both false by default.

* ``ReReadInput`` (JAX): numpy batches (no TensorFlow); the position is the checkpoint's record
  count, re-read on resume.
* ``TFDataInput`` (JAX): a ``tf.data`` pipeline read as numpy batches; its iterator state
  (shuffle buffers included) is saved beside each checkpoint: nothing is re-read.
* ``backends.tensorflow.steps.IteratorInput`` (TensorFlow): each host's ``tf.data`` iterator
  over its replicas' batches, its state inside ``model.ckpt-N`` (one host) or beside it (one per
  worker); on a TPU the batches consumed are skipped.

Which of the first two a JAX job uses is one rule, ``tensorflow_for_input``: ``tf.data`` where
TensorFlow is installed (kept off the accelerators, which are JAX's), else numpy.

Example::

    data = ReReadInput(lambda records: my_batches(skip=records))
    batches = data.open(None, 0)
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

from bert_common import files as fs
from bert_common.errors import InputError
from bert_common.installed import tensorflow_installed


def tensorflow_for_input():
    """TensorFlow, where it is installed, to read a JAX job's input with ``tf.data``
    (``TFDataInput``: its iterator state is checkpointed, so a resumed run reads nothing
    twice), with the GPUs and TPUs hidden from it: they are JAX's, and TensorFlow would take
    their memory as its runtime starts. None where it is not installed (``ReReadInput`` and the
    numpy readers). The one rule of every JAX job, pre-training and fine-tuning; call it before
    TensorFlow runs an op.

    Returns:
        The ``tensorflow`` module, or None.
    """
    if not tensorflow_installed():
        return None
    import tensorflow as tf
    from absl import logging

    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except ValueError:  # no such device type
            pass
        except RuntimeError as e:  # TensorFlow's runtime started already
            if tf.config.list_physical_devices(kind):
                logging.warning("TensorFlow started before the input was set up: its %ss stay "
                                "visible to it beside JAX (%s)", kind, e)
    return tf


class ReReadInput:
    """Training input that a resumed run re-reads up to its position (numpy, no TensorFlow).

    Args:
        batches_after: ``records -> iterator`` of numpy batches after the first ``records``
            examples of the input.

    Attributes:
        local: False: each batch is the global batch (every process of a run reads the same
            stream and keeps its rows).
        share: "": one position for the run (process 0 saves nothing more).
    """

    local = False
    share = ""

    def __init__(self, batches_after: Callable[[int], Iterator]):
        self._batches_after = batches_after

    def open(self, checkpoint: Optional[str], records: int) -> Iterator:
        """The batches from the position ``records`` (``checkpoint``: unused).

        Args:
            checkpoint: the checkpoint resumed from, or None.
            records: the examples read before it.
        """
        return self._batches_after(records)

    def save(self, checkpoint: str) -> None:
        """Nothing: the position is the checkpoint's record count.

        Args:
            checkpoint: the checkpoint being written.
        """



class TFDataInput:
    """Training input from a ``tf.data`` pipeline (where TensorFlow is installed), read as numpy
    batches; its iterator state (shuffle buffers included) is saved beside each checkpoint
    (``jax_input/<step>.*``, a ``tf.train.Checkpoint``) and restored on resume, as the
    TensorFlow trainer does: nothing is re-read. A checkpoint without it (written by
    ``ReReadInput``) is resumed by skipping the batches read.

    Args:
        dataset: the repeated training batches: global batches, or with ``share`` this
            process's part of each (e.g. ``data.pretraining.dataset.device_rows_dataset``).
        transform: applied to each numpy batch (e.g. ``backends.jax.predict.pad_batch``), or None.
        global_batch: the records of the global batch a step reads (default: the dataset's
            static batch size).
        share: names this process's part of the input where it reads its own (its state is
            saved as ``<step>.<share>.*``, each process its own), or "" (the global batches,
            one state for the run).

    Attributes:
        local: the batches are this process's rows of the global batch (a ``share`` of it
            smaller than ``global_batch``).
    """

    def __init__(self, dataset, transform: Optional[Callable] = None, *,
                 global_batch: Optional[int] = None, share: str = ""):
        self.dataset = dataset
        self.transform = transform
        self.share = share
        self._iterator = None
        spec = dataset.element_spec[next(iter(dataset.element_spec))]
        rows = int(spec.shape[0] or 0)
        self.global_batch = global_batch or rows
        self.local = bool(share) and 0 < rows < self.global_batch

    def state_prefix(self, checkpoint: str) -> str:
        """The iterator state's checkpoint prefix beside ``checkpoint``
        (``backends.jax.checkpoints.input_state_prefix``, then ``.<share>``)."""
        from modeling.training.backends.jax.checkpoints import input_state_prefix

        prefix = input_state_prefix(checkpoint)
        return "%s.%s" % (prefix, self.share) if self.share else prefix

    def open(self, checkpoint: Optional[str], records: int) -> Iterator:
        """The batches from the checkpoint's position.

        Args:
            checkpoint: the checkpoint resumed from, or None (from the start).
            records: the examples read before it.
        """
        import tensorflow as tf

        dataset = self.dataset
        prefix = self.state_prefix(checkpoint) if checkpoint else None
        restore = prefix is not None and fs.exists(prefix + ".index")
        if checkpoint and not restore and records:
            if not self.global_batch:
                raise InputError("%s: no input state beside it, and the batches have no static "
                                 "size to skip by" % checkpoint)
            dataset = dataset.skip(records // self.global_batch)  # one element per step
        self._iterator = iter(dataset)
        if restore:
            tf.train.Checkpoint(input=self._iterator).read(prefix).assert_consumed()
        return self._batches()

    def _batches(self):
        for batch in self._iterator:
            values = {name: value.numpy() for name, value in batch.items()}
            yield self.transform(values) if self.transform else values

    def save(self, checkpoint: str) -> None:
        """The iterator's state beside ``checkpoint`` (before it is written).

        Args:
            checkpoint: the checkpoint being written.
        """
        import tensorflow as tf

        tf.train.Checkpoint(input=self._iterator).write(self.state_prefix(checkpoint))
