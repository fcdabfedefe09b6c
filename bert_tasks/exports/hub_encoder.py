"""The encoder as a TF Hub-style reusable SavedModel (the interface of TF Hub's / Model
Garden's BERT encoders).

``export_encoder(encoder, export_dir, vocab_file, do_lower_case)`` writes a ``BertModel`` as a
SavedModel whose restored object ``obj = tf.saved_model.load(export_dir)`` is used as TF Hub's
``bert_en_uncased_L-12_H-768_A-12`` encoders are::

    outputs = obj({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
                  training=False)

* inputs: a dict of int32 [B, S] tensors (any B and S up to ``max_position_embeddings``):
  ``input_word_ids`` (WordPiece ids), ``input_mask`` (1 = real token, 0 = padding),
  ``input_type_ids`` (segment ids); the names ``BertModel`` calls ``input_ids`` /
  ``input_mask`` / ``segment_ids``. Checked in graph (``bert_common.serving_inputs``): the
  three of one shape, mask values 0/1, ids in [0, vocab_size), type ids in
  [0, type_vocab_size), 0 < S <= max_position_embeddings, else ``InvalidArgumentError``
  naming the input; an empty batch (B = 0, S = 0 too) gives empty outputs of the right shape;
* outputs: a dict: ``pooled_output`` float32 [B, H], ``sequence_output`` float32 [B, S, H],
  ``encoder_outputs`` (list of the L block outputs, each float32 [B, S, H]) and
  ``default_output`` (= ``pooled_output``);
* ``training``: a Python bool; both values are traced, dropout is active only with True;
* ``variables`` / ``trainable_variables`` (the encoder's weights; ``variables`` also holds the
  dropout seed states) and ``regularization_losses`` (empty): what ``hub.KerasLayer`` reads
  to reuse (and fine-tune) the SavedModel;
* ``vocab_file`` (a ``tf.saved_model.Asset``: the vocabulary, copied into ``assets/``;
  ``obj.vocab_file.asset_path`` is its path after loading) and ``do_lower_case`` (a bool
  ``tf.Variable``), as TF Hub's encoders carry them;
* the ``serving_default`` signature (TF Serving, ``saved_model_cli``): int32 inputs
  ``input_word_ids``, ``input_mask``, ``input_type_ids`` [B, S]; flat outputs
  (``flat_outputs``, as ``BertModel.export``): ``pooled_output``, ``sequence_output``,
  ``default_output``, ``encoder_outputs_0`` ... ``encoder_outputs_{L-1}``.

The encoder SavedModel needs no TensorFlow Text; the matching preprocessor
(``bert_tasks.exports.hub_preprocessor``, raw text -> these inputs) does.
"""

from __future__ import annotations

from typing import Dict, Mapping

import tensorflow as tf

from bert_common import files
from bert_common import serving_inputs
from bert_common.errors import InputError
from bert_tasks.exports import saved_model
from modeling.encoder import BertModel, flat_outputs

#: TF Hub's input names -> ``BertModel``'s.
HUB_INPUT_NAMES = {"input_word_ids": "input_ids", "input_mask": "input_mask",
                   "input_type_ids": "segment_ids"}


def _input_specs() -> Dict[str, tf.TensorSpec]:
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in HUB_INPUT_NAMES}


