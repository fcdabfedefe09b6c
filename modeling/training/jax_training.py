"""A training step on Keras' JAX backend: the model's loss, JAX's gradient, the original update.

``TrainState`` holds the values of the model's trainable and non-trainable variables (dropout
seed generators included) and of the optimizer's (iteration counter, slots);
``make_train_step(model, optimizer)`` returns a compiled ``step(state, batch) -> (state, logs)``:

1. ``model.stateless_call(..., training=True)``: the outputs dict, whose ``loss_key`` entry
   (``"total_loss"`` for ``BertPretrainingModel``: MLM + NSP, computed in the model as on
   TensorFlow) is the loss;
2. ``jax.value_and_grad`` of it;
3. ``optimizer.stateless_apply``: the clipping and the update rule of
   ``modeling.training.optimizers`` (``update_rules``, as on TensorFlow).

``logs`` holds the loss, every scalar output of the model (``masked_lm_loss``,
``next_sentence_loss``, ...), ``global_norm`` (before clipping) and ``learning_rate`` (the rate
this update used). The batch is a dict of arrays (numpy or JAX) with the model's input names.
``TrainState.from_model``/``assign_to`` move values between the Keras variables and a state, so
that a checkpoint or an export reads the variables. ``shard(batch, distribution)`` places a
batch split over the devices (training and ``Predictor`` alike).

Example (``KERAS_BACKEND=jax``)::

    model = modeling.BertPretrainingModel(config)
    optimizer = modeling.create_optimizer(1e-4, 1000, 100)
    optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer)
    state = TrainState.from_model(model, optimizer)
    state, logs = step(state, batch)          # batch: dict of [B, S] / [B, P] arrays
    state.assign_to(model, optimizer)
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np

from modeling.training.optimizers import global_norm


@dataclasses.dataclass
class TrainState:
    """The values a step reads and returns (JAX arrays; a pytree).

    Attributes:
        trainable: the model's trainable variables' values, in ``model.trainable_variables``
            order.
        non_trainable: ``model.non_trainable_variables``' (dropout seeds among them).
        optimizer: ``optimizer.variables``' (the iteration counter, the slots).
    """

    trainable: List[Any]
    non_trainable: List[Any]
    optimizer: List[Any]

    @classmethod
    def from_model(cls, model: keras.Model, optimizer: keras.optimizers.Optimizer
                   ) -> "TrainState":
        """Copies of the variables' current values (the optimizer built on the trainable ones).

        Args:
            model: the model.
            optimizer: its optimizer, built.
        """
        # Copies: a compiled step donates the state's buffers, which must not be the
        # variables' own (the model would be left holding deleted arrays).
        import jax.numpy as jnp

        return cls([jnp.array(v.value) for v in model.trainable_variables],
                   [jnp.array(v.value) for v in model.non_trainable_variables],
                   [jnp.array(v.value) for v in optimizer.variables])

    def assign_to(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        """Writes the state into the Keras variables (before a checkpoint or an export).

        Args:
            model: the model the state came from.
            optimizer: its optimizer.
        """
        for variable, value in zip(model.trainable_variables, self.trainable):
            variable.assign(value)
        for variable, value in zip(model.non_trainable_variables, self.non_trainable):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, self.optimizer):
            variable.assign(value)


def _flatten(state: TrainState):
    return (state.trainable, state.non_trainable, state.optimizer), None


def _unflatten(_, children):
    return TrainState(*children)


def _register_pytree():
    import jax

    try:
        jax.tree_util.register_pytree_node(TrainState, _flatten, _unflatten)
    except ValueError:  # registered already
        pass


def make_train_step(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                    loss_key: str = "total_loss", jit: bool = True,
                    loss: Optional[Callable[[Mapping[str, Any], Mapping[str, Any]], Any]] = None,
                    input_names: Optional[Sequence[str]] = None,
                    occurrence_norm: Sequence[Any] = ()
                    ) -> Callable[[TrainState, Mapping[str, Any]],
                                  Tuple[TrainState, Dict[str, Any]]]:
    """The compiled step ``(state, batch) -> (state, logs)`` (see the module docstring).

    Args:
        model: a model whose outputs dict holds the scalar loss under ``loss_key``, or any
            model with ``loss``.
        optimizer: a ``modeling.training.optimizers`` optimizer, built on
            ``model.trainable_variables``.
        loss_key: the output minimised (without ``loss``).
        jit: compile with ``jax.jit`` (the state's buffers are donated: use the returned one).
        loss: ``(outputs, batch) -> scalar``, the loss of a model that does not compute its
            own (a task model: e.g. the mean of
            ``modeling.heads.classifier.per_example_classifier_loss``).
        input_names: the batch entries the model takes (default: the whole batch; a batch
            with labels needs them, e.g. ``modeling.encoder.INPUT_NAMES``).
        occurrence_norm: tables whose gradient the original's clipping norm counts once per
            looked-up position (``embeddings.sparse_gradient_tables`` of a task model, whose
            word table has no other use; not a pre-training model's, whose tied output makes
            it dense): the global norm that clips and is logged is then the original's
            (``backend.occurrence_norm_tap``), where JAX's own gradient sums a repeated id's
            rows first.

    Returns:
        The step function.

    Raises:
        ValueError: Keras does not run on JAX.
    """
    if keras.backend.backend() != "jax":
        raise ValueError("make_train_step needs KERAS_BACKEND=jax (running on %s)"
                         % keras.backend.backend())
    import jax

    _register_pytree()
    schedule = optimizer._learning_rate  # noqa: SLF001 - a float or a schedule of the iteration
    iterations_index = next(i for i, v in enumerate(optimizer.variables)
                            if v is optimizer.iterations)

    from modeling import backend

    tapped_paths = [v.path for v in occurrence_norm]
    tapped = [any(v is t for t in occurrence_norm) for v in model.trainable_variables]

    def loss_fn(trainable, non_trainable, batch, tap):
        inputs = batch if input_names is None else {k: batch[k] for k in input_names}
        with backend.occurrence_norm_tap(tapped_paths, tap):
            outputs, non_trainable = model.stateless_call(trainable, non_trainable, inputs,
                                                          training=True)
        value = loss(outputs, batch) if loss is not None else outputs[loss_key]
        return value, (outputs, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, argnums=(0, 3), has_aux=True)

    def step(state: TrainState, batch):
        (value, (outputs, non_trainable)), (grads, squares) = grad_fn(
            state.trainable, state.non_trainable, batch, keras.ops.zeros((), "float32"))
        if tapped_paths:  # the original's norm: the tapped tables per occurrence
            norm = keras.ops.sqrt(keras.ops.square(global_norm(
                [g for g, t in zip(grads, tapped) if not t])) + squares)
        else:
            norm = global_norm(grads)
        iteration = state.optimizer[iterations_index]
        rate = schedule(iteration) if callable(schedule) else schedule
        # This project's optimizers clip by the norm given; another Keras optimizer by its own.
        clipping = getattr(optimizer, "clipping_norm", None)
        with clipping(norm) if clipping else contextlib.nullcontext():
            trainable, optimizer_values = optimizer.stateless_apply(state.optimizer, grads,
                                                                    state.trainable)
        logs = {key: value for key, value in outputs.items()
                if hasattr(value, "shape") and value.shape == ()}
        logs.update(loss=value, global_norm=norm, learning_rate=rate)
        return TrainState(trainable, non_trainable, optimizer_values), logs

    return jax.jit(step, donate_argnums=0) if jit else step


# ------------------------------------------------------------------ task losses and prediction

def mean_loss(per_example_loss: Callable, loss_weights: Optional[str] = None) -> Callable:
    """The fine-tuning objective of ``modeling.training.objectives`` for ``make_train_step``'s
    ``loss``: the mean over the batch of ``per_example_loss(outputs, batch)`` [B], or with
    ``loss_weights`` Σ w·ℓ / Σ w (0 without weight) over per-item losses and the batch's
    weights of the same shape (NER: the mean over scored tokens).

    Args:
        per_example_loss: ``(outputs, batch) -> [B]`` (or [B, S] with ``loss_weights``).
        loss_weights: the batch feature holding the weights, or None.

    Returns:
        ``(outputs, batch) -> scalar`` float32.
    """
    from keras import ops

    def loss(outputs, batch):
        values = ops.cast(per_example_loss(outputs, batch), "float32")
        if loss_weights is None:
            return ops.mean(values)
        weights = ops.cast(batch[loss_weights], "float32")
        return ops.divide_no_nan(ops.sum(weights * values), ops.sum(weights))

    return loss


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
    import numpy as np

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


def shard(batch: Mapping[str, np.ndarray], distribution) -> Mapping[str, Any]:
    """``batch`` placed split over the devices along its first axis (as is without them).

    Args:
        batch: name -> array [B, ...].
        distribution: ``modeling.training.jax_trainer.distribute``'s result (None: as is).
    """
    import jax

    if distribution is None:
        return batch

    def place(value):
        layout = distribution.get_data_layout(np.shape(value))  # batch axis split, per rank
        return jax.device_put(value, getattr(layout, "backend_layout", layout))

    return {name: place(value) for name, value in batch.items()}


class Predictor:
    """``model(inputs, training=False)`` over numpy batches on JAX: the twin of
    ``modeling.training.finetuning.Predictor``. Each batch is padded to its length bucket
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
        import numpy as np

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
            batches: an iterable of numpy batch dicts.
            distribution: ``modeling.training.jax_trainer.distribute``'s result (the rows are
                then padded to a multiple of the devices).
        """
        import jax
        import numpy as np


        devices = len(jax.local_devices()) if distribution is not None else 1
        trainable = [v.value for v in self.model.trainable_variables]
        non_trainable = [v.value for v in self.model.non_trainable_variables]
        for batch in batches:
            inputs = {n: batch[n] for n in self.input_names}
            rows, seq = np.shape(inputs["input_ids"])[0], np.shape(inputs["input_ids"])[-1]
            self._rows = max(self._rows, -(-rows // devices) * devices)
            padded = pad_batch(inputs, length_bucket(seq, self.longest), self._rows)
            out = jax.device_get(self._compiled(trainable, non_trainable,
                                                shard(padded, distribution)))
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
