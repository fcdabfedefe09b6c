"""A training step on Keras' JAX backend: the model's loss, JAX's gradient, the original update.

``TrainState`` holds the values of the model's trainable and non-trainable variables (dropout
seed generators included) and of the optimizer's (iteration counter, slots);
``make_train_step(model, optimizer)`` returns a compiled ``step(state, batch) -> (state, logs)``:

1. ``model.stateless_call(..., training=True)``: the outputs dict, whose ``loss_key`` entry
   (``"total_loss"`` for ``BertPretrainingModel``: MLM + NSP, computed in the model as on
   TensorFlow) is the loss;
2. ``jax.value_and_grad`` of it;
3. ``optimizer.stateless_apply``: the clipping and the update rule of
   ``modeling.training.keras_optimization`` (``update_rules``, as on TensorFlow).

``logs`` holds the loss, every scalar output of the model (``masked_lm_loss``,
``next_sentence_loss``, ...), ``global_norm`` (before clipping) and ``learning_rate`` (the rate
this update used). The batch is a dict of arrays (numpy or JAX) with the model's input names.
``TrainState.from_model``/``assign_to`` move values between the Keras variables and a state, so
that a checkpoint or an export reads the variables.

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

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import keras

from modeling.training.keras_optimization import global_norm


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
                    input_names: Optional[Sequence[str]] = None
                    ) -> Callable[[TrainState, Mapping[str, Any]],
                                  Tuple[TrainState, Dict[str, Any]]]:
    """The compiled step ``(state, batch) -> (state, logs)`` (see the module docstring).

    Args:
        model: a model whose outputs dict holds the scalar loss under ``loss_key``, or any
            model with ``loss``.
        optimizer: a ``modeling.training.keras_optimization`` optimizer, built on
            ``model.trainable_variables``.
        loss_key: the output minimised (without ``loss``).
        jit: compile with ``jax.jit`` (the state's buffers are donated: use the returned one).
        loss: ``(outputs, batch) -> scalar``, the loss of a model that does not compute its
            own (a task model: e.g. the mean of
            ``modeling.heads.classifier.per_example_classifier_loss``).
        input_names: the batch entries the model takes (default: the whole batch; a batch
            with labels needs them, e.g. ``modeling.encoder.INPUT_NAMES``).

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

    def loss_fn(trainable, non_trainable, batch):
        inputs = batch if input_names is None else {k: batch[k] for k in input_names}
        outputs, non_trainable = model.stateless_call(trainable, non_trainable, inputs,
                                                      training=True)
        value = loss(outputs, batch) if loss is not None else outputs[loss_key]
        return value, (outputs, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(state: TrainState, batch):
        (value, (outputs, non_trainable)), grads = grad_fn(state.trainable,
                                                           state.non_trainable, batch)
        iteration = state.optimizer[iterations_index]
        rate = schedule(iteration) if callable(schedule) else schedule
        trainable, optimizer_values = optimizer.stateless_apply(state.optimizer, grads,
                                                                state.trainable)
        logs = {key: value for key, value in outputs.items()
                if hasattr(value, "shape") and value.shape == ()}
        logs.update(loss=value, global_norm=global_norm(grads), learning_rate=rate)
        return TrainState(trainable, non_trainable, optimizer_values), logs

    return jax.jit(step, donate_argnums=0) if jit else step
