"""``--init_checkpoint`` of every entry point: one loader for every checkpoint format.

``load_checkpoint(model, path)`` tells the format from the path and assigns by Google's TF1
names (``modeling.checkpoints.tf1``): a TF1 prefix or folder, a Hugging Face folder or
``.safetensors`` file (``modeling.checkpoints.hf``), a ``.keras`` / ``.weights.h5`` file
written by this project, or a checkpoint of this project's trainer (``ckpt-N`` of
run_pretraining, ``model.ckpt-N`` of the fine-tuning tools: object-based, restored into a model
of the same class; the optimizer state in it is not read). It returns the ``LoadReport``
(loaded, missing, unused).

``checkpoint_step(path)`` is the global step a checkpoint was saved at: the optimizer's
iteration count of a trainer checkpoint, the ``global_step`` variable of a TF1 checkpoint (the
original Estimator's, or ``export/bert_model.ckpt``), else 0.
"""

from absl import logging

from bert_common import files
from bert_common.errors import first_line
from modeling.checkpoints import hf
from modeling.checkpoints.tf1 import (CheckpointError, LoadReport, _Source,
                                      _resolve_tf1_prefix, array_source, assign_tf1_values,
                                      checkpoint_reader, model_tf1_arrays, read_tensor,
                                      tensorflow_checkpoints, tf1_checkpoint_source)

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
STEP_KEY = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
TF1_STEP_KEY = "global_step"


def load_checkpoint(model, path: str, log: bool = True) -> LoadReport:
    """``--init_checkpoint`` of every entry point: TF1 prefix/folder, HF folder or
    ``.safetensors`` file, or a ``.keras`` / ``.weights.h5`` file written by this project.

    Args:
        model: the model to fill (a ``BertModel``, a task model, ``BertPretrainingModel``);
            assigned by TF1 name, so any of them reads any format.
        path: the checkpoint (the format is told from it, see the module docstring).
        log: log ``report.summary()`` at INFO.

    Returns:
        The ``LoadReport``: ``loaded`` (TF1 names assigned), ``missing`` (model variables left
        at their init, e.g. a fresh head), ``unused`` (checkpoint names nothing took).

    Raises:
        CheckpointError: no such checkpoint, a damaged one, or shapes that do not fit.

    Example::

        from modeling import BertConfig, BertModel, load_checkpoint

        config = BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
        encoder = BertModel(config)
        report = load_checkpoint(encoder, "uncased_L-12_H-768_A-12/bert_model.ckpt")
        report.missing                                                   # == []
        len(report.loaded) == len(encoder.weights)                       # == True
    """
    # The formats that need no TensorFlow first (a JAX process may not have it).
    if hf.is_hf_checkpoint(path):
        weights = hf.read_hf_weights(path)
        report = assign_tf1_values(model, array_source(weights.source, weights.arrays))
        report.unused.extend(weights.unmapped)
    elif path.endswith(".keras"):
        report = assign_tf1_values(model, keras_file_source(path))
    elif path.endswith(".weights.h5"):
        if not files.isfile(path):
            raise CheckpointError("%s: no such weights file" % path)
        try:
            model.load_weights(path)
        except ValueError as e:
            raise CheckpointError("%s: does not fit this model (%s)"
                                  % (path, str(e).splitlines()[0])) from None
        report = LoadReport(source=path, loaded=[v.path for v in model.weights])
    elif is_training_checkpoint(path):
        report = _load_training_checkpoint(model, path)
    else:
        report = assign_tf1_values(model, tf1_checkpoint_source(path))
    if log:
        logging.info("%s", report.summary())
    return report


