"""The checkpoint a training run exports for fine-tuning: ``<output_dir>/export/``, what the
TensorFlow tools' ``--init_checkpoint`` / ``--bert_config_file`` take (pre-training on either
backend, the fine-tuning tools on JAX).

Example::

    from bert_tasks.exports.checkpoint import export_for_finetuning
    export_for_finetuning(model, "out", "bert_config.json", global_step=1000)
    # out/export/bert_model.ckpt.* and out/export/bert_config.json
"""

from __future__ import annotations

import os

from absl import logging

from bert_common import atomic, files
from modeling.checkpoints.folders import CONFIG_NAME
from modeling.checkpoints.tf1 import save_tf1_checkpoint, tensorflow_checkpoints


def export_for_finetuning(model, output_dir: str, bert_config_file: str, global_step: int) -> str:
    """``output_dir/export/bert_model.ckpt`` (Google's TF1 names) with ``bert_config.json``:
    what the fine-tuning tools' ``--init_checkpoint`` / ``--bert_config_file`` take. Where
    TensorFlow is not installed (a JAX run), ``export/model.weights.h5`` instead, which the
    TensorFlow tools load as ``--init_checkpoint`` of the same model.

    Args:
        model: the trained model (pre-training, or a fine-tuning task's).
        output_dir: the run's folder.
        bert_config_file: the model's config file (copied beside).
        global_step: the step trained to (logged).

    Returns:
        The checkpoint prefix (or weights file) written.
    """
    export_dir = os.path.join(output_dir, "export")
    files.makedirs(export_dir)
    if tensorflow_checkpoints():
        written = save_tf1_checkpoint(model, os.path.join(export_dir, "bert_model.ckpt"),
                                      global_step=global_step)
    else:
        written = os.path.join(export_dir, "model.weights.h5")
        # A staged path with the final name (Keras wants the suffix), renamed in when
        # complete; a killed run's staging folder is removed by the next run that writes here.
        with atomic.atomic_path(written) as temp:
            model.save_weights(temp)
        logging.info("Exported %s (TensorFlow is not installed: the TensorFlow tools load it "
                     "as --init_checkpoint of the same model)", written)
    with atomic.atomic_open(os.path.join(export_dir, CONFIG_NAME)) as f:
        f.write(files.read_text(bert_config_file))
    return written
