"""Helpers shared by the modeling tests: golden batches as model inputs."""

import os

import numpy as np

from tests import paths

MODELING = os.path.join(paths.GOLDEN, "modeling")


def golden_dir(name: str) -> str:
    return os.path.join(MODELING, name)


def load_outputs(name: str):
    return dict(np.load(os.path.join(golden_dir(name), "outputs.npz")))


def encoder_inputs(golden):
    return {"input_ids": golden["input_ids"], "input_mask": golden["input_mask"],
            "segment_ids": golden["token_type_ids"]}


def pretraining_inputs(golden):
    inputs = encoder_inputs(golden)
    for key in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                "next_sentence_labels"):
        inputs[key] = golden[key]
    return inputs


def max_abs_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