def keras_file_source(path: str) -> _Source:
    """The TF1-named arrays of a ``.keras`` model file written by this project.

    Args:
        path: the ``.keras`` file.

    Returns:
        A source for ``assign_tf1_values``.

    Raises:
        CheckpointError: no such file, or a file Keras cannot load.
    """
    import keras

    if not files.isfile(path):
        raise CheckpointError("%s: no such Keras model file" % path)
    import modeling.encoder  # noqa: F401  (registers the layers for deserialization)
    import modeling.heads.pretraining  # noqa: F401

    try:
        other = keras.saving.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001 - any reason a foreign file fails to load
        raise CheckpointError("%s: cannot load Keras model (%s)"
                              % (path, first_line(e))) from None
    return array_source(path, model_tf1_arrays(other))


def _training_prefix(path: str):
    """The checkpoint prefix of ``path`` if it is a trainer checkpoint (object graph with a
    ``model``), else None."""
    import tensorflow as tf

    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    try:
        prefix = _resolve_tf1_prefix(path)
        reader = checkpoint_reader(prefix)
        if not reader.has_tensor(OBJECT_GRAPH_KEY):
            return None
    except (CheckpointError, tf.errors.OpError, ValueError):
        return None
    # Held but unreadable: a damaged data file (CheckpointError naming it), not another format.
    serialized = read_tensor(reader, prefix, OBJECT_GRAPH_KEY)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    try:
        graph.ParseFromString(serialized)
    except DecodeError:
        return None
    # The root's children, not the variable keys: a variable is keyed by the first path the
    # saver finds (often optimizer/...), so a model reached second may own no "model/" key.
    root_children = {child.local_name for child in graph.nodes[0].children} if graph.nodes else set()
    return prefix if "model" in root_children else None


def is_training_checkpoint(path: str) -> bool:
    """Whether ``path`` (prefix or folder) is a checkpoint written by the project's trainer.

    Args:
        path: a checkpoint prefix or folder (anything else: False).

    Returns:
        True for an object-based checkpoint holding a ``model``.
    """
    return _training_prefix(path) is not None


def checkpoint_step(path: str) -> int:
    """The global step ``path`` was saved at (see the module docstring); 0 when it has none
    (Hugging Face and Keras files, a TF1 checkpoint without ``global_step``).

    Args:
        path: a checkpoint prefix, folder or file.

    Returns:
        The step, an int >= 0.
    """
    if not tensorflow_checkpoints():  # only TensorFlow's checkpoints hold a step (and need it)
        return 0
    prefix = _training_prefix(path)
    key = STEP_KEY
    if prefix is None:
        try:
            prefix, key = _resolve_tf1_prefix(path), TF1_STEP_KEY
        except CheckpointError:
            return 0
    reader = checkpoint_reader(prefix)
    return int(read_tensor(reader, prefix, key)) if reader.has_tensor(key) else 0


def _load_training_checkpoint(model, path: str) -> LoadReport:
    """The model weights of a trainer checkpoint (by object graph: the same model class)."""
    import tensorflow as tf

    from modeling import backend

    prefix = _training_prefix(path)
    if not backend.TENSORFLOW:  # its object graph holds TensorFlow variables
        raise CheckpointError(
            "%s: a TensorFlow trainer checkpoint, which Keras on %s cannot restore; convert it "
            "first (convert_checkpoint.py --output_format=tf1 or hf, on TensorFlow)"
            % (prefix, backend.BACKEND))
    try:
        status = tf.train.Checkpoint(model=model).restore(prefix)
    except (tf.errors.OpError, IndexError) as e:  # a damaged or truncated data file
        raise CheckpointError("%s: cannot read checkpoint (%s): its data file is damaged or "
                              "truncated" % (prefix, first_line(e))) from None
    try:
        status.assert_existing_objects_matched()
    except AssertionError:
        raise CheckpointError(
            "%s: a training checkpoint of another model (restore it into the model that wrote "
            "it; run_pretraining's export/bert_model.ckpt feeds the fine-tuning tools)"
            % prefix) from None
    status.expect_partial()  # the optimizer and data position are the trainer's business
    return LoadReport(source=prefix, loaded=[v.path for v in model.weights])
