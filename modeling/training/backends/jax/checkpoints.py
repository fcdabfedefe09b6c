"""JAX's checkpoint store: Orbax (``orbax-checkpoint``, the ``jax`` extra) in
``<output_dir>/jax_checkpoints/<step>/``: every model and optimizer value (the dropout seed
generators among them) as one sharded PyTree (``state``), and the step, the records read (the
input's position) and the variables' paths (checked on restore) as JSON (``meta``). Every
process of a run saves and restores its own shards; Orbax writes a step into a temporary
folder and names it only when complete (on ``gs://``, a ``commit_success.txt``), so an
interrupted save is never taken for a checkpoint. The newest ``--keep_checkpoint_max`` are kept.

The input's own state (``inputs.TFDataInput``'s tf.data iterator) is written beside it first
(``<output_dir>/jax_input/<step>.*``: by process 0 where every process reads the same stream;
``<step>.<share>.*`` by each process where each reads its own part), so a checkpoint found
always has it; one left without its checkpoint (a kill between the two) is removed.

The store before Orbax, ``<output_dir>/jax-ckpt-<step>.npz`` (written whole by one process;
its input state ``jax-ckpt-<step>.input.*``), is still read: a run whose folder holds one
resumes from it once, then writes Orbax checkpoints; the file is left as it was.

Example (``KERAS_BACKEND=jax``)::

    path = save_checkpoint("out", state, model, optimizer, step=100, records=3200, keep=5)
    step, records = restore_checkpoint(path, model, optimizer)  # into the variables
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import re
import zipfile
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from bert_common import files as fs
from bert_common.errors import InputError, first_line

ORBAX_DIR = "jax_checkpoints"
INPUT_DIR = "jax_input"
CHECKPOINT_PATTERN = re.compile(r"^jax-ckpt-(\d+)\.npz$")  # the store before Orbax


def _orbax(folder: str = ""):
    """``orbax.checkpoint``; where it is not installed (or, for a ``gs://`` ``folder``,
    ``google-cloud-storage``, which Orbax asks for the bucket's layout), one line saying how
    to install it."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise InputError("JAX's checkpoints need orbax-checkpoint: pip install "
                         "'orbax-checkpoint==0.12.8' (or this project's '.[jax]' extra)") from None
    if folder.startswith("gs://"):
        try:
            importlib.import_module("google.cloud.storage")
        except ImportError:
            raise InputError("%s: JAX's checkpoints on gs:// need google-cloud-storage: pip "
                             "install google-cloud-storage (or this project's '.[jax]' extra)"
                             % folder) from None
    return ocp


class _QuietOrbax(logging.Filter):
    """Orbax's warnings and errors only: it logs a dozen INFO lines per save through absl's
    logger, which the tools set to INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or (
            "/orbax/" not in record.pathname and "/etils/" not in record.pathname)


def _manager(root: str, keep: int = 0, read_only: bool = False):
    """Orbax's ``CheckpointManager`` over the steps in ``root`` (``<output_dir>/
    jax_checkpoints``; synchronous saves)."""
    ocp = _orbax(root)

    absl_logger = logging.getLogger("absl")
    if not any(isinstance(f, _QuietOrbax) for f in absl_logger.filters):
        absl_logger.addFilter(_QuietOrbax())

    # cleanup_tmp_directories: a step that a killed run left half-written (under its temporary
    # name, never listed) is removed by the next run's first save
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep or None, create=not read_only, read_only=read_only,
        enable_async_checkpointing=False, cleanup_tmp_directories=not read_only)
    return ocp.CheckpointManager(
        root, options=options,
        item_handlers={"state": ocp.StandardCheckpointHandler(),
                       "meta": ocp.JsonCheckpointHandler()})


def _step_of(path: str) -> Tuple[str, int]:
    """(the steps' folder, step) of an Orbax checkpoint path ``<steps' folder>/<step>``."""
    root, step = os.path.split(path.rstrip("/"))
    return root, int(step)


def input_state_prefix(checkpoint: str) -> str:
    """Where ``checkpoint``'s input state goes (a ``tf.train.Checkpoint`` prefix): beside an
    Orbax step, ``<output_dir>/jax_input/<step>``; beside an npz file of the store before it,
    ``jax-ckpt-<step>.input``.

    Args:
        checkpoint: a checkpoint path (``checkpoints_in``'s).
    """
    if checkpoint.endswith(".npz"):
        return checkpoint[:-len(".npz")] + ".input"
    root, step = _step_of(checkpoint)
    return os.path.join(os.path.dirname(root), INPUT_DIR, str(step))


def checkpoints_in(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of the JAX checkpoints in ``folder``, oldest first: Orbax's complete
    steps (``folder/jax_checkpoints/<step>``) and the npz files of the store before it (an
    Orbax one first where both have a step).

    Args:
        folder: the output folder.
    """
    found = []
    for path in fs.glob(os.path.join(folder, "jax-ckpt-*.npz")):
        match = CHECKPOINT_PATTERN.match(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), 0, path))
    # Orbax's complete steps, by their names (no manager: every process of a run lists them,
    # not always together): a step is written under a temporary name, renamed when complete,
    # and marked complete (its commit_success.txt, what gs:// goes by).
    for path in fs.glob(os.path.join(folder, ORBAX_DIR, "*", "commit_success.txt")):
        step = os.path.basename(os.path.dirname(path))
        if step.isdigit():
            found.append((int(step), 1, os.path.dirname(path)))
    return [(step, path) for step, _, path in sorted(found)]


