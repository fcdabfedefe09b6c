"""Pre-training batches read with numpy, without TensorFlow: the JAX job's input where
TensorFlow is not installed (``bert_tasks.pretraining``; with TensorFlow it reads the tf.data
pipeline of ``data.pretraining.dataset``).

``batches(paths, batch_size, names, deterministic, seed, skip_records)``: every record's
features (``data.records.numpy_reader``), repeated epoch after epoch; in file order with
``deterministic``, else the files and a ``SHUFFLE_BUFFER``-record buffer shuffled per epoch from
``seed``; after ``skip_records`` records (a resumed run's position: the stream is re-read up to
it, so the batches are the ones an uninterrupted run reads next).

Example::

    from data.pretraining import numpy_input, schema
    batch = next(numpy_input.batches(["train.tfrecord"], 32, schema.FEATURE_NAMES,
                                     deterministic=True, seed=12345))   # {name: [32, ...]}
"""

from __future__ import annotations

from typing import Dict, Iterator, List

import numpy as np

from bert_common.errors import InputError

SHUFFLE_BUFFER = 10000


def _record_stream(paths: List[str], names, deterministic: bool, seed: int
                   ) -> Iterator[Dict[str, np.ndarray]]:
    """Every record's features, epoch after epoch (see the module docstring)."""
    from data.records import numpy_reader

    epoch = 0
    while True:
        read = 0
        rng = np.random.default_rng([seed, epoch])
        order = list(paths) if deterministic else [paths[i] for i in rng.permutation(len(paths))]
        buffer: List[Dict[str, np.ndarray]] = []
        for path in order:
            for features in numpy_reader.examples(path):
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
    from data.records import numpy_reader

    while True:
        yield numpy_reader.stack_rows([next(stream) for _ in range(batch_size)])
