"""Prediction on TensorFlow: ``Predictor`` runs a model (``training=False``) over a
``tf.data`` dataset under any ``tf.distribute`` strategy, one traced step per model and outputs
reused by every call (a relaxed signature: batches of any length share it; the fused inference
kernels where ``strategies.prediction_kernels_apply``); ``predict`` keeps one with the model.
``resolve_strategy`` (a prediction's strategy, TPU or not) and ``encoder_layers`` (the compiled
forward of ``extract_features.py``) are the other compiled forwards a task asks for.
What is collected and how (``job.collect_predictions``) is the same on every backend.

Example::

    out = predict(model, eval_dataset, ["probabilities"], total=408)
    out["probabilities"], out["label_ids"]          # [408, 2], [408]
"""

from __future__ import annotations

import weakref
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from modeling.encoder import INPUT_NAMES as MODEL_INPUT_NAMES
from modeling.kernels import switch
from modeling.training import job


def relaxed_spec(element_spec):
    """The dataset's element spec with every dimension unknown (one trace for all shapes).

    Args:
        element_spec: a ``tf.data`` element spec (nested).
    """
    return tf.nest.map_structure(
        lambda spec: tf.TensorSpec([None] * spec.shape.rank, spec.dtype, name=spec.name),
        element_spec)


def model_inputs(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The model's three inputs of a batch (``input_ids``, ``input_mask``, ``segment_ids``).

    Args:
        batch: a batch dict with more features (labels, weights, indexes).
    """
    return {name: batch[name] for name in MODEL_INPUT_NAMES}


class Predictor:
    """Runs ``model`` (``training=False``) over datasets, one compiled step reused by every call.

    ``run(dataset)`` returns numpy arrays of ``output_names`` and of the batches' other features
    (``label_ids``, ``is_real_example``, ``example_index``), concatenated in dataset order.

    Args:
        model: the model (dict in, dict out).
        output_names: the model outputs to collect.
        strategy: the distribution strategy; None = the default.
    """

    def __init__(self, model, output_names: Sequence[str], strategy=None):
        import tensorflow as tf

        from modeling.training import strategies

        self._model = model
        self.output_names = list(output_names)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = (self.strategy.num_replicas_in_sync > 1
                            or strategies.is_tpu(self.strategy))
        self._steps = {}
        self.fused_kernels = strategies.prediction_kernels_apply(self.strategy, model.variables)

    @property
    def model(self):
        return self._model

    def _forward(self, batch):
        outputs = self.model(model_inputs(batch), training=False)
        result = {name: outputs[name] for name in self.output_names}
        for name, value in batch.items():
            if name not in MODEL_INPUT_NAMES:
                result[name] = value
        return result

    def _step(self, element_spec):
        import tensorflow as tf

        key = repr(relaxed_spec(element_spec))
        if key not in self._steps:
            kernels = switch.Kernels(inference=self.fused_kernels)

            # The layers read their kernels while the step is traced: the model carries them
            # for the trace (the replica threads of a MirroredStrategy see the model's value).
            def forward(batch):
                with switch.use_kernels(self.model, kernels):
                    if self.distributed:
                        return self.strategy.run(self._forward, args=(batch,))
                    return self._forward(batch)

            # (no AutoGraph: no Python control flow on tensors to convert)
            if self.distributed:
                self._steps[key] = tf.function(forward, reduce_retracing=True,
                                               autograph=False)
            else:
                self._steps[key] = tf.function(forward, autograph=False,
                                               input_signature=[relaxed_spec(element_spec)])
        return self._steps[key]

    def run(self, dataset, total: Optional[int] = None,
            label: str = "predict") -> Dict[str, np.ndarray]:
        """The outputs and features of every batch of ``dataset``, concatenated in order.

        Args:
            dataset: finite batches of feature dicts.
            total: the number of examples, for the progress line's ETA (None: unknown).
            label: the progress line's prefix.

        Returns:
            Name -> numpy array [N, ...] (per-token outputs zero-padded to the longest).
        """
        step = self._step(dataset.element_spec)
        if self.distributed:
            dataset = self.strategy.experimental_distribute_dataset(dataset)

        def parts():
            for batch in dataset:
                out = step(batch)  # traced on the first call
                yield {name: [np.asarray(p) for p in (
                    self.strategy.experimental_local_results(value) if self.distributed
                    else [value])] for name, value in out.items()}

        return job.collect_predictions(parts(), self.output_names[0], total, label)


class _CachedPredictor(Predictor):
    """A Predictor kept in ``_PREDICTORS``: it holds its model weakly (the cache entry must not
    keep the model, its key, alive)."""

    def __init__(self, model, output_names: Sequence[str], strategy=None):
        super().__init__(model, output_names, strategy)
        self._model = weakref.ref(model)

    @property
    def model(self):
        return self._model()


# model -> {(output names, strategy id): predictor}: one traced step per model and outputs, so
# that predicting again (an eval per epoch, a benchmark's passes) does not trace the model again.
_PREDICTORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def predict(model, dataset, output_names: Sequence[str], total: Optional[int] = None,
            strategy=None, label: str = "predict") -> Dict[str, np.ndarray]:
    """``Predictor(model, output_names, strategy).run(dataset, total, label)``, the Predictor
    kept with the model for the next call.

    Args:
        model: the model.
        dataset: finite batches.
        output_names: the outputs to collect.
        total: the number of examples (for the ETA), or None.
        strategy: the distribution strategy, or None.
        label: the progress line's prefix.

    Returns:
        As ``Predictor.run``.
    """
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    per_model = _PREDICTORS.setdefault(model, {})
    key = (tuple(output_names), id(strategy), switch.inference_kernels_allowed())
    predictor = per_model.get(key)
    if predictor is None or predictor.strategy is not strategy:
        predictor = per_model[key] = _CachedPredictor(model, output_names, strategy)
    return predictor.run(dataset, total, label)


def resolve_strategy(strategy=None):
    """A prediction's strategy and whether it is a TPU one (static shapes, padded batches).

    Args:
        strategy: a ``tf.distribute.Strategy``, or None (the current one).

    Returns:
        ``(strategy, tpu)``.
    """
    from modeling.training import strategies

    strategy = strategy or tf.distribute.get_strategy()
    return strategy, strategies.is_tpu(strategy)


def encoder_layers(model, layer_indexes: Sequence[int], inference_dtype: str):
    """A compiled function from a batch to the encoder layers ``layer_indexes``' values, each
    float32 [B, S, H] (``extract_features.py``): float32 XLA-compiled where XLA can compile for
    the CPU (not under tensorflow-tpu); bfloat16 as a graph, with the fused LayerNorm on a CPU
    (XLA compiles TensorFlow's ops and cannot take the kernel library's).

    Args:
        model: a ``BertModel`` with its weights.
        layer_indexes: the encoder layers (negative: from the last).
        inference_dtype: ``float32`` or ``bfloat16``.

    Returns:
        ``batch -> [[B, S, H], ...]``.
    """
    from modeling.training import strategies

    fused = (inference_dtype != "float32" and strategies.prediction_kernels_apply(
        tf.distribute.get_strategy(), model.variables))
    xla = inference_dtype == "float32" and not strategies.xla_cpu_unavailable()

    @tf.function(jit_compile=xla, reduce_retracing=True, autograph=False)
    def layers(batch):
        with switch.use_kernels(model, switch.Kernels(inference=fused)):  # read when traced
            outputs = model(batch, training=False)["encoder_outputs"]
        return [tf.cast(outputs[index], tf.float32) for index in layer_indexes]  # [B, S, H]

    return layers