def save_checkpoint(folder: str, state, model, optimizer, step: int, records: int,
                    keep: int, data=None, writer: bool = True) -> str:
    """``folder/jax_checkpoints/<step>`` (Orbax, complete or not there), then only the newest
    ``keep`` kept. Every process of a run calls it (each writes its shards).

    Args:
        folder: the output folder.
        state: the ``TrainState``.
        model: the model (its variable paths are recorded, checked on restore).
        optimizer: the optimizer (likewise).
        step: the global step.
        records: examples read so far (the input position).
        keep: checkpoints kept (``--keep_checkpoint_max``; 0 keeps all).
        data: the training input (``TFDataInput`` saves its iterator state first), or None.
        writer: this process writes the run's input state (unless each process has its own
            ``share``) and removes what is dropped (process 0).

    Returns:
        The path written.
    """
    ocp = _orbax(folder)

    meta = {"step": step, "records": records,
            "variables": [v.path for v in model.trainable_variables],
            "non_trainable": [v.path for v in model.non_trainable_variables],
            "optimizer": [v.path for v in optimizer.variables]}
    path = os.path.join(folder, ORBAX_DIR, str(step))
    share = getattr(data, "share", "")  # an input of each process's own (inputs.TFDataInput)
    own_input = data is not None and (writer or bool(share))
    if own_input:
        data.save(path)  # before the checkpoint: a checkpoint found has its input state
    manager = _manager(os.path.join(folder, ORBAX_DIR), keep)
    try:
        manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave({"trainable": state.trainable,
                                         "non_trainable": state.non_trainable,
                                         "optimizer": state.optimizer}),
            meta=ocp.args.JsonSave(meta)), force=True)
        manager.wait_until_finished()
    finally:
        manager.close()
    if own_input:  # the states of the checkpoints dropped (each process its own)
        remove_orphan_input_states(folder, [p for _, p in checkpoints_in(folder)], share=share)
    return path


def remove_orphan_input_states(folder: str, checkpoints: List[str],
                               share: Optional[str] = None) -> List[str]:
    """Removes the input states (``jax_input/<step>[.<share>].*``; ``jax-ckpt-<step>.input.*``
    of the store before Orbax) whose checkpoint is not in ``checkpoints``: those of the
    checkpoints dropped (``--keep_checkpoint_max``), and one that a run killed between writing
    the state and its checkpoint left.

    Args:
        folder: the output folder.
        checkpoints: the checkpoint paths found there.
        share: only the states of this ``inputs.TFDataInput.share`` ("": the run's one
            state; what a process removes after its save), or None: every process's (at a
            run's start, by process 0).

    Returns:
        The paths removed.
    """
    kept = {input_state_prefix(path) for path in checkpoints}
    removed = []

    def gone(path, prefix):
        if prefix not in kept:
            fs.remove(path)
            removed.append(path)

    if share is None:  # the store before Orbax: jax-ckpt-<step>.input.*
        for path in fs.glob(os.path.join(folder, "jax-ckpt-*.input.*")):
            name = os.path.basename(path)
            step = name[:name.index(".input.")]
            if CHECKPOINT_PATTERN.match(step + ".npz"):
                gone(path, os.path.join(folder, step + ".input"))
    for path in fs.glob(os.path.join(folder, INPUT_DIR, "*.*")):
        step, rest = os.path.basename(path).split(".", 1)
        # <step>.index, <step>.data-*: the run's one state; <step>.<share>.*: a process's
        if step.isdigit() and (share is None or (rest.startswith(share + ".") if share
                                                 else "." not in rest)):
            gone(path, os.path.join(folder, INPUT_DIR, step))
    return removed


def read_checkpoint(path: str) -> Tuple[Dict[str, np.ndarray], dict]:
    """A checkpoint's values as numpy arrays, named ``t<i>`` (the model's trainable variables,
    in order), ``n<i>`` (its other variables) and ``o<i>`` (the optimizer's), and its meta
    (``step``, ``records``, the variables' paths), from either store: to look into one, or
    compare two, in one process.

    Args:
        path: a checkpoint (``checkpoints_in``'s).

    Returns:
        ``(arrays, meta)``.

    Raises:
        InputError: a damaged checkpoint.
    """
    if path.endswith(".npz"):
        try:
            with fs.open(path, "rb") as f:
                data = np.load(io.BytesIO(f.read()))
                arrays = {k: data[k] for k in data.files}
            return arrays, json.loads(bytes(arrays.pop("meta")).decode("utf-8"))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise InputError("%s: damaged checkpoint (%s)" % (path, e)) from None
    ocp = _orbax(path)

    root, step = _step_of(path)
    manager = _manager(root, read_only=True)
    try:
        saved = manager.item_metadata(step)["state"].tree
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_on_one_device(saved)),
            meta=ocp.args.JsonRestore()))
    except Exception as e:  # noqa: BLE001 - Orbax and tensorstore raise many kinds
        raise InputError("%s: damaged checkpoint (%s)" % (path, first_line(e))) from None
    finally:
        manager.close()
    arrays = {}
    for prefix, key in (("t", "trainable"), ("n", "non_trainable"), ("o", "optimizer")):
        for index, value in enumerate(restored["state"][key]):
            arrays["%s%d" % (prefix, index)] = np.asarray(value)
    return arrays, restored["meta"]


