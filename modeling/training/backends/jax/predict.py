"""Prediction on JAX: ``predict`` (``finetuning.predict``'s), ``encoder_layers``
(``extract_features.py``'s), ``resolve_strategy`` (none here), ``Predictor``
(``model(inputs, training=False)`` over numpy batches, one compiled forward per length
bucket), and the padding that keeps the compiled programs few:
``length_bucket``, ``pad_batch`` (training pads its batches alike), ``max_positions``.

Example (``KERAS_BACKEND=jax``)::

    predictor = Predictor(model, ["logits"], ["input_ids", "input_mask", "segment_ids"])
    for outputs in predictor.run(batches):
        outputs["logits"]          # [B, num_labels], numpy
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

import keras
import numpy as np

from modeling.encoder import INPUT_NAMES
from modeling.training import job
from modeling.training.backends.jax.steps import shard


def length_bucket(length: int, longest: int, shortest: int = 16) -> int:
    """The padded length of a batch cut to ``length`` tokens: the next power of two (at least
    ``shortest``), at most ``longest``. A compiled step is built once per bucket instead of
    once per length (length-aware batches have dozens of lengths).

    Args:
        length: the batch's sequence length S.
        longest: the model's longest sequence (its position table).
        shortest: the smallest bucket.
    """
    bucket = shortest
    while bucket < length:
        bucket *= 2
    return max(length, min(bucket, longest))


def pad_batch(batch: Mapping[str, Any], length: int, rows: Optional[int] = None
              ) -> Dict[str, Any]:
    """``batch`` with its token axis (the last axis of ``input_ids``, S) zero-padded to
    ``length`` in every feature that has it, and with zero rows added up to ``rows``.

    Padding with zeros is exact for the task models: padded tokens have ``input_mask`` 0 (the
    attention gives them weight 0, as to a short example's own padding) and weight 0 in a
    weighted loss; padded rows are dropped by the caller.

    Args:
        batch: name -> numpy array [B, ..., S] or [B, ...].
        length: the padded S (>= S).
        rows: the padded B, or None (as is).
    """
    seq = np.shape(batch["input_ids"])[-1]
    out = {}
    for name, value in batch.items():
        value = np.asarray(value)
        pads = [(0, 0)] * value.ndim
        if value.ndim >= 2 and value.shape[-1] == seq and length > seq:
            pads[-1] = (0, length - seq)
        if rows is not None and value.ndim >= 1 and rows > value.shape[0]:
            pads[0] = (0, rows - value.shape[0])
        out[name] = np.pad(value, pads) if any(p != (0, 0) for p in pads) else value
    return out


def max_positions(model: keras.Model) -> Optional[int]:
    """The rows of the model's position embedding table (its longest sequence), or None."""
    for variable in model.weights:
        if "position_embeddings" in variable.path:
            return int(variable.shape[0])
    return None


class Predictor:
    """``model(inputs, training=False)`` over numpy batches on JAX: the twin of
    ``backends.tensorflow.predict.Predictor``. Each batch is padded to its length bucket
    (``length_bucket``) and to the largest batch seen so far (one compiled forward per
    bucket); the outputs are cut back to the batch's rows and tokens.

    Args:
        model: the model (dict in, dict out), with its trained values.
        output_names: the outputs to collect.
        input_names: the batch features the model takes.
    """

    def __init__(self, model: keras.Model, output_names: Sequence[str],
                 input_names: Sequence[str]):
        import jax

        self.model = model
        self.output_names = list(output_names)
        self.input_names = list(input_names)
        self.longest = max_positions(model) or 512
        self._token_axes: Optional[Dict[str, Optional[int]]] = None
        self._rows = 0

        def forward(trainable, non_trainable, inputs):
            outputs, _ = model.stateless_call(trainable, non_trainable, inputs, training=False)
            return {name: outputs[name] for name in self.output_names}

        self._forward = forward
        self._compiled = jax.jit(forward)

    def _axes(self, inputs) -> Dict[str, Optional[int]]:
        """Output -> its token axis (the one whose size follows S), found once by tracing
        the forward at two lengths within the position table (no computation)."""
        import jax

        if self._token_axes is None:
            values = ([v.value for v in self.model.trainable_variables],
                      [v.value for v in self.model.non_trainable_variables])
            shapes = []
            for length in (self.longest - 1, self.longest):
                spec = {n: jax.ShapeDtypeStruct(np.shape(v)[:1] + np.shape(v)[1:-1] + (length,),
                                                np.asarray(v).dtype) for n, v in inputs.items()}
                shapes.append(jax.eval_shape(self._forward, *values, spec))
            self._token_axes = {}
            for name in self.output_names:
                a, b = shapes[0][name].shape, shapes[1][name].shape
                axes = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
                self._token_axes[name] = axes[0] if axes else None
        return self._token_axes

    def run(self, batches, distribution=None):
        """Yields, per batch, the outputs and the batch's other features (numpy, cut back to
        the batch's rows and tokens).

        Args:
            batches: an iterable of numpy batch dicts, the same in every process of a run.
            distribution: ``backends.jax.steps.distribute``'s result (the rows are
                then padded to a multiple of the devices; among several processes each
                computes its rows, and every process gets every row's outputs).
        """
        import jax
        from jax.experimental import multihost_utils

        devices = jax.device_count() if distribution is not None else 1
        gather = (lambda out: multihost_utils.process_allgather(out, tiled=True)
                  ) if jax.process_count() > 1 else jax.device_get
        trainable = [v.value for v in self.model.trainable_variables]
        non_trainable = [v.value for v in self.model.non_trainable_variables]
        for batch in batches:
            inputs = {n: batch[n] for n in self.input_names}
            rows, seq = np.shape(inputs["input_ids"])[0], np.shape(inputs["input_ids"])[-1]
            self._rows = max(self._rows, -(-rows // devices) * devices)
            padded = pad_batch(inputs, length_bucket(seq, self.longest), self._rows)
            out = gather(self._compiled(trainable, non_trainable, shard(padded, distribution)))
            result = {}
            for name, value in out.items():
                value = np.asarray(value)[:rows]
                axis = self._axes(inputs)[name]
                if axis is not None:
                    value = np.take(value, np.arange(seq), axis=axis)
                result[name] = value
            for name, value in batch.items():
                if name not in self.input_names:
                    result[name] = np.asarray(value)
            yield result


def predict(model, dataset, output_names: Sequence[str], total: Optional[int] = None,
            strategy=None, label: str = "predict") -> Dict[str, np.ndarray]:
    """``finetuning.predict`` on JAX: the dataset's numpy batches (a ``tf.data`` pipeline's, or
    a ``NumpyDataset``'s where TensorFlow is not installed) through ``Predictor`` (over Keras'
    distribution, when one is set), collected by ``job.collect_predictions``.

    Args:
        model: the model.
        dataset: finite batches with ``as_numpy_iterator()``.
        output_names: the outputs to collect.
        total: the number of examples (for the ETA), or None.
        strategy: unused (TensorFlow's).
        label: the progress line's prefix.

    Returns:
        Name -> numpy array [N, ...].
    """
    del strategy
    predictor = Predictor(model, output_names, INPUT_NAMES)
    batches = predictor.run(dataset.as_numpy_iterator(), keras.distribution.distribution())
    return job.collect_predictions(({name: [value] for name, value in out.items()}
                                    for out in batches), predictor.output_names[0], total, label)


def resolve_strategy(strategy=None):
    """``(strategy, False)``: no ``tf.distribute`` strategy here, no TPU one (TensorFlow is
    not imported: it may not be installed).

    Args:
        strategy: passed through.
    """
    return strategy, False


def encoder_layers(model, layer_indexes: Sequence[int], inference_dtype: str):
    """The encoder layers ``layer_indexes``' values of a batch, each float32 [B, S, H]
    (``extract_features.py``), compiled by ``jax.jit``.

    Args:
        model: a ``BertModel`` with its weights.
        layer_indexes: the encoder layers (negative: from the last).
        inference_dtype: unused (the model was built with it).

    Returns:
        ``batch -> [[B, S, H], ...]``.
    """
    import jax

    del inference_dtype
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    @jax.jit
    def layers(batch):
        outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
        return [keras.ops.cast(outputs["encoder_outputs"][i], "float32") for i in layer_indexes]

    return layers
