"""The fine-tuning input without TensorFlow: ``data.glue.dataset.make_dataset``'s batches, read
with numpy (``KERAS_BACKEND=jax`` where TensorFlow is not installed; ``make_dataset`` returns
a ``NumpyDataset`` then).

The same rule as the ``tf.data`` pipeline, step by step, on the records' declarative spec
(``data.records.tf_example.FixedLen``; each task's ``record_spec``):

* records read and checked by ``data.records.numpy_reader`` (CRCs, named offsets), decoded by
  ``data.records.tf_example.decode_numpy`` (int32 / float32 in the spec's shapes);
* training: the files repeated, shuffled with a buffer of ``shuffle_buffer`` records (the
  algorithm of ``tf.data``'s shuffle, with numpy's generator: the same kind of order, not the
  same order), batched (full batches with ``drop_remainder``), trimmed;
* eval/predict: every record once with its ``example_index``; with ``sort_by_length``, windows
  of ``SORT_WINDOW_BATCHES`` batches (``data.glue.features``) sorted by length (stable) and
  cut into batches; trimmed (``trim_batch``'s rule: the longest real sequence, rounded up to
  ``trim_multiple``).

A training stream is a function of its seed: ``batches_after(records)`` starts after the first
``records`` shuffled examples, which is how a resumed JAX run finds its position
(``modeling.training.inputs.ReReadInput``).

Example::

    from data.glue import features as cf
    batches = NumpyDataset("eval.tf_record", cf.record_spec(128), batch_size=8,
                           is_training=False, sort_by_length=True)
    for batch in batches:
        batch["input_ids"].shape        # (8, S') int32, S' <= 128
"""

from __future__ import annotations

import copy
import itertools
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from data.records import numpy_reader, tf_example
from data.glue import features as cf


