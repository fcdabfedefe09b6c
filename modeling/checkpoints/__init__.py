"""Checkpoints in and out, all under Google's TF1 variable names.

* ``tf1``: the one Keras-path <-> TF1-name map, TF1 checkpoint reading and writing;
* ``hf``: Hugging Face ``model.safetensors`` + ``config.json`` under the same names;
* ``load``: ``load_checkpoint(model, path)`` for every ``--init_checkpoint`` format (the
  trainer's own checkpoints too), ``checkpoint_step``;
* ``folders``: a checkpoint's folder, config and vocab (``config_for``, ``default_vocab_file``).

The names users import are re-exported here: ``modeling.checkpoints.load_tf1_checkpoint`` as in
earlier versions, ``load_checkpoint``, ``save_tf1_checkpoint``, ``CheckpointError``.
"""

from modeling.checkpoints.tf1 import (CheckpointError, LoadReport, checkpoint_reader,
                                      load_tf1_checkpoint,
                                      model_tf1_arrays, read_tf1_checkpoint, register_tf1_head,
                                      save_tf1_checkpoint, tf1_checkpoint_source,
                                      tf1_name_for, tf1_name_for_path, tf1_variable_map,
                                      unmapped_variables, write_tf1_arrays)
from modeling.checkpoints import hf  # noqa: E402  (after tf1: hf uses its error type)
from modeling.checkpoints.load import (checkpoint_step, is_training_checkpoint,  # noqa: E402
                                       load_checkpoint)

__all__ = ["CheckpointError", "LoadReport", "checkpoint_reader", "checkpoint_step", "hf",
           "is_training_checkpoint",
           "load_checkpoint", "load_tf1_checkpoint",
           "model_tf1_arrays", "read_tf1_checkpoint", "register_tf1_head",
           "save_tf1_checkpoint", "tf1_checkpoint_source", "tf1_name_for", "tf1_name_for_path",
           "tf1_variable_map", "unmapped_variables", "write_tf1_arrays"]
