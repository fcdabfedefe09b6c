"""The one training job of every backend: the loop, resume bookkeeping, step log, progress
lines, TensorBoard scalars and checkpoint cadence, written once.

A backend gives only what differs (``modeling/training/backends/``, as Keras 3's own
``trainers/trainer.py`` + ``backend/<name>/trainer.py``): a ``Steps`` value that restores the
newest checkpoint (model, optimizer, dropout seeds, the input's position), runs a host loop of
compiled steps, and saves. TensorFlow's is ``backends.tensorflow.steps.Trainer``'s (a
``tf.function`` host loop under a ``tf.distribute`` strategy, ``model.ckpt-N`` / ``ckpt-N``
checkpoints with Google's names); JAX's is ``backends.jax.steps.Steps`` (a ``jax.jit`` step,
Orbax's ``jax_checkpoints/N``).

What the job does with them (``train``):

* restores (the backend's newest checkpoint; the step log cut back to its step);
* runs host loops of ``loop_steps`` steps each: they end at checkpoint steps and at
  ``num_train_steps``, run at most ``steps_per_loop`` steps, and are cut short so that a
  progress line shows at least every ``progress_every_s`` (the first loop runs one step: it
  traces and compiles the step). A backend whose workers must run loops of one length
  (MultiWorker: each worker's clock is its own) says so (``Steps.timed`` False);
* after each loop, on the chief (the process that writes): the step log
  (``train_steps.jsonl``: each step's loss, learning rate and global norm), TensorBoard
  scalars in ``model_dir/train`` (the loop's means of the objective's logs, the last step's
  ``learning_rate`` and ``global_norm``, ``examples_per_sec``), and a progress line on stderr
  (step, loss, the logs, learning rate, examples/s, ETA);
* saves every ``save_checkpoints_steps`` and at the end (every process takes part).

``streaming_means`` is the eval loop and ``collect_predictions`` the prediction loop of every
backend (each backend gives the compiled forward).

Example::

    from modeling.training import job
    result = job.train(steps, job.TrainerConfig(model_dir="out", num_train_steps=1000))
    result.global_step, result.step_losses
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

import numpy as np
from absl import logging

from bert_common.progress import Progress, format_eta
from bert_common.results import ScalarWriter
from modeling.training import step_log


@dataclasses.dataclass
class TrainerConfig:
    """The job's settings. The loop's are read by ``train`` on every backend, the checkpoints'
    (``model_dir``, ``keep_checkpoint_max``) by each backend's ``Steps`` too; the step's
    (``num_accumulation_steps``, ``use_xla``, ``fuse_optimizer``, ``fused_kernels``,
    ``checkpoint_name``) by TensorFlow's ``Trainer``, the only backend that has them.

    Attributes:
        model_dir: the checkpoint, summary and step-log folder.
        num_train_steps: the global step to train to.
        steps_per_loop: the most steps one host loop runs.
        save_checkpoints_steps: a checkpoint every this many steps (and at the end; 0: at the
            end only).
        num_accumulation_steps: micro-batches per replica batch (k >= 1), one update.
        keep_checkpoint_max: checkpoints kept in ``model_dir``.
        use_xla: XLA-compile the step (or its forward/backward; see ``execution``).
        fuse_optimizer: XLA-fuse gradient clipping and the update.
        fused_kernels: trace the layers with the fused training kernels.
        write_summaries: write TensorBoard scalars to ``model_dir/train``.
        step_log: write ``train_steps.jsonl`` (one line per step).
        progress: print a progress line after each loop.
        progress_every_s: the longest time between progress lines, in seconds.
        checkpoint_name: the checkpoint file prefix (``<model_dir>/<name>-<step>``).
    """

    model_dir: str
    num_train_steps: int
    steps_per_loop: int = 1000
    save_checkpoints_steps: int = 1000
    num_accumulation_steps: int = 1
    keep_checkpoint_max: int = 5
    use_xla: bool = False
    fuse_optimizer: bool = False
    fused_kernels: bool = False
    write_summaries: bool = True
    step_log: bool = True
    progress: bool = True
    # A host loop is cut short so that a progress line shows at least this often, whatever
    # steps_per_loop is (from the second loop on, by the seconds per step measured so far).
    progress_every_s: float = 30.0
    checkpoint_name: str = "ckpt"  # files <model_dir>/<checkpoint_name>-<step>.{index,data-*}


@dataclasses.dataclass
class TrainResult:
    """What ``train`` returns.

    Attributes:
        global_step: the step reached.
        logs: the last loop's streaming means, by name.
        step_losses: the loss of each step of this run (not of restored steps).
        examples_per_sec: this run's training throughput.
    """
    global_step: int
    logs: Dict[str, float]              # the last loop's streaming means
    step_losses: List[float]            # per step of this run (not of restored steps)
    examples_per_sec: float


@dataclasses.dataclass
class LoopOutput:
    """One host loop's values, as floats on the host.

    Attributes:
        losses: each step's loss.
        learning_rates: the learning rate each step's update used.
        global_norms: each step's gradient global norm (before clipping).
        logs: the loop's means of the objective's logs, ``loss`` among them.
    """
    losses: List[float]
    learning_rates: List[float]
    global_norms: List[float]
    logs: Dict[str, float]


class Steps(Protocol):
    """What a backend gives ``train``.

    Attributes:
        is_chief: this process writes the step log, summaries and progress lines.
        timed: loop lengths may follow this process's clock (False: the fixed lengths alone,
            the same on every worker of a cluster).
    """

    is_chief: bool
    timed: bool

    def restore(self) -> int:
        """Restores the newest checkpoint (model, optimizer, dropout seeds) and opens the input
        at its position; returns its global step (0: none, nothing changed)."""

    def run(self, num_steps: int) -> LoopOutput:
        """``num_steps`` updates (one host loop)."""

    def global_batch(self) -> int:
        """The examples one update reads (after the first loop)."""

    def save(self) -> str:
        """A checkpoint at the current step (atomic: an interrupted save is never found);
        returns its path."""

    def close(self, completed: bool) -> None:
        """After the job (``completed``: it reached its step): the trained values left in the
        model, the input released."""


def loop_steps(step: int, config: TrainerConfig, seconds_per_step: Optional[float]) -> int:
    """How many steps the host loop starting after ``step`` runs.

    Loops end at checkpoint steps and at ``num_train_steps`` and run at most ``steps_per_loop``
    steps. With ``seconds_per_step`` (the last loop's time per step), the loop is cut so that
    a progress line shows at least every ``progress_every_s``; 0.0 (nothing timed yet): one
    step, the loop that traces the step. None: the fixed lengths alone, the same on every
    worker of a cluster. Workers that timed their own loops could pick different lengths, and
    then each waits in a collective that the other never joins: under MultiWorker on a loaded
    2-core host both workers hung in their first loops' all-reduces.

    Args:
        step: the global step the loop starts from.
        config: the job's ``TrainerConfig``.
        seconds_per_step: see above.

    Returns:
        An int >= 1.
    """
    every = _save_every(config)
    next_save = ((step // every) + 1) * every
    num_steps = min(config.steps_per_loop, next_save - step, config.num_train_steps - step)
    if seconds_per_step is None:
        return num_steps
    if not seconds_per_step:
        return 1
    return max(1, min(num_steps, int(config.progress_every_s / seconds_per_step)))


def _save_every(config: TrainerConfig) -> int:
    """Steps between checkpoints (``save_checkpoints_steps``; 0: the end only)."""
    return config.save_checkpoints_steps or max(config.num_train_steps, 1)


def train(steps: Steps, config: TrainerConfig) -> TrainResult:
    """Trains to ``config.num_train_steps`` from the newest checkpoint (see the module).

    Args:
        steps: the backend's ``Steps``.
        config: the job's settings.

    Returns:
        A ``TrainResult``.

    Raises:
        InputError: a damaged or unfitting checkpoint, or bad input data (the backend's).
    """
    completed = False
    writer = None  # made after the first loop: a run that never trains writes no events
    try:
        step = start = steps.restore()
        if start >= config.num_train_steps:
            logging.info("Global step %d >= num_train_steps %d: nothing to train",
                         start, config.num_train_steps)
            completed = True
            return TrainResult(start, {}, [], 0.0)
        log_path = step_log.path_in(config.model_dir)
        if config.step_log and steps.is_chief:
            step_log.truncate(log_path, start)
        all_losses: List[float] = []
        logs: Dict[str, float] = {}
        rate = 0.0
        seconds_per_step = 0.0  # of the last loop
        run_start = time.monotonic()
        while step < config.num_train_steps:
            num_steps = loop_steps(step, config, seconds_per_step if steps.timed else None)
            loop_start = time.monotonic()
            out = steps.run(num_steps)
            elapsed = time.monotonic() - loop_start
            step += num_steps
            rate = num_steps * steps.global_batch() / max(elapsed, 1e-9)
            seconds_per_step = max(elapsed / num_steps, 1e-9)
            logs = out.logs
            all_losses.extend(out.losses)
            if steps.is_chief:
                if writer is None and config.write_summaries:
                    writer = ScalarWriter(os.path.join(config.model_dir, "train"))
                if writer is not None:
                    writer.write(step, dict(logs, learning_rate=out.learning_rates[-1],
                                            global_norm=out.global_norms[-1],
                                            examples_per_sec=rate))
                if config.progress:
                    _progress_line(step, config.num_train_steps, logs, out.learning_rates[-1],
                                   rate, seconds_per_step)
                if config.step_log:
                    step_log.append(log_path, step - num_steps + 1, out.losses,
                                    out.learning_rates, out.global_norms)
            if step % _save_every(config) == 0 or step >= config.num_train_steps:
                path = steps.save()
                if steps.is_chief and config.progress:
                    print("Saved checkpoint for step %d: %s" % (step, path), file=sys.stderr,
                          flush=True)
        logging.info("Trained to step %d in %.1fs", step, time.monotonic() - run_start)
        completed = True
        return TrainResult(step, logs, all_losses, rate)
    finally:
        if writer is not None:
            writer.close()
        steps.close(completed)


def _progress_line(step: int, total: int, logs: Dict[str, float], lr: float, rate: float,
                   seconds_per_step: float) -> None:
    parts = ["train step %d/%d" % (step, total), "loss %.4f" % logs.get("loss", float("nan"))]
    parts += ["%s %.4f" % (n, v) for n, v in sorted(logs.items()) if n != "loss"]
    eta = (total - step) * seconds_per_step
    parts += ["lr %.3g" % lr, "%.1f examples/s" % rate, "ETA %s" % format_eta(eta)]
    print(" ".join(parts), file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ evaluate, predict

def streaming_means(batches: Iterable[Dict[str, Tuple[Any, Any]]], num_steps: int,
                    progress: bool = True) -> Dict[str, float]:
    """The eval loop of every backend: the first ``num_steps`` batches' metric pairs summed,
    then Σnumerator/Σdenominator per name (streaming means, as ``tf.metrics.mean``).

    Args:
        batches: per batch, ``{name: (numerator, denominator)}`` (scalars: floats, numpy or
            tensors), from the backend's compiled forward.
        num_steps: batches to run (fewer, with a warning, when the data runs out).
        progress: whether to show a progress line.

    Returns:
        Σnumerator/Σdenominator per name (float64 sums of the per-batch values; NaN where
        Σdenominator is 0); empty when there was no batch.
    """
    sums: Dict[str, List[float]] = {}
    reporter = Progress("eval", num_steps, unit="steps", enabled=progress)
    done = 0
    for values in itertools.islice(batches, num_steps):
        for name, (a, b) in values.items():
            pair = sums.setdefault(name, [0.0, 0.0])
            pair[0] += float(a)
            pair[1] += float(b)
        done += 1
        reporter.update(done)
    if done < num_steps:
        logging.warning("Eval data ran out after %d of %d steps", done, num_steps)
    return {n: (a / b if b else float("nan")) for n, (a, b) in sums.items()}



def collect_predictions(batches: Iterable[Dict[str, List[np.ndarray]]], count_name: str,
                        total: Optional[int] = None, label: str = "predict"
                        ) -> Dict[str, np.ndarray]:
    """The prediction loop of every backend: each batch's outputs and features (numpy, in
    parts: one per replica, or the batch itself) concatenated in order, with a progress line.

    Args:
        batches: per batch, name -> its parts [b_i, ...] in order.
        count_name: the entry whose rows count the examples done.
        total: the number of examples (for the ETA and the closing count), or None.
        label: the progress line's prefix.

    Returns:
        Name -> [N, ...] (``concatenate_padded``).
    """
    chunks: Dict[str, List[np.ndarray]] = {}
    reporter = Progress(label, total, unit="examples") if total else None
    done = 0
    for parts in batches:
        for name, values in parts.items():
            chunks.setdefault(name, []).extend(values)
        done += sum(len(v) for v in parts[count_name])
        if reporter is not None:
            reporter.update(done)
    if total and done != total:
        logging.info("%s: %d of %d examples", label, done, total)
    return {name: concatenate_padded(values) for name, values in chunks.items()}


def concatenate_padded(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts, axis=0)``; parts whose other axes are shorter (per-token outputs
    of length-trimmed batches, [b, s, ...]) are zero-padded at the end to the longest first.

    Args:
        parts: arrays [b_i, ...].

    Returns:
        [sum b_i, ...].
    """
    rank = parts[0].ndim
    longest = [max(p.shape[axis] for p in parts) for axis in range(1, rank)]
    padded = [p if list(p.shape[1:]) == longest else
              np.pad(p, [(0, 0)] + [(0, n - p.shape[axis + 1]) for axis, n in enumerate(longest)])
              for p in parts]
    return np.concatenate(padded, axis=0)
