"""The model of the fp16 (dynamic loss scaling) training checks of run_classifier, run_squad
and run_swag: the tiny config cut to one Transformer layer.

What those checks assert (the mixed_float16 policy in force, two steps with finite positive
losses, the loss scale in the checkpoint) does not depend on the depth, while every layer adds
its forward, backward and optimizer-update ops to the train step that each run traces and
compiles anew. The layer kept and the embeddings still start from the tiny checkpoint (its
variables are matched by name; the second layer's are not read)."""

import json
import os

from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")


def one_layer_config(folder) -> str:
    """Writes ``<folder>/bert_config.json``, the tiny config with ``num_hidden_layers=1``;
    returns its path."""
    with open(os.path.join(TINY, "bert_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["num_hidden_layers"] > 1  # the cut is real
    config["num_hidden_layers"] = 1
    os.makedirs(str(folder), exist_ok=True)
    path = os.path.join(str(folder), "bert_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return path


def with_one_layer(argv, folder):
    """``argv`` with its ``--bert_config_file`` (the tiny config) replaced by
    ``one_layer_config(folder)``."""
    flag = "--bert_config_file="
    tiny = flag + os.path.join(TINY, "bert_config.json")
    assert [a for a in argv if a.startswith(flag)] == [tiny], argv
    path = one_layer_config(folder)
    return [flag + path if a.startswith(flag) else a for a in argv]