def trim_batch(batch: Dict[str, np.ndarray], multiple: int = 8,
               sequence_names: Sequence[str] = cf.MODEL_INPUT_NAMES) -> Dict[str, np.ndarray]:
    """``data.glue.dataset.trim_batch`` on numpy: the last axis of ``sequence_names`` cut to
    the batch's longest real sequence, rounded up to a multiple of ``multiple``.

    Args:
        batch: the batch dict (``input_mask`` [..., S]).
        multiple: round the cut length up to a multiple of this.
        sequence_names: the features cut along their last axis.

    Returns:
        The batch with those features [..., S'] (S' <= S).
    """
    full = batch[cf.INPUT_IDS].shape[-1]
    longest = int(batch[cf.INPUT_MASK].sum(axis=-1).max(initial=0))
    length = max(1, min(full, (longest + multiple - 1) // multiple * multiple))
    out = dict(batch)
    for name in sequence_names:
        out[name] = batch[name][..., :length]
    return out


def _stack(rows: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    return {name: np.stack([row[name] for row in rows]) for name in rows[0]}


class NumpyDataset:
    """Batches of decoded records, as ``data.glue.dataset.make_dataset`` makes them (see the
    module); iterable any number of times.

    Args:
        input_files: a TFRecord file or files.
        spec: the records' spec (feature name -> ``data.records.tf_example.FixedLen``).
        batch_size: examples per batch.
        is_training: repeat and shuffle.
        drop_remainder: only full batches.
        trim: cut each batch to its longest sequence.
        sort_by_length: eval/predict: sort windows of examples by length.
        seed: the shuffle's seed (None: a random one).
        shuffle_buffer: the shuffle buffer (the original's 100).
        trim_multiple: round the cut length up to a multiple of this.
        sequence_names: the features ``trim_batch`` cuts.
        sort_window_batches: with ``sort_by_length``, the batches of a window sorted together.
    """

    def __init__(self, input_files: Union[str, Sequence[str]], spec: tf_example.RecordSpec,
                 batch_size: int, is_training: bool, drop_remainder: bool = False,
                 trim: bool = True, sort_by_length: bool = False, seed: Optional[int] = None,
                 shuffle_buffer: int = 100, trim_multiple: int = 8,
                 sequence_names: Sequence[str] = cf.MODEL_INPUT_NAMES,
                 sort_window_batches: int = cf.SORT_WINDOW_BATCHES):
        self.input_files = [input_files] if isinstance(input_files, str) else list(input_files)
        self.spec = dict(spec)
        self.batch_size = batch_size
        self.is_training = is_training
        self.drop_remainder = drop_remainder
        self.trim = trim
        self.sort_by_length = sort_by_length
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**32)
        self.shuffle_buffer = shuffle_buffer
        self.trim_multiple = trim_multiple
        self.sequence_names = tuple(sequence_names)
        self.sort_window_batches = sort_window_batches
        self._maps: List[Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]] = []

    def map(self, fn: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]
            ) -> "NumpyDataset":
        """The same batches, each passed through ``fn`` (``tf.data.Dataset.map``'s name).

        Args:
            fn: batch -> batch, on numpy arrays.

        Returns:
            A new ``NumpyDataset``.
        """
        mapped = copy.copy(self)
        mapped._maps = self._maps + [fn]
        return mapped

    def _records(self) -> Iterator[Dict[str, np.ndarray]]:
        """Every record once, decoded, in file order."""
        for path in self.input_files:
            for index, example in enumerate(numpy_reader.examples(path)):
                yield tf_example.decode_numpy(example, self.spec, path, index)

    def _repeated(self) -> Iterator[Dict[str, np.ndarray]]:
        while True:
            empty = True
            for record in self._records():
                empty = False
                yield record
            if empty:  # tf.data's repeat of an empty input ends too
                return

    def _shuffled(self) -> Iterator[Dict[str, np.ndarray]]:
        """tf.data's shuffle: a buffer filled first, then each output a uniformly drawn slot,
        refilled with the next record."""
        rng = np.random.default_rng(self.seed)
        source = self._repeated()
        buffer = list(itertools.islice(source, self.shuffle_buffer))
        for record in source:
            slot = int(rng.integers(len(buffer)))
            yield buffer[slot]
            buffer[slot] = record
        while buffer:  # (an endless input never gets here; an empty one does)
            slot = int(rng.integers(len(buffer)))
            buffer[slot], buffer[-1] = buffer[-1], buffer[slot]
            yield buffer.pop()

    def _batched(self, rows: Iterator[Dict[str, np.ndarray]]) -> Iterator[Dict[str, np.ndarray]]:
        while True:
            chunk = list(itertools.islice(rows, self.batch_size))
            if not chunk or (self.drop_remainder and len(chunk) < self.batch_size):
                return
            yield _stack(chunk)

    def _indexed(self) -> Iterator[Dict[str, np.ndarray]]:
        for index, record in enumerate(self._records()):
            record[cf.EXAMPLE_INDEX] = np.int32(index)
            yield record

    def _sorted_batches(self) -> Iterator[Dict[str, np.ndarray]]:
        """Windows of ``sort_window_batches`` batches, each sorted by length (an example's
        longest sequence; stable), cut into batches."""
        rows = self._indexed()
        while True:
            window = list(itertools.islice(rows, self.batch_size * self.sort_window_batches))
            if not window:
                return
            lengths = [int(np.max(row[cf.INPUT_MASK].sum(axis=-1))) for row in window]
            order = np.argsort(np.asarray(lengths), kind="stable")
            yield from self._batched(iter([window[i] for i in order]))

    def batches_after(self, records: int = 0) -> Iterator[Dict[str, np.ndarray]]:
        """The batches, training ones after the first ``records`` shuffled examples (a resumed
        run's position: a whole number of batches).

        Args:
            records: examples already read (training only).

        Returns:
            An iterator of ``{name: array}`` batches.
        """
        if self.is_training:
            batches = self._batched(itertools.islice(self._shuffled(), records, None))
        elif self.sort_by_length:
            batches = self._sorted_batches()
        else:
            batches = self._batched(self._indexed())
        if self.trim:
            batches = (trim_batch(b, self.trim_multiple, self.sequence_names) for b in batches)
        for fn in self._maps:
            batches = map(fn, batches)
        return batches

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        return self.batches_after(0)

    def as_numpy_iterator(self) -> Iterator[Dict[str, np.ndarray]]:
        """The batches (``tf.data.Dataset.as_numpy_iterator``'s name, so either input serves
        the JAX predictor)."""
        return iter(self)
