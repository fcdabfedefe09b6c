"""Checks of the int32 [B, S] id inputs a serving signature takes (the classifier's
``serving_default``, the TF Hub-style encoder's ``serve`` and ``__call__``).

``check_id_inputs(inputs, names, vocab_size=..., type_vocab_size=..., max_length=...)``, called
inside the signature's ``tf.function``, adds ``tf.debugging`` assertions in front of the model,
so an inconsistent request fails with ``InvalidArgumentError`` naming the input instead of
broadcasting or reading garbage:

* the three inputs have the same shape [B, S] (an ``input_mask`` of another batch size or
  length would otherwise broadcast);
* mask values are 0 or 1; ids are in [0, ``vocab_size``), segment (type) ids in
  [0, ``type_vocab_size``), S is at most ``max_length`` (``max_position_embeddings``);
* a row needs at least one position (its ``[CLS]``): S = 0 with B > 0 is refused.

An empty batch (B = 0) is valid and gives empty outputs: for [0, 0] the inputs are padded to
[0, 1] (the encoder needs a position to pool), so the caller cuts sequence outputs back to the
``length`` returned. TensorFlow is imported on first use (``bert_common`` does not load it at
import time).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

#: The encoder's input names, in order: ids, mask, segment (type) ids.
BERT_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def check_id_inputs(inputs: Mapping[str, Any], names: Sequence[str] = BERT_INPUT_NAMES, *,
                    vocab_size: Optional[int] = None, type_vocab_size: Optional[int] = None,
                    max_length: Optional[int] = None) -> Tuple[Dict[str, Any], Any]:
    """``inputs[names[i]]`` (ids, mask, segment ids; int [B, S] tensors) behind assertions.

    Returns ``(checked, length)``: ``checked`` maps each of ``names`` to its tensor, run only
    after the assertions pass (an empty [0, 0] batch padded to [0, 1], see the module
    docstring); ``length`` is the requested S (int32 scalar), to cut sequence outputs to.
    ``vocab_size`` / ``type_vocab_size`` / ``max_length`` None: that range is not checked.

    Args:
        inputs: the serving inputs by name (int tensors, [B, S]).
        names: the input names to check, in order (ids, mask, segment ids).
        vocab_size: the word-id range to check, or None.
        type_vocab_size: the segment-id range to check, or None.
        max_length: the largest S allowed, or None.

    Returns:
        ``(checked, length)`` as above.
    """
    import tensorflow as tf

    ids_name, mask_name, types_name = names
    ids, mask, types = (inputs[n] for n in names)
    shape = tf.shape(ids)
    batch, length = shape[0], shape[1]
    checks = [
        tf.debugging.assert_equal(tf.shape(mask), shape, message="%s must have the shape of %s "
                                  "([B, S], the same B and S)" % (mask_name, ids_name)),
        tf.debugging.assert_equal(tf.shape(types), shape, message="%s must have the shape of "
                                  "%s ([B, S], the same B and S)" % (types_name, ids_name)),
        tf.debugging.assert_equal(tf.logical_or(tf.equal(batch, 0), tf.greater(length, 0)),
                                  True, message="%s has B > 0 rows of length S = 0: a row needs "
                                  "at least one position ([CLS])" % ids_name),
        tf.debugging.assert_non_negative(mask, message="%s values must be 0 or 1" % mask_name),
        tf.debugging.assert_less_equal(mask, tf.ones([], mask.dtype),
                                       message="%s values must be 0 or 1" % mask_name),
        tf.debugging.assert_non_negative(ids, message="%s values must be in [0, vocab_size%s)"
                                         % (ids_name, "=%d" % vocab_size if vocab_size else "")),
        tf.debugging.assert_non_negative(types, message="%s values must be in [0, "
                                         "type_vocab_size%s)" % (types_name, "=%d" % type_vocab_size
                                                                 if type_vocab_size else "")),
    ]
    if vocab_size is not None:
        checks.append(tf.debugging.assert_less(
            ids, tf.constant(vocab_size, ids.dtype),
            message="%s values must be in [0, vocab_size=%d)" % (ids_name, vocab_size)))
    if type_vocab_size is not None:
        checks.append(tf.debugging.assert_less(
            types, tf.constant(type_vocab_size, types.dtype),
            message="%s values must be in [0, type_vocab_size=%d)" % (types_name, type_vocab_size)))
    if max_length is not None:
        checks.append(tf.debugging.assert_less_equal(
            length, tf.constant(max_length, length.dtype),
            message="%s is longer (S) than the model's max_position_embeddings=%d"
                    % (ids_name, max_length)))
    with tf.control_dependencies(checks):
        # [0, 0] -> [0, 1]: nothing to compute, but the pooler takes position 0.
        pad = tf.cast(tf.logical_and(tf.equal(batch, 0), tf.equal(length, 0)), tf.int32)
        # Static shapes are dropped ([None, None]): a caller with static shapes (a restored
        # function called eagerly is traced again with its inputs' shapes) must reach the
        # assertions above, not fail in shape inference of the model ops behind them.
        checked = {n: tf.compat.v1.placeholder_with_default(
            tf.pad(inputs[n], [[0, 0], [0, pad]]), [None, None]) for n in names}
        length = tf.identity(length)
    return checked, length


def model_sizes(model: Any) -> Dict[str, Optional[int]]:
    """``vocab_size``, ``type_vocab_size`` and ``max_length`` for ``check_id_inputs`` from a
    model's ``BertConfig`` (``model.config`` for an encoder, ``model.encoder.config`` for a
    task model); None each where the model has none.

    Args:
        model: an encoder or a task model.

    Returns:
        A dict with ``vocab_size``, ``type_vocab_size`` and ``max_length`` (each int or None).
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "vocab_size"):
        config = getattr(getattr(model, "encoder", None), "config", None)
    return {"vocab_size": getattr(config, "vocab_size", None),
            "type_vocab_size": getattr(config, "type_vocab_size", None),
            "max_length": getattr(config, "max_position_embeddings", None)}
