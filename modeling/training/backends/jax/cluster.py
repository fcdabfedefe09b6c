"""Several JAX processes as one job: the hosts of a TPU pod slice, GPU nodes under SLURM, or
CPU processes on one machine (``jax.distributed``).

``start(settings)`` must be a run's first JAX call (``jax.distributed.initialize`` refuses to
come after any other). Its settings are the tools' flags, named as that function's arguments:

* ``--coordinator_address=HOST:PORT --num_processes=N --process_id=I``: process ``I`` of
  ``N``; process 0 serves the coordinator at ``HOST:PORT`` (every process gives the same).
* none of them: the cluster JAX detects by itself (``srun`` of a SLURM job with several
  tasks; a Cloud TPU VM, whose slice may have several hosts), else one process, as before.

Then every device of every process is in one data-parallel mesh (``steps.distribute``). Each
process puts its own rows of every global batch on its devices: process ``p`` of ``N`` the
``p``-th ``N``-th of the batch, the rows its devices hold in the mesh (``device_places``).
Either it reads the stream of global batches and keeps its rows (``local_rows``: the
fine-tuning tools, the numpy readers), or it reads only its devices' part of the input
(pre-training's ``device_rows_dataset``, its state saved under ``input_share``). Either way
``N`` processes of ``k`` devices train on the very batches of one process with ``N x k``
devices: the same bits.
Process 0 alone writes the step log, summaries, progress, exports and results
(``is_writer``); every process writes its own shards of each checkpoint (Orbax:
``checkpoints``). On CPUs the processes all-reduce with gloo over TCP.

What stops a run with one line and exit 1: a process id out of range, ``--num_processes``
without a coordinator (or the reverse), processes that do not all join within
``--initialization_timeout`` seconds (no coordinator at the address, processes that disagree
on ``--num_processes``: a watchdog speaks a second before JAX's client would abort the process
with its stack traces), a cluster whose size is not the ``--num_processes`` given. A process
that dies mid-run: the others' next all-reduce fails as its connections close (``peer_failure``
words it). One that hangs without dying: JAX's coordinator stops the others after
``HEARTBEAT_TIMEOUT_S`` without its heartbeats (JAX's own message). A process that joined a
cluster leaves at once on an error (``joined``): at a normal exit JAX would wait for its peers.

Example (two CPU processes on one machine, one per shell)::

    KERAS_BACKEND=jax python run_pretraining.py ... --coordinator_address=127.0.0.1:12355 \\
        --num_processes=2 --process_id=0
    KERAS_BACKEND=jax python run_pretraining.py ... --coordinator_address=127.0.0.1:12355 \\
        --num_processes=2 --process_id=1
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from bert_common import errors
from bert_common.errors import FlagError, InputError, first_line

# After this long without a heartbeat from a process, the coordinator takes it for dead and
# stops the others (JAX's default is 100 s).
HEARTBEAT_TIMEOUT_S = 60


# The processes of this process's cluster once ``start`` joined one (1: none).
_JOINED = [1]


class ClusterError(InputError):
    """The processes of a run do not make one cluster (one line for the user)."""


def joined() -> int:
    """The processes of the cluster this process joined (1: none, or not yet). A process that
    joined one ends at once on an error (``bert_cli.runner``): at a normal exit JAX would
    wait for its peers to end too."""
    return _JOINED[0]


def _get(settings: Any, name: str, default=None):
    value = getattr(settings, name, default)
    return default if value is None else value


def check_flags(settings: Any) -> None:
    """The cluster flags' own checks (before anything starts).

    Args:
        settings: the run's settings (a tool's flag values), read by attribute.

    Raises:
        FlagError: a process id out of range, or a process count or id without the
            coordinator (or the reverse).
    """
    address = _get(settings, "coordinator_address")
    count = _get(settings, "num_processes")
    index = _get(settings, "process_id")
    if address is None and count is None and index is None:
        return
    if not address or count is None or index is None:
        raise FlagError("--coordinator_address, --num_processes and --process_id go together "
                        "(given: %s)" % ", ".join(
                            "--%s" % n for n, v in (("coordinator_address", address),
                                                    ("num_processes", count),
                                                    ("process_id", index)) if v is not None))
    if ":" not in address:
        raise FlagError("--coordinator_address=%s: HOST:PORT" % address)
    if count < 1:
        raise FlagError("--num_processes=%d: at least 1" % count)
    if not 0 <= index < count:
        raise FlagError("--process_id=%d: out of range for --num_processes=%d (0 to %d)"
                        % (index, count, count - 1))
    if _get(settings, "initialization_timeout", 300) < 1:
        raise FlagError("--initialization_timeout=%d: at least 1 second"
                        % settings.initialization_timeout)


def _detected() -> bool:
    """Whether JAX would find a cluster by itself where no flag names one: a SLURM job step of
    several tasks, or a Cloud TPU VM (JAX's own test; its slice may have several hosts)."""
    if int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in os.environ:
        return True
    try:
        from jax._src import cloud_tpu_init
    except ImportError:
        return False
    return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def start(settings: Any) -> int:
    """Joins this process to its cluster (see the module); the number of processes (1: none).

    Args:
        settings: the run's settings (a tool's flag values), read by attribute.

    Returns:
        The processes of the run.

    Raises:
        FlagError: bad cluster flags (``check_flags``).
        ClusterError: the coordinator did not answer in time, or the cluster is not the one
            the flags describe.
    """
    import jax

    check_flags(settings)
    address = _get(settings, "coordinator_address")
    count = _get(settings, "num_processes")
    if address is None and not _detected():
        return 1
    if count == 1:
        return 1
    timeout = int(_get(settings, "initialization_timeout", 300))
    # CPU processes all-reduce with gloo (the default CPU client has no collectives across
    # processes); GPU and TPU clients ignore the setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = "--coordinator_address=%s" % address if address else "the detected cluster"
    joining = ("%s: the processes did not join within --initialization_timeout=%d s (is "
               "process 0 running and the address reachable from here; do all processes give "
               "the same --num_processes?)" % (where, timeout))
    # JAX's client aborts the process (with its stack traces) when its own deadline passes:
    # this one line comes first.
    watchdog = threading.Timer(max(timeout - 1.0, 0.5), errors.fatal, args=(joining,))
    watchdog.daemon = True
    watchdog.start()
    try:
        if address is None:
            jax.distributed.initialize(initialization_timeout=timeout,
                                       heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
        else:
            jax.distributed.initialize(address, count, int(settings.process_id),
                                       initialization_timeout=timeout,
                                       heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - JAX raises its runtime's errors (no one class)
        raise ClusterError("%s: %s" % (joining, first_line(e))) from None
    finally:
        watchdog.cancel()
    _JOINED[0] = jax.process_count()
    if count is not None and jax.process_count() != count:
        raise ClusterError("--num_processes=%d, but the cluster of --coordinator_address=%s "
                           "has %d processes" % (count, address, jax.process_count()))
    return jax.process_count()


def leave() -> None:
    """Leaves the cluster this process joined, once every process of it leaves too (JAX's
    shutdown barrier): a run that succeeded ends so, else a process that ends first takes the
    coordinator (process 0) or its peers' connections away from the others, whose runtime
    then aborts them. Nothing without a cluster."""
    if joined() > 1:
        import jax

        jax.distributed.shutdown()
        _JOINED[0] = 1


def peer_failure(e: BaseException) -> Optional[str]:
    """The one line for ``e`` if it is the JAX runtime's error in a cluster this process
    joined (a collective whose peer's connection closed), else None.

    Args:
        e: the exception.

    Returns:
        The line, or None.
    """
    if joined() <= 1:
        return None
    text = first_line(e)
    # JAX's runtime error in a collective, or Orbax's own sync (it rewords the same failure)
    if (type(e).__name__ not in ("JaxRuntimeError", "XlaRuntimeError")
            and "Gloo" not in text):
        return None
    return "a process of the cluster stopped (%s)" % text


def process_index() -> int:
    """This process's index (0 without a cluster)."""
    import jax

    return jax.process_index()


def process_count() -> int:
    """The run's processes (1 without a cluster)."""
    import jax

    return jax.process_count()


def is_writer() -> bool:
    """Whether this process writes the run's files (process 0)."""
    return process_index() == 0


def mesh_devices() -> list:
    """Every device of every process in the data-parallel mesh's order (``steps.distribute``):
    by process, then by id, so that process ``p`` of ``N`` holds the ``p``-th ``N``-th of each
    global batch, its rows contiguous (``local_rows``, ``device_places``), whatever order the
    runtime lists its devices in."""
    import jax

    return sorted(jax.devices(), key=lambda device: (device.process_index, device.id))


def device_places() -> Tuple[List[int], int]:
    """This process's devices' places in the data-parallel mesh (``mesh_devices``), and the
    devices in all.

    Returns:
        ``([i, i + 1, ...], D)``.
    """
    devices = mesh_devices()
    mine = [i for i, device in enumerate(devices) if device.process_index == process_index()]
    return mine, len(devices)


def input_share(deterministic: bool) -> str:
    """The name of this process's part of a pre-training input that each process reads for
    its own devices (``data.pretraining.dataset.device_rows_dataset``; its state is saved
    under it), or "" where the one process reads the input as one run would on one device
    (the same state): ``process-<p>-of-<N>-devices-<D>``.

    Args:
        deterministic: the input is the global stream in file order (one pipeline on one
            process, whatever its devices).
    """
    places, count = device_places()
    if process_count() == 1 and (deterministic or count == 1):
        return ""
    return "process-%d-of-%d-devices-%d" % (process_index(), process_count(), count)


def local_rows(batch: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """This process's rows of a global batch: the ``p``-th ``N``-th (process ``p`` of ``N``),
    the rows that its devices hold in the data-parallel mesh; the batch itself in one process.

    Args:
        batch: name -> array [B, ...], B divisible by the processes.

    Returns:
        name -> array [B / N, ...].
    """
    count = process_count()
    if count == 1:
        return dict(batch)
    index = process_index()
    out = {}
    for name, value in batch.items():
        rows = np.shape(value)[0] // count
        out[name] = value[index * rows:(index + 1) * rows]
    return out
