"""JAX's checkpoint store: ``<output_dir>/jax-ckpt-<step>.npz``, written atomically by one
process: every model and optimizer value (the dropout seed generators among them), the step and
the records read (the input's position), with the variables' paths (checked on restore). The
input's own state (``inputs.TFDataInput``'s iterator) is written beside it first, so a
checkpoint found always has it; one left without its checkpoint (a kill between the two) is
removed. Orbax replaces this store in the multi-host issue.

Example (``KERAS_BACKEND=jax``)::

    path = save_checkpoint("out", state, model, optimizer, step=100, records=3200, keep=5)
    step, records = restore_checkpoint(path, model, optimizer)  # into the variables
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from bert_common import atomic
from bert_common import files as fs
from bert_common.errors import InputError

CHECKPOINT_PATTERN = re.compile(r"^jax-ckpt-(\d+)\.npz$")


def checkpoints_in(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of the JAX checkpoints in ``folder``, oldest first.

    Args:
        folder: the output folder.
    """
    found = []
    for path in fs.glob(os.path.join(folder, "jax-ckpt-*.npz")):
        match = CHECKPOINT_PATTERN.match(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(folder: str, state, model, optimizer, step: int, records: int,
                    keep: int, data=None) -> str:
    """``folder/jax-ckpt-<step>.npz`` (atomic), then only the newest ``keep`` kept.

    Args:
        folder: the output folder.
        state: the ``TrainState``.
        model: the model (its variable paths are recorded, checked on restore).
        optimizer: the optimizer (likewise).
        step: the global step.
        records: examples read so far (the input position).
        keep: checkpoints kept (``--keep_checkpoint_max``; 0 keeps all).
        data: the training input (``TFDataInput`` saves its iterator state first), or None.

    Returns:
        The path written.
    """
    import jax

    arrays = {}
    for prefix, values in (("t", state.trainable), ("n", state.non_trainable),
                           ("o", state.optimizer)):
        for index, value in enumerate(jax.device_get(values)):
            arrays["%s%d" % (prefix, index)] = np.asarray(value)
    meta = {"step": step, "records": records,
            "variables": [v.path for v in model.trainable_variables],
            "non_trainable": [v.path for v in model.non_trainable_variables],
            "optimizer": [v.path for v in optimizer.variables]}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = os.path.join(folder, "jax-ckpt-%d.npz" % step)
    if data is not None:
        data.save(path)  # before the checkpoint: a checkpoint found has its input state
    with atomic.atomic_open(path, "wb") as f:
        f.write(buffer.getvalue())
    if keep > 0:
        for _, old in checkpoints_in(folder)[:-keep]:
            fs.remove(old)
            if data is not None:
                data.remove(old)
    return path


def remove_orphan_input_states(folder: str, checkpoints: List[str]) -> List[str]:
    """Removes the input states (``jax-ckpt-<step>.input.*``) whose checkpoint is not in
    ``checkpoints``: a run killed between writing the state and its checkpoint leaves one.

    Args:
        folder: the output folder.
        checkpoints: the checkpoint paths found there.

    Returns:
        The paths removed.
    """
    kept = {os.path.basename(path)[:-len(".npz")] for path in checkpoints}
    removed = []
    for path in fs.glob(os.path.join(folder, "jax-ckpt-*.input.*")):
        name = os.path.basename(path)
        step = name[:name.index(".input.")]
        if CHECKPOINT_PATTERN.match(step + ".npz") and step not in kept:
            fs.remove(path)
            removed.append(path)
    return removed


def _read_checkpoint(path: str, model) -> Tuple[Dict[str, np.ndarray], dict]:
    try:
        with fs.open(path, "rb") as f:
            data = np.load(io.BytesIO(f.read()))
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise InputError("%s: damaged checkpoint (%s)" % (path, e)) from None
    if meta["variables"] != [v.path for v in model.trainable_variables]:
        raise InputError("%s: a checkpoint of another model (its variables differ from this "
                         "run's); use another --output_dir" % path)
    return arrays, meta


def _take(arrays, prefix: str, count: int) -> List[np.ndarray]:
    return [arrays["%s%d" % (prefix, i)] for i in range(count)]


def restore_checkpoint(path: str, model, optimizer) -> Tuple[int, int]:
    """A checkpoint written by this run's model into its variables and the optimizer's; returns
    its ``(step, records)``.

    Args:
        path: the checkpoint.
        model: the model.
        optimizer: its optimizer, built.

    Returns:
        ``(step, records)``.

    Raises:
        InputError: a damaged file, or one of another model or optimizer.
    """
    arrays, meta = _read_checkpoint(path, model)
    if meta["optimizer"] != [v.path for v in optimizer.variables]:
        raise InputError("%s: a checkpoint of another optimizer (its variables differ from this "
                         "run's); use another --output_dir" % path)
    # Through the variables, from which a fresh run's state is made too
    # (``steps.TrainState.from_model``): the values placed and laid out alike, so a resumed run
    # calls the step a fresh run compiles (numpy values would make it trace and compile
    # programs of its own).
    for prefix, variables in (("t", model.trainable_variables),
                              ("n", model.non_trainable_variables), ("o", optimizer.variables)):
        for variable, value in zip(variables, _take(arrays, prefix, len(variables))):
            variable.assign(value)
    return meta["step"], meta["records"]


def restore_newest_model(folder: str, model) -> Optional[Tuple[str, int]]:
    """The model's values from the newest checkpoint in ``folder`` (evaluating or predicting
    without training), or None when there is none.

    Args:
        folder: the output folder.
        model: the model.

    Returns:
        ``(path, step)`` of the checkpoint read, or None.

    Raises:
        InputError: as ``restore_checkpoint``.
    """
    own = checkpoints_in(folder)
    if not own:
        return None
    step, path = own[-1]
    arrays, _ = _read_checkpoint(path, model)
    for prefix, variables in (("t", model.trainable_variables),
                              ("n", model.non_trainable_variables)):
        for variable, value in zip(variables, _take(arrays, prefix, len(variables))):
            variable.assign(value)
    return path, step
