"""The original ``modeling.py``'s small public helpers, for code ported from google-research/bert.

``import modeling`` gives them under the original's names and arguments: ``gelu(x)`` (the tanh
form), ``get_activation(activation_string)``, ``create_attention_mask_from_input_mask(from_tensor,
to_mask)``, ``get_shape_list(tensor, expected_rank=None, name=None)`` and
``create_initializer(initializer_range=0.02)``. Each is the one this port's layers use, or a thin
front to it (``gelu`` and the activation table are ``modeling.layers.activations``'s, the
initializer is ``modeling.layers.embeddings.truncated_normal``). The original's Estimator and
graph builders (``model_fn_builder``, ``input_fn_builder``, ``transformer_model``,
``embedding_lookup``, ...) have no TF2 counterpart here: ``docs/porting.md`` maps them.

Example::

    import modeling

    mask = modeling.create_attention_mask_from_input_mask(
        tf.zeros([2, 5, 8]), tf.constant([[1, 1, 0], [1, 0, 0]]))   # [2, 5, 3]
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

import keras
from keras import ops

from modeling import backend

from modeling.layers import activations
from modeling.layers.activations import gelu
from modeling.layers.embeddings import truncated_normal


def get_activation(activation_string: Union[str, Callable, None]) -> Optional[Callable]:
    """The original ``get_activation``: a name -> the activation function.

    ``None``, ``""`` and ``"linear"`` give None (no activation); a non-string (a function) is
    returned as it is; ``"relu"``, ``"gelu"`` (the tanh form), ``"tanh"`` and this port's
    ``"gelu_exact"``, in any case, give the function.

    Args:
        activation_string: the activation's name, or a function.

    Returns:
        The function, or None for a linear activation.

    Raises:
        ValueError: an unknown name (one line naming it and the known ones).
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string or activation_string.lower() == "linear":
        return None
    return activations.get_activation(activation_string)


def get_shape_list(tensor: Any, expected_rank: Union[int, Sequence[int], None] = None,
                   name: Optional[str] = None) -> List[Union[int, Any]]:
    """The original ``get_shape_list``: the tensor's dimensions, each a Python int where it is
    static and a scalar int32 tensor (``tf.shape``) where it is not (on TensorFlow; every
    dimension is static on JAX).

    Args:
        tensor: the tensor.
        expected_rank: a rank or a list of ranks the tensor must have (None: any).
        name: the tensor's name in the error (default: its graph name, where it has one).

    Returns:
        One entry per dimension.

    Raises:
        ValueError: the rank is not ``expected_rank`` (the original's message, without its TF1
            variable scope).
    """
    if expected_rank is not None:
        expected = ({expected_rank} if isinstance(expected_rank, int)
                    else set(expected_rank))
        actual = len(tensor.shape)
        if actual not in expected:
            if name is None:
                try:
                    name = tensor.name
                except (AttributeError, ValueError):  # an eager tensor has no name
                    name = "tensor"
            raise ValueError("For the tensor `%s`, the actual rank `%s` (shape = %s) is not "
                             "equal to the expected rank `%s`"
                             % (name, actual, tensor.shape, expected_rank))
    shape = list(tensor.shape)
    if all(dim is not None for dim in shape):
        return shape
    dynamic = backend.shape(tensor)
    return [dynamic[i] if dim is None else dim for i, dim in enumerate(shape)]


def create_attention_mask_from_input_mask(from_tensor: Any,
                                          to_mask: Any) -> Any:
    """The original's 3D attention mask: ``mask[b, f, t] = to_mask[b, t]`` for every position
    ``f`` of ``from_tensor``.

    This port's encoder uses the same mask as an additive bias [B, 1, 1, T]
    (``modeling.layers.attention.attention_bias_from_mask``); this is the original's own form,
    for code that builds its attention by hand.

    Args:
        from_tensor: [B, F] (ids) or [B, F, H]: the positions that attend.
        to_mask: int [B, T]: 1 for a real token, 0 for padding.

    Returns:
        float32 [B, F, T].
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_mask, expected_rank=2)
    to_mask = ops.cast(ops.reshape(to_mask, (from_shape[0], 1, to_shape[1])), "float32")
    broadcast_ones = ops.ones((from_shape[0], from_shape[1], 1), "float32")  # [B, F, 1]
    return broadcast_ones * to_mask  # [B, F, T]


def create_initializer(initializer_range: float = 0.02) -> keras.initializers.Initializer:
    """The original ``create_initializer``: a truncated normal (cut at 2 standard deviations)
    of stddev ``initializer_range``, the initializer of every BERT weight.

    Args:
        initializer_range: the standard deviation (``BertConfig.initializer_range``).

    Returns:
        A Keras initializer.
    """
    return truncated_normal(initializer_range)


__all__ = ["create_attention_mask_from_input_mask", "create_initializer", "gelu",
           "get_activation", "get_shape_list"]
