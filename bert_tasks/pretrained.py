"""One call from a model folder to a working model: config, encoder with its weights, tokenizer.

``from_pretrained(path)`` reads either layout:

* a Google release folder: ``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*`` (or any
  TF1 checkpoint the folder's ``checkpoint`` file names; also what ``convert_checkpoint.py``
  writes for a TF1 output);
* a Hugging Face folder: ``config.json``, ``vocab.txt``, ``tokenizer_config.json`` (casing),
  ``model.safetensors`` (what ``convert_checkpoint.py --output_format=hf`` writes).

Example::

    import numpy as np
    from bert_tasks import from_pretrained

    config, encoder, tokenizer = from_pretrained("uncased_L-12_H-768_A-12")
    ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize("Hello!") + ["[SEP]"])
    out = encoder({"input_ids": np.array([ids]), "input_mask": np.ones((1, len(ids)), "int32"),
                   "segment_ids": np.zeros((1, len(ids)), "int32")})
    out["pooled_output"]  # [1, H]

It lives here, not in ``modeling``, because the tokenizer is ``data``'s.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

from absl import logging

from bert_common import files
from modeling.checkpoints.folders import CONFIG_NAME, input_folder
from data.tokenization import wordpiece
from modeling.checkpoints import CheckpointError, hf, load_checkpoint
from modeling.config import BertConfig
from modeling.encoder import BertModel


class Pretrained(NamedTuple):
    """What ``from_pretrained`` returns (unpacks as ``config, encoder, tokenizer``)."""

    config: BertConfig
    encoder: BertModel
    tokenizer: wordpiece.FastFullTokenizer


def folder_casing(path: str) -> Optional[bool]:
    """The casing a model folder states: its ``tokenizer_config.json``'s ``do_lower_case``,
    else the Google release name (``uncased_L-12_H-768_A-12`` ...); None when neither says.

    Args:
      path: a model folder (or a checkpoint prefix in one).
    Returns:
      True (uncased), False (cased) or None.
    """
    folder = input_folder(path)
    casing = hf.read_hf_casing(folder)
    if casing is None:
        casing = wordpiece.checkpoint_casing(os.path.join(folder, "bert_model.ckpt"))
    return casing


def resolve_casing(path: str, do_lower_case: Optional[bool] = None) -> bool:
    """``do_lower_case`` for a model folder: the given value (with the original's
    ``validate_case_matches_checkpoint`` as a warning when the folder says otherwise), else the
    folder's (``folder_casing``), else True, the original's default.

    Args:
      path: a model folder (or a checkpoint prefix in one).
      do_lower_case: the caller's choice, or None.
    Returns:
      The ``do_lower_case`` to tokenize with.
    """
    stated = folder_casing(path)
    if do_lower_case is None:
        if stated is None:
            logging.info("%s does not say its casing; using do_lower_case=True", path)
            return True
        return stated
    if stated is not None and stated != bool(do_lower_case):
        logging.warning("do_lower_case=%s, but %s says the model is %s: the tokens will not be "
                        "the ones it was trained on", bool(do_lower_case), path,
                        "lower-cased" if stated else "cased")
    return bool(do_lower_case)


def from_pretrained(path: str, do_lower_case: Optional[bool] = None,
                    seq_length: Optional[int] = None, dtype=None) -> Pretrained:
    """Config, ``BertModel`` with the folder's weights and its tokenizer (see the module doc).

    Args:
      path: a Google release folder or a Hugging Face folder (local or ``gs://``); a TF1
        checkpoint prefix inside a Google folder works too.
      do_lower_case: None: the folder's casing (``resolve_casing``).
      seq_length, dtype: passed to ``BertModel``.
    Returns:
      A ``Pretrained`` (``config``, ``encoder``, ``tokenizer``).
    Raises:
      ``CheckpointError`` / ``ConfigError`` / ``VocabError`` (one line naming the file) for a
      folder that is not a model, or weights that leave any encoder variable unset.

    Example::

      import numpy as np
      from bert_tasks.pretrained import from_pretrained

      config, encoder, tokenizer = from_pretrained("uncased_L-12_H-768_A-12")
      tokens = ["[CLS]"] + tokenizer.tokenize("Hello, world!") + ["[SEP]"]
      ids = np.array([tokenizer.convert_tokens_to_ids(tokens)])          # [1, S]
      outputs = encoder({"input_ids": ids, "input_mask": np.ones_like(ids),
                         "segment_ids": np.zeros_like(ids)})
      outputs["sequence_output"]                                        # [1, S, H]
    """
    if not files.exists(path) and not files.exists(path + ".index"):
        raise CheckpointError("%s: no such model folder" % path)
    folder = input_folder(path)
    if hf.is_hf_checkpoint(folder):
        config = hf.read_hf_config(folder)
        weights = folder
    else:
        config_file = os.path.join(folder, CONFIG_NAME)
        if not files.isfile(config_file):
            raise CheckpointError("%s: neither a Google release folder (%s) nor a Hugging Face "
                                  "folder (%s)" % (path, CONFIG_NAME, hf.WEIGHTS_NAME))
        config = BertConfig.from_json_file(config_file)
        weights = path
    vocab_file = os.path.join(folder, hf.VOCAB_NAME)
    if not files.isfile(vocab_file):
        raise CheckpointError("%s: the model folder has no %s" % (path, hf.VOCAB_NAME))
    tokenizer = wordpiece.FastFullTokenizer(vocab_file,
                                            do_lower_case=resolve_casing(path, do_lower_case))
    encoder = BertModel(config, seq_length=seq_length, dtype=dtype)
    report = load_checkpoint(encoder, weights)
    if report.missing:
        raise CheckpointError("%s: the checkpoint lacks %d encoder variables (%s ...)"
                              % (path, len(report.missing), report.missing[0]))
    return Pretrained(config, encoder, tokenizer)
