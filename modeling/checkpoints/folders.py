"""Where a checkpoint's companions are: the folder of a checkpoint, its ``bert_config.json`` or
Hugging Face ``config.json``, its ``vocab.txt``, and whether a path is a checkpoint at all.

The readers of a model folder share these: ``from_pretrained`` (``bert_tasks.pretrained``),
``convert_checkpoint.py`` and the TF Hub export (``bert_tasks.exports``).
"""

from __future__ import annotations

import os
from typing import Optional

from bert_common import files
from modeling.checkpoints import hf as hf_import
from modeling.checkpoints.tf1 import CheckpointError
from modeling.config import BertConfig

CONFIG_NAME = "bert_config.json"


def check_input(input_path: str) -> None:
    """``CheckpointError`` naming what ``input_path`` lacks when it is no checkpoint at all: no
    such path, or a folder without a TF1 checkpoint or Hugging Face weights (an empty folder is
    reported as such, not as a missing config).

    Args:
        input_path: the checkpoint, file or folder to convert.

    Raises:
        CheckpointError: it is no checkpoint.
    """
    if not files.exists(input_path) and not files.exists(input_path + ".index"):
        raise CheckpointError("%s: no such file, folder or checkpoint" % input_path)
    if files.isdir(input_path) and not hf_import.is_hf_checkpoint(input_path):
        from modeling.checkpoints.tf1 import _resolve_tf1_prefix

        _resolve_tf1_prefix(input_path)  # CheckpointError: what the folder lacks


def config_for(input_path: str, config_file: Optional[str],
               hidden_act: Optional[str] = None) -> BertConfig:
    """``config_file`` (Google's or HF's), else the ``config.json`` of an HF input, else the
    ``bert_config.json`` beside the checkpoint (a Google release folder). The input is checked
    first (``check_input``).

    Args:
        input_path: the checkpoint to convert.
        config_file: an explicit config (Google's or HF's), or None.
        hidden_act: overrides the config's ``hidden_act`` when given.

    Returns:
        The ``BertConfig``.

    Raises:
        CheckpointError: the input is no checkpoint, or no config is found.
    """
    check_input(input_path)
    if not config_file and not hf_import.is_hf_checkpoint(input_path):
        beside = os.path.join(input_folder(input_path), CONFIG_NAME)
        if not files.isfile(beside):
            raise CheckpointError("%s: no bert_config.json beside the checkpoint: "
                                             "give its config with --bert_config_file"
                                             % input_path)
        config_file = beside
    if config_file:
        config = BertConfig.from_json_file(config_file)
    else:
        config = hf_import.read_hf_config(input_path)
    return config.replace(hidden_act=hidden_act) if hidden_act else config


def input_folder(input_path: str) -> str:
    """The folder of a checkpoint: the path itself if a folder, else the prefix's/file's.

    Args:
        input_path: a checkpoint prefix, file or folder.

    Returns:
        The folder path.
    """
    return input_path if files.isdir(input_path) else os.path.dirname(files.abspath(input_path))


def default_vocab_file(input_path: str) -> Optional[str]:
    """``vocab.txt`` in the input's folder (Google release and HF folders carry one), or None.

    Args:
        input_path: a checkpoint prefix, file or folder.

    Returns:
        The ``vocab.txt`` path, or None.
    """
    vocab = os.path.join(input_folder(input_path), hf_import.VOCAB_NAME)
    return vocab if files.isfile(vocab) else None

