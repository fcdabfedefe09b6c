"""``--init_checkpoint`` of every entry point: one loader for every checkpoint format.

``load_checkpoint(model, path)`` tells the format from the path and assigns by Google's TF1
names (``modeling.checkpoints.tf1``): a TF1 prefix or folder, a Hugging Face folder or
``.safetensors`` file (``modeling.checkpoints.hf``), or a ``.keras`` / ``.weights.h5`` file
written by this project. It returns the ``LoadReport`` (loaded, missing, unused).
"""

import os

import numpy as np
from absl import logging

from modeling.checkpoints import hf
from modeling.checkpoints.tf1 import (CheckpointError, LoadReport, _Source, array_source,
                                      assign_tf1_values, tf1_checkpoint_source, tf1_variable_map)


def load_checkpoint(model, path: str, log: bool = True) -> LoadReport:
    """``--init_checkpoint`` of every entry point: TF1 prefix/folder, HF folder or
    ``.safetensors`` file, or a ``.keras`` / ``.weights.h5`` file written by this project."""
    if hf.is_hf_checkpoint(path):
        weights = hf.read_hf_weights(path)
        report = assign_tf1_values(model, array_source(weights.source, weights.arrays))
        report.unused.extend(weights.unmapped)
    elif path.endswith(".keras"):
        report = assign_tf1_values(model, _keras_file_source(path))
    elif path.endswith(".weights.h5"):
        if not os.path.isfile(path):
            raise CheckpointError("%s: no such weights file" % path)
        try:
            model.load_weights(path)
        except ValueError as e:
            raise CheckpointError("%s: does not fit this model (%s)"
                                  % (path, str(e).splitlines()[0])) from None
        report = LoadReport(source=path, loaded=[v.path for v in model.weights])
    else:
        report = assign_tf1_values(model, tf1_checkpoint_source(path))
    if log:
        logging.info("%s", report.summary())
    return report


def _keras_file_source(path: str) -> _Source:
    import keras

    if not os.path.isfile(path):
        raise CheckpointError("%s: no such Keras model file" % path)
    import modeling.encoder  # noqa: F401  (registers the layers for deserialization)
    import modeling.heads.pretraining  # noqa: F401

    try:
        other = keras.saving.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001 - any reason a foreign file fails to load
        raise CheckpointError("%s: cannot load Keras model (%s)"
                              % (path, str(e).strip().splitlines()[0])) from None
    arrays = {}
    for name, (variable, transpose) in tf1_variable_map(other).items():
        value = np.asarray(variable.numpy())
        arrays[name] = value.T if transpose else value
    return array_source(path, arrays)