def _take(arrays, prefix: str, count: int) -> List[np.ndarray]:
    return [arrays["%s%d" % (prefix, i)] for i in range(count)]


def _on_one_device(saved):
    """The restore target of Orbax's metadata tree ``saved``: each value whole on this process's
    first device (whatever devices wrote it)."""
    import jax

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        saved)


def _check_paths(path: str, meta: dict, model, optimizer=None) -> None:
    if meta["variables"] != [v.path for v in model.trainable_variables]:
        raise InputError("%s: a checkpoint of another model (its variables differ from this "
                         "run's); use another --output_dir" % path)
    if optimizer is not None and meta["optimizer"] != [v.path for v in optimizer.variables]:
        raise InputError("%s: a checkpoint of another optimizer (its variables differ from this "
                         "run's); use another --output_dir" % path)


def _restore_orbax(path: str, model, optimizer=None) -> Tuple[dict, dict]:
    """Orbax checkpoint ``path``'s values, as the variables lay them out (each process its
    shards); the optimizer's (fully replicated) only with ``optimizer``. ``(state, meta)``."""
    import jax
    ocp = _orbax(path)

    root, step = _step_of(path)
    manager = _manager(root, read_only=True)
    try:
        meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        _check_paths(path, meta, model, optimizer)

        def like(variables):
            return [jax.ShapeDtypeStruct(v.value.shape, v.value.dtype,
                                         sharding=v.value.sharding) for v in variables]

        target = {"trainable": like(model.trainable_variables),
                  "non_trainable": like(model.non_trainable_variables)}
        if optimizer is not None:
            target["optimizer"] = like(optimizer.variables)
        else:  # the values that are not read, restored on one device
            target["optimizer"] = _on_one_device(
                manager.item_metadata(step)["state"].tree)["optimizer"]
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target)))["state"]
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - Orbax and tensorstore raise many kinds
        raise InputError("%s: damaged checkpoint (%s)" % (path, first_line(e))) from None
    finally:
        manager.close()
    return restored, meta


def assign(model, optimizer, state: Mapping[str, List]) -> None:
    """``state``'s lists of values into the model's variables, and the optimizer's.

    Args:
        model: the model.
        optimizer: its optimizer, or None (the model's values only).
        state: ``{"trainable", "non_trainable", "optimizer"}`` lists of values in the
            variables' order (``steps.TrainState``'s fields).
    """
    # Through the variables, from which a fresh run's state is made too
    # (``steps.TrainState.from_model``): the values placed and laid out alike, so a resumed run
    # calls the step a fresh run compiles (other values would make it trace and compile
    # programs of its own).
    pairs = [("trainable", model.trainable_variables),
             ("non_trainable", model.non_trainable_variables)]
    if optimizer is not None:
        pairs.append(("optimizer", optimizer.variables))
    for key, variables in pairs:
        for variable, value in zip(variables, state[key]):
            variable.assign(value)


def _load(path: str, model, optimizer=None) -> dict:
    """Checkpoint ``path`` (an Orbax step or an npz file) into the model's variables, and the
    optimizer's with ``optimizer``; its metadata."""
    if path.endswith(".npz"):
        arrays, meta = read_checkpoint(path)
        _check_paths(path, meta, model, optimizer)
        state = {"trainable": _take(arrays, "t", len(model.trainable_variables)),
                 "non_trainable": _take(arrays, "n", len(model.non_trainable_variables))}
        if optimizer is not None:
            state["optimizer"] = _take(arrays, "o", len(optimizer.variables))
    else:
        state, meta = _restore_orbax(path, model, optimizer)
    assign(model, optimizer, state)
    return meta


def restore_checkpoint(path: str, model, optimizer) -> Tuple[int, int]:
    """A checkpoint written by this run's model into its variables and the optimizer's; returns
    its ``(step, records)``.

    Args:
        path: the checkpoint (``checkpoints_in``'s: an Orbax step, or an npz file).
        model: the model.
        optimizer: its optimizer, built.

    Returns:
        ``(step, records)``.

    Raises:
        InputError: a damaged checkpoint, or one of another model or optimizer.
    """
    meta = _load(path, model, optimizer)
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
    _load(path, model)
    return path, step