class HubEncoder(tf.Module):
    """A ``BertModel`` behind TF Hub's encoder interface (see the module docstring).

    Only what the SavedModel needs is tracked: the encoder's variables, the vocab asset and
    ``do_lower_case``; the Keras model itself is reached through a lambda (tracking it would
    make ``tf.saved_model.save`` trace every layer again, slowly, for nothing a reuser calls).

    Args:
      encoder: a ``modeling.BertModel`` (dict ``input_ids``/``input_mask``/``segment_ids`` in,
        dict out), built with a dynamic sequence length.
      vocab_file: its WordPiece vocabulary (stored as an asset).
      do_lower_case: whether that vocabulary expects lower-cased text.
    """

    # tf.Module computes these by walking its attributes; a reusable SavedModel stores them
    # as plain attributes, so the properties are replaced by instance attributes here.
    variables = None
    trainable_variables = None

    def __init__(self, encoder: BertModel, vocab_file: str, do_lower_case: bool):
        super().__init__(name="bert_encoder")
        self._run_encoder = lambda inputs, training: encoder(inputs, training=training)
        self.num_layers = int(encoder.config.num_hidden_layers)
        self.variables = list(encoder.variables)
        self.trainable_variables = list(encoder.trainable_variables)
        self.regularization_losses = []
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")
        sizes = serving_inputs.model_sizes(encoder)
        self._vocab_size = sizes["vocab_size"]
        self._type_vocab_size = sizes["type_vocab_size"]
        self._max_length = sizes["max_length"]

    def _outputs(self, inputs: Mapping[str, tf.Tensor], training: bool) -> Dict[str, object]:
        checked, length = serving_inputs.check_id_inputs(
            {hub: tf.cast(inputs[hub], tf.int32) for hub in HUB_INPUT_NAMES},
            tuple(HUB_INPUT_NAMES), vocab_size=self._vocab_size,
            type_vocab_size=self._type_vocab_size, max_length=self._max_length)
        model_inputs = {ours: checked[hub] for hub, ours in HUB_INPUT_NAMES.items()}
        out = self._run_encoder(model_inputs, training)
        pooled = tf.cast(out["pooled_output"], tf.float32)  # [B, H]

        def sequence(x):  # [B, S, H] (an empty [0, 0] batch was run as [0, 1])
            return tf.cast(x, tf.float32)[:, :length]

        return {
            "pooled_output": pooled,
            "sequence_output": sequence(out["sequence_output"]),
            "encoder_outputs": [sequence(x) for x in out["encoder_outputs"]],
            "default_output": pooled,
        }

    @tf.function(autograph=False)
    def __call__(self, inputs, training=False):
        """dict of int32 [B, S] -> dict of outputs (module docstring); ``training``: bool."""
        return self._outputs(inputs, bool(training))

    @tf.function(input_signature=list(_input_specs().values()), autograph=False)
    def serve(self, input_word_ids, input_mask, input_type_ids):
        """The ``serving_default`` signature: three int32 [B, S] tensors -> flat outputs.

        Args:
            input_word_ids: int32 [B, S].
            input_mask: int32 [B, S].
            input_type_ids: int32 [B, S].

        Returns:
            The outputs flattened (``flat_outputs``).
        """
        # A call of the traced ``__call__`` (``trace``), not the encoder traced again.
        return flat_outputs(self.__call__({"input_word_ids": input_word_ids,
                                           "input_mask": input_mask,
                                           "input_type_ids": input_type_ids}, training=False))

    def trace(self) -> Dict[str, object]:
        """Traces ``__call__`` for training False and True (as ``tf.saved_model.save`` would:
        ``tracing_as_saved``, so each is traced once); returns the signatures (``serve`` has an
        input signature: ``tf.saved_model.save`` traces it)."""
        with saved_model.tracing_as_saved():
            for training in (False, True):
                self.__call__.get_concrete_function(_input_specs(), training=training)
        return {"serving_default": self.serve}


def export_encoder(encoder: BertModel, export_dir: str, vocab_file: str,
                   do_lower_case: bool) -> HubEncoder:
    """Writes ``encoder`` (a ``BertModel``) as a TF Hub-style encoder SavedModel.

    Written under a temporary name beside ``export_dir``, then renamed into place (an existing
    SavedModel ``export_dir`` is replaced; anything else there is refused with ``InputError``;
    its parent folder is created: ``saved_model.save_saved_model``). Returns the ``HubEncoder``.

    Args:
        encoder: the ``BertModel``.
        export_dir: the SavedModel folder.
        vocab_file: the vocab saved as an asset.
        do_lower_case: the tokenizer's casing, saved with it.

    Returns:
        The ``HubEncoder`` saved.

    Raises:
        InputError: ``export_dir`` exists and is not a SavedModel or an empty folder.
    """
    if not files.isfile(vocab_file):  # a clear error before tracing
        raise InputError("vocab file %s: no such file" % vocab_file)
    module = HubEncoder(encoder, vocab_file, do_lower_case)
    saved_model.save_saved_model(module, export_dir, module.trace)
    return module
