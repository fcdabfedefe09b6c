"""Keras variables <-> Google's TF1 variable names: the one name map, TF1 reading and writing.

One mapping, ``tf1_name_for(variable) -> (tf1_name, transpose)``, is used by every loader and by
the writer. It reads the Keras ``variable.path`` from the first *anchor* component (a top-level
layer name of ``modeling.encoder`` / ``modeling.heads.pretraining`` or a registered head):

==============================================  =============================================
Keras path                                       TF1 name (transpose)
==============================================  =============================================
word_embeddings/embeddings                       bert/embeddings/word_embeddings
embeddings/{token_type,position}_embeddings      bert/embeddings/{...}_embeddings
embeddings/LayerNorm/{gamma,beta}                bert/embeddings/LayerNorm/{gamma,beta}
layer_N/<rest>                                   bert/encoder/layer_N/<rest>
pooler/dense/{kernel,bias}                       bert/pooler/dense/{kernel,bias}
predictions_transform/<rest>                     cls/predictions/transform/<rest>
predictions/output_bias                          cls/predictions/output_bias
seq_relationship/kernel [H,2]                    cls/seq_relationship/output_weights [2,H] (T)
seq_relationship/bias                            cls/seq_relationship/output_bias
<registered head>/kernel [H,K]                   <scope>output_weights [K,H] (T)
<registered head>/output_weights [K,H]           <scope>output_weights
<registered head>/{bias,output_bias}             <scope>output_bias
==============================================  =============================================

Fine-tuning heads hook: ``register_tf1_head(layer_name, scope)``. Pre-registered: a layer named
``classifier`` (run_classifier's top-level ``output_weights``/``output_bias``) and ``squad``
(``cls/squad/output_weights``/``output_bias``). The MLM output layer has no variable of its own:
it is the word-embedding table.

``load_tf1_checkpoint`` skips optimizer slots (``adam_m``, ``adam_v``) and ``global_step``,
returns a ``LoadReport`` (loaded / missing from the checkpoint / unused checkpoint variables),
and refuses a shape mismatch with a ``CheckpointError`` naming the variable and both shapes.
``save_tf1_checkpoint`` writes a TF1-named checkpoint. ``modeling.checkpoints.load`` puts every
other format (Hugging Face, ``.keras``, ``.weights.h5``) through the same map.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from bert_common.errors import InputError, first_line
from bert_common import atomic, files
from bert_common.atomic import atomic_prefix


class CheckpointError(InputError):
    """A checkpoint that cannot be loaded into a model; one line naming the file and variable."""


# ---------------------------------------------------------------------------------- name mapping

_LAYER_RE = re.compile(r"^layer_\d+$")
# Registered fine-tuning heads: Keras layer name -> TF1 scope prefix ("" or "cls/squad/").
_HEADS: Dict[str, str] = {}


def register_tf1_head(layer_name: str, scope: str = "") -> None:
    """Maps a head layer's variables to ``<scope>output_weights`` / ``<scope>output_bias``.

    The layer may hold a Keras-layout ``kernel`` [H, K] (transposed to [K, H]) and ``bias`` [K],
    or the original-layout ``output_weights`` [K, H] and ``output_bias`` [K]. ``scope`` is the
    TF1 variable scope with a trailing slash, e.g. ``"cls/squad/"``, or ``""`` (run_classifier).

    Args:
        layer_name: the head's Keras layer name (``"multiple_choice"``).
        scope: its TF1 scope (a missing trailing slash is added).
    """
    if scope and not scope.endswith("/"):
        scope += "/"
    _HEADS[layer_name] = scope


register_tf1_head("classifier", "")
register_tf1_head("squad", "cls/squad/")


def _map_components(anchor: str, rest: Sequence[str]) -> Optional[Tuple[str, bool]]:
    tail = "/".join(rest)
    if anchor == "word_embeddings":
        return ("bert/embeddings/word_embeddings", False) if tail == "embeddings" else None
    if anchor == "embeddings":
        return "bert/embeddings/" + tail, False
    if _LAYER_RE.match(anchor):
        return "bert/encoder/%s/%s" % (anchor, tail), False
    if anchor == "pooler":
        return "bert/pooler/" + tail, False
    if anchor == "predictions_transform":
        return "cls/predictions/transform/" + tail, False
    if anchor == "predictions":
        return ("cls/predictions/output_bias", False) if tail == "output_bias" else None
    if anchor == "seq_relationship":
        return {"kernel": ("cls/seq_relationship/output_weights", True),
                "bias": ("cls/seq_relationship/output_bias", False)}.get(tail)
    if anchor in _HEADS:
        scope = _HEADS[anchor]
        return {"kernel": (scope + "output_weights", True),
                "output_weights": (scope + "output_weights", False),
                "bias": (scope + "output_bias", False),
                "output_bias": (scope + "output_bias", False)}.get(tail)
    return None


def _is_anchor(component: str) -> bool:
    return (component in ("word_embeddings", "embeddings", "pooler", "predictions_transform",
                          "predictions", "seq_relationship")
            or component in _HEADS or bool(_LAYER_RE.match(component)))


def tf1_name_for_path(path: str) -> Optional[Tuple[str, bool]]:
    """Keras variable path -> (Google TF1 name, transpose?) or None if it has no TF1 name.

    Args:
        path: a Keras ``variable.path`` (``"bert/layer_0/attention/self/query/kernel"``).

    Returns:
        ``(tf1_name, transpose)`` or None.
    """
    parts = path.split("/")
    for i, component in enumerate(parts[:-1]):
        if _is_anchor(component):
            return _map_components(component, parts[i + 1:])
    return None


def tf1_name_for(variable) -> Optional[Tuple[str, bool]]:
    """Keras variable -> (TF1 name, transpose?); ``transpose`` means TF1 layout = Keras ``.T``.

    Args:
        variable: a Keras variable of a model.

    Returns:
        ``(tf1_name, transpose)`` or None.
    """
    return tf1_name_for_path(variable.path)


def tf1_variable_map(model) -> Dict[str, Tuple[object, bool]]:
    """TF1 name -> (Keras variable, transpose) for every mapped variable (tied ones once).

    Args:
        model: a built Keras model.

    Returns:
        The dict.

    Raises:
        CheckpointError: two variables map to one TF1 name.
    """
    out: Dict[str, Tuple[object, bool]] = {}
    seen = set()
    for variable in model.weights:
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        mapped = tf1_name_for(variable)
        if mapped is None:
            continue
        name, transpose = mapped
        if name in out and out[name][0] is not variable:
            raise CheckpointError("two model variables map to TF1 name %s: %s and %s"
                                  % (name, out[name][0].path, variable.path))
        out[name] = (variable, transpose)
    return out


def unmapped_variables(model) -> List[str]:
    """Paths of model variables that have no TF1 name (custom, unregistered heads).

    Args:
        model: a built Keras model.

    Returns:
        The variable paths, in ``model.weights`` order.
    """
    return [v.path for v in model.weights if tf1_name_for(v) is None]


# ---------------------------------------------------------------------------------- loading

_SKIPPED_RE = re.compile(r"(^|/)(adam_m|adam_v|Adam|Adam_1|Momentum)$|^global_step$|"
                         r"^beta[12]_power$|^_CHECKPOINTABLE_OBJECT_GRAPH$")


@dataclasses.dataclass
class LoadReport:
    """What a load did: TF1 names loaded, model variables not in the source, unused source names.

    Attributes:
        source: the checkpoint (prefix, folder or file) read.
        loaded: TF1 names assigned to a model variable.
        missing: TF1 names of model variables the source lacks (left at their init).
        unused: source names no model variable took.
        skipped: optimizer slots and step counters, never loaded.
        unmapped: paths of model variables without a TF1 name.
    """

    source: str
    loaded: List[str] = dataclasses.field(default_factory=list)
    missing: List[str] = dataclasses.field(default_factory=list)
    unused: List[str] = dataclasses.field(default_factory=list)
    skipped: List[str] = dataclasses.field(default_factory=list)
    unmapped: List[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """The report in a few lines: the counts, then the missing/unused/unmapped names."""
        lines = ["%s: loaded %d variables, %d missing from the checkpoint (kept fresh), "
                 "%d unused checkpoint variables, %d optimizer/step entries skipped"
                 % (self.source, len(self.loaded), len(self.missing), len(self.unused),
                    len(self.skipped))]
        if self.missing:
            lines.append("  missing (fresh init): " + ", ".join(self.missing))
        if self.unused:
            lines.append("  unused in checkpoint: " + ", ".join(self.unused))
        if self.unmapped:
            lines.append("  model variables without a TF1 name (fresh init): "
                         + ", ".join(self.unmapped))
        return "\n".join(lines)


class _Source:
    """A read-only bag of TF1-named arrays: ``shapes`` and ``read(name)``."""

    def __init__(self, description: str, shapes: Dict[str, Tuple[int, ...]],
                 read: Callable[[str], np.ndarray]):
        self.description = description
        self.shapes = shapes
        self.read = read


def assign_tf1_values(model, source: _Source) -> LoadReport:
    """Assigns every model variable whose TF1 name is in ``source``; see ``LoadReport``.

    Args:
        model: a built Keras model, filled in place.
        source: TF1-named arrays (``tf1_checkpoint_source``, ``array_source``).

    Returns:
        The ``LoadReport``.

    Raises:
        CheckpointError: a shape that does not fit the model's variable.
    """
    report = LoadReport(source=source.description)
    available = {}
    for name, shape in source.shapes.items():
        if _SKIPPED_RE.search(name):
            report.skipped.append(name)
        else:
            available[name] = shape
    used = set()
    for name, (variable, transpose) in sorted(tf1_variable_map(model).items()):
        if name not in available:
            report.missing.append(name)
            continue
        stored = tuple(available[name])
        expected = tuple(int(d) for d in variable.shape)
        expected_stored = expected[::-1] if transpose else expected
        if stored != expected_stored:
            raise CheckpointError(
                "%s: variable %s has shape %s in the checkpoint but the model expects %s "
                "(Keras variable %s)" % (source.description, name, list(stored),
                                         list(expected_stored), variable.path))
        value = np.asarray(source.read(name))
        if transpose:
            value = value.T
        variable.assign(value.astype(variable.dtype))
        used.add(name)
        report.loaded.append(name)
    report.unused = sorted(set(available) - used)
    report.unmapped = unmapped_variables(model)
    return report


def tensorflow_checkpoints() -> bool:
    """Whether this process reads and writes TensorFlow's checkpoints (``tf.train``): where
    TensorFlow is installed. Without it (a JAX run) a folder holds none to find, a checkpoint
    no step to read, and an export is a Keras weights file. The one rule of this package."""
    from bert_common.installed import tensorflow_installed

    return tensorflow_installed()


def latest_checkpoint(folder: str) -> Optional[str]:
    """The newest checkpoint listed in ``folder``'s ``checkpoint`` state file whose files are
    there (None if there is none): one whose files were removed (say a damaged one) is skipped
    for the one before, where TensorFlow's ``latest_checkpoint`` finds none. The one rule for
    every reader of a run's own folder (the trainer's resume, eval-only runs, a folder given as
    a checkpoint).

    Args:
        folder: a local or ``gs://`` folder.

    Returns:
        The checkpoint prefix, or None (also where TensorFlow is not installed: these
        checkpoints are TensorFlow's, and a JAX run's own are Orbax's ``jax_checkpoints/N``).

    Raises:
        CheckpointError: an unreadable ``checkpoint`` state file.
    """
    if not tensorflow_checkpoints() or not files.isdir(folder):
        return None
    import tensorflow as tf

    try:
        state = tf.train.get_checkpoint_state(folder)
    except ValueError as e:  # e.g. an empty state file ("Invalid checkpoint state")
        raise CheckpointError("%s: cannot read its checkpoint state file (%s)"
                              % (os.path.join(folder, "checkpoint"), first_line(e))) from None
    if state is None:
        return None
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    for i, path in enumerate(reversed(paths)):  # joined to ``folder`` by get_checkpoint_state
        if files.exists(path + ".index"):
            if i:
                logging.warning("%s: the newest %d checkpoint(s) listed have no files; using %s",
                                folder, i, path)
            return path
    return None


def _resolve_tf1_prefix(path: str) -> str:
    """A TF1 checkpoint prefix from a prefix or a folder with a ``checkpoint`` state file."""
    # The prefix test first: TF's ram:// filesystem also calls a checkpoint prefix a folder.
    if files.exists(path + ".index"):
        return path
    if files.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(_no_checkpoint_in_folder(path))
        return latest
    raise CheckpointError("%s: no such checkpoint (expected %s.index and its data files)"
                          % (path, path))


def _no_checkpoint_in_folder(folder: str) -> str:
    """What a folder without a TF checkpoint state file lacks, in words (an empty folder is
    not a missing config)."""
    try:
        names = sorted(name.rstrip("/") for name in files.listdir(folder))
    except Exception:  # noqa: BLE001 - OSError or a tf.errors.* of a remote folder
        names = []
    prefixes = [name[:-len(".index")] for name in names if name.endswith(".index")]
    if prefixes:
        return ("%s: folder has no 'checkpoint' state file: give the checkpoint prefix, e.g. %s"
                % (folder, os.path.join(folder, prefixes[-1])))
    return ("%s: folder holds no checkpoint%s (no TF1 'checkpoint' state file or .index file, "
            "no Hugging Face model.safetensors)" % (folder, "" if names else ": it is empty"))


def checkpoint_reader(prefix: str):
    """The reader of the checkpoint at ``prefix`` (``.index`` + data files), by its prefix.

    Not ``tf.train.load_checkpoint``/``list_variables``: they take a path that is a folder to
    mean "the newest checkpoint in it", and TensorFlow's ram:// filesystem (the in-process
    stand-in for gs:// in tests) calls every prefix a folder.

    Args:
        prefix: the checkpoint prefix (not a folder).

    Returns:
        A ``CheckpointReader`` (``has_tensor``, ``get_tensor``, ``get_variable_to_shape_map``).
    """
    import tensorflow as tf

    return tf.compat.v1.train.NewCheckpointReader(prefix)


def read_tensor(reader, prefix: str, name: str):
    """``reader.get_tensor(name)``; a damaged or truncated data file (TensorFlow raises
    ``IndexError: Read less bytes than requested``, ``DataLossError``, ...) is a
    ``CheckpointError`` naming the checkpoint and the variable.

    Args:
        reader: a ``checkpoint_reader``.
        prefix: its checkpoint prefix, for the message.
        name: the variable's name in the checkpoint.

    Returns:
        The numpy array.
    """
    import tensorflow as tf

    try:
        return reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise CheckpointError("%s: cannot read variable %s (%s): the checkpoint's data file is "
                              "damaged or truncated" % (prefix, name, first_line(e))) from None


def tf1_checkpoint_source(ckpt_prefix: str) -> _Source:
    """Lazy reader of a TF1 (V2-format) checkpoint: names, shapes, tensors on demand (a tensor
    that cannot be read raises ``CheckpointError``, see ``read_tensor``).

    Args:
        ckpt_prefix: a checkpoint prefix, or a folder with a ``checkpoint`` state file.

    Returns:
        A source for ``assign_tf1_values``.

    Raises:
        CheckpointError: no such checkpoint, or an unreadable one.
    """
    import tensorflow as tf

    prefix = _resolve_tf1_prefix(ckpt_prefix)
    try:
        reader = checkpoint_reader(prefix)
        shapes = {name: tuple(shape) for name, shape in
                  reader.get_variable_to_shape_map().items()}
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise CheckpointError("%s: cannot read checkpoint (%s)" % (prefix, first_line(e))) from None
    return _Source(prefix, shapes, lambda name: read_tensor(reader, prefix, name))


def array_source(description: str, arrays: Mapping[str, np.ndarray]) -> _Source:
    """A source from in-memory TF1-named arrays (e.g. converted Hugging Face weights).

    Args:
        description: what to call the source in reports.
        arrays: TF1 name -> array.

    Returns:
        A source for ``assign_tf1_values``.
    """
    return _Source(description, {k: tuple(np.shape(v)) for k, v in arrays.items()},
                   lambda name: arrays[name])


def load_tf1_checkpoint(model, ckpt_prefix: str, log: bool = True) -> LoadReport:
    """Loads Google-named TF1 checkpoint variables into ``model`` in place; returns the report.

    Args:
        model: a built Keras model.
        ckpt_prefix: a TF1 checkpoint prefix or folder.
        log: log the report's summary.

    Returns:
        The ``LoadReport``.
    """
    report = assign_tf1_values(model, tf1_checkpoint_source(ckpt_prefix))
    if log:
        logging.info("%s", report.summary())
    return report


def read_tf1_checkpoint(ckpt_prefix: str) -> Dict[str, np.ndarray]:
    """Every tensor of a TF1 checkpoint as a dict name -> numpy array.

    Args:
        ckpt_prefix: a TF1 checkpoint prefix or folder.

    Returns:
        The dict (optimizer slots and ``global_step`` included).
    """
    source = tf1_checkpoint_source(ckpt_prefix)
    return {name: source.read(name) for name in source.shapes}


# ---------------------------------------------------------------------------------- writing

def model_tf1_arrays(model) -> Dict[str, np.ndarray]:
    """Every mapped model variable as TF1 name -> numpy array in the TF1 layout.

    Args:
        model: a built Keras model.

    Returns:
        The dict (unmapped variables left out).
    """
    arrays = {}
    for name, (variable, transpose) in tf1_variable_map(model).items():
        value = np.asarray(variable.numpy())
        arrays[name] = np.ascontiguousarray(value.T) if transpose else value
    return arrays


def write_tf1_arrays(arrays: Mapping[str, np.ndarray], prefix: str) -> str:
    """Writes TF1-named arrays as a V2 checkpoint at ``prefix`` (+ a ``checkpoint`` state file).

    The files are written under temporary names in the same folder and renamed at the end.
    Returns the prefix.

    Args:
        arrays: TF1 name -> array.
        prefix: the checkpoint prefix to write (local or ``gs://``).

    Returns:
        The prefix written (absolute for a local path).

    Raises:
        CheckpointError: the folder cannot be written.
    """
    import tensorflow as tf

    folder = os.path.dirname(files.abspath(prefix))
    try:
        atomic.check_output_folder(prefix)
    except OSError as e:
        raise CheckpointError("%s: %s" % (prefix, e)) from None
    base = os.path.basename(prefix)
    names = sorted(arrays)
    tensors = [tf.convert_to_tensor(np.asarray(arrays[n])) for n in names]
    with atomic_prefix(os.path.join(folder, base), (".data-00000-of-00001", ".index")) as tmp:
        tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names,
                          shape_and_slices=[""] * len(names), tensors=tensors)
    with atomic.atomic_open(os.path.join(folder, "checkpoint")) as f:
        f.write('model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n'
                % (base, base))
    return os.path.join(folder, base)


def save_tf1_checkpoint(model, prefix: str, global_step: Optional[int] = None) -> str:
    """Writes the model's variables under Google's TF1 names (kernels [in, out], NSP/heads
    ``output_weights`` [K, H]) to ``prefix``; optionally a ``global_step`` (int64). Returns it.

    Args:
        model: a built Keras model.
        prefix: the checkpoint prefix to write.
        global_step: written as the int64 ``global_step`` if given.

    Returns:
        The prefix written.
    """
    arrays: Dict[str, np.ndarray] = dict(model_tf1_arrays(model))
    skipped = unmapped_variables(model)
    if skipped:
        logging.warning("not written (no TF1 name): %s", ", ".join(skipped))
    if global_step is not None:
        arrays["global_step"] = np.asarray(global_step, dtype=np.int64)
    return write_tf1_arrays(arrays, prefix)
