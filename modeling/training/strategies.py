"""``tf.distribute`` strategies and mixed precision, one definition.

``make_strategy(name, ...)`` builds a strategy by name and ``set_precision(mixed_precision)`` sets
the Keras dtype policy; the command-line flags that choose them are defined in ``bert_cli.flags``
and read by ``strategy_from_settings(flags or settings)``. Build the strategy before any other
TensorFlow op (multi-worker and TPU set-up must come first)::

    strategy = strategies.make_strategy("mirrored")
    precision = strategies.set_precision("bf16")   # sets the Keras dtype policy
    with strategy.scope():
        model = ...
        optimizer = create_optimizer(..., loss_scale=precision.loss_scale)

Strategies (``--strategy``):

* ``default``: TensorFlow's default strategy (one device: the first GPU if any, else the CPU).
* ``mirrored``: ``MirroredStrategy`` over the local GPUs (``--num_gpus``, 0 = all), or over the
  logical CPU devices when there is no GPU (tests split the CPU into two logical devices).
* ``multi_worker``: ``MultiWorkerMirroredStrategy``; the cluster comes from ``TF_CONFIG``
  (``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``);
  collectives RING on CPU, NCCL on GPU (``--all_reduce_alg``).
* ``tpu``: ``TPUStrategy`` on the Cloud TPU ``--tpu_name`` (or ``--master`` grpc address) in
  ``--tpu_zone`` / ``--gcp_project``; ``--use_tpu`` is the original's spelling of
  ``--strategy=tpu``. Any slice (v2/v3-8, v4-8, v5e-4, a pod slice, ...): the replicas are the
  TPU cores TensorFlow finds; ``--num_tpu_cores`` 0 or unset (the default) takes that number,
  a non-zero value must equal it (``check_tpu_cores``; the original's default of 8 fitted only
  8-core slices).

Precision (``--mixed_precision``): unset = float32; ``bf16`` = Keras ``mixed_bfloat16`` (no loss
scaling needed); ``fp16`` = ``mixed_float16`` with dynamic loss scaling done by the optimizer
(``Precision.loss_scale == "dynamic"``). Variables, the optimizer and the losses stay float32.

Errors (unknown strategy, no TPU reachable, bad ``TF_CONFIG``) raise ``DistributionError`` with
a one-line message naming the flag.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import tensorflow as tf
from bert_common import cluster
from bert_common.errors import InputError, first_line
from modeling.kernels import switch

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
MIXED_PRECISIONS = ("bf16", "fp16")
_POLICIES = {None: "float32", "": "float32", "fp32": "float32", "bf16": "mixed_bfloat16",
             "fp16": "mixed_float16"}


class DistributionError(InputError):
    """A strategy that cannot be built from the flags; the message names the flag."""


# ------------------------------------------------------------------------------- strategies


def make_strategy(name: str = "default", tpu_name: Optional[str] = None,
                  tpu_zone: Optional[str] = None, gcp_project: Optional[str] = None,
                  master: Optional[str] = None, num_tpu_cores: Optional[int] = None,
                  num_gpus: int = 0, all_reduce_alg: str = "auto") -> tf.distribute.Strategy:
    """Builds the strategy ``name`` (one of ``STRATEGIES``); ``DistributionError`` if it can't.

    Args:
        name: the strategy, one of ``STRATEGIES``.
        tpu_name: the TPU (``tpu``); None: ``master``, a local TPU or ``$TPU_NAME``.
        tpu_zone: the TPU's GCE zone (``tpu``).
        gcp_project: the TPU's GCP project (``tpu``).
        master: the TPU master address, when ``tpu_name`` is unset (``tpu``).
        num_tpu_cores: the expected TPU replica count; 0/None: the cores found (``tpu``).
        num_gpus: the GPUs to mirror over; 0: all (``mirrored``).
        all_reduce_alg: ``"auto"``, ``"ring"`` or ``"nccl"`` (``multi_worker``).

    Returns:
        The ``tf.distribute.Strategy``.

    Raises:
        DistributionError: an unknown ``name``, or a strategy that cannot be built.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            devices = [d.name for d in gpus[:num_gpus or len(gpus)]]
        else:
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        return _multi_worker_strategy(all_reduce_alg)
    if name == "tpu":
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, num_tpu_cores)
    raise DistributionError("--strategy=%s: unknown (one of %s)" % (name, ", ".join(STRATEGIES)))


def strategy_from_settings(settings: Any) -> tf.distribute.Strategy:
    """The strategy that ``settings`` asks for, by the shared flags' names: ``strategy`` (or
    ``use_tpu``: ``tpu``), ``tpu_name``, ``tpu_zone``, ``gcp_project``, ``master``,
    ``num_tpu_cores``, ``num_gpus``, ``all_reduce_alg``; a name ``settings`` lacks takes
    ``make_strategy``'s default.

    Args:
        settings: a tool's absl flag values, or any object with those attributes (the
            fine-tuning driver's ``FinetuningSettings``).

    Returns:
        The ``tf.distribute.Strategy`` (``DistributionError`` when it cannot be built).
    """
    def value(name, default=None):
        found = getattr(settings, name, None)
        return default if found is None else found

    for flag in ("coordinator_address", "num_processes", "process_id"):
        if value(flag) is not None:
            raise DistributionError(
                "--%s: JAX's processes (KERAS_BACKEND=jax); on TensorFlow several hosts train "
                "with --strategy=multi_worker (TF_CONFIG) or --strategy=tpu" % flag)
    name = "tpu" if value("use_tpu", False) else value("strategy", "default")
    return make_strategy(name, tpu_name=value("tpu_name"), tpu_zone=value("tpu_zone"),
                         gcp_project=value("gcp_project"), master=value("master"),
                         num_tpu_cores=value("num_tpu_cores"), num_gpus=value("num_gpus", 0),
                         all_reduce_alg=value("all_reduce_alg", "auto"))


def _multi_worker_strategy(all_reduce_alg: str) -> tf.distribute.Strategy:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise DistributionError("--strategy=multi_worker needs TF_CONFIG (cluster and task) in "
                                "the environment")
    try:
        config = json.loads(raw)
        workers = config["cluster"]["worker"]
        index = int(config["task"]["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise DistributionError("--strategy=multi_worker: TF_CONFIG is not valid (%s: %s)"
                                % (type(e).__name__, e)) from None
    if not 0 <= index < len(workers):
        raise DistributionError("--strategy=multi_worker: TF_CONFIG task index %d is not in "
                                "the %d workers" % (index, len(workers)))
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[all_reduce_alg]
    options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
    _configure_coordination(config["cluster"])
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


# Seconds without a heartbeat before the coordination service declares a worker dead. TF's
# default (10 s, in C++) is shorter than the stalls of a loaded host: a worker starved of CPU by
# its neighbours (2 cores, several processes) or a VM paused for a moment misses it, the service
# then aborts every collective with UnavailableError ("the error could be from a previous
# operation") and the peers wait for ever. A worker that really died still fails the run, a
# minute later.
COORDINATION_HEARTBEAT_TIMEOUT_S = 90


def _configure_coordination(cluster_def: dict) -> None:
    """The coordination service MultiWorkerMirroredStrategy would set up (same leader and jobs),
    with ``COORDINATION_HEARTBEAT_TIMEOUT_S``; the strategy keeps a service already set."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        return
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster_def[job]))
            for job in ("chief", "worker") if cluster_def.get(job)]
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(
            {job: cluster_def[job] for job in cluster_def}),
        heartbeat_timeout_in_ms=COORDINATION_HEARTBEAT_TIMEOUT_S * 1000,
        coordinated_jobs=jobs)


def tpu_resolver(tpu_name: Optional[str], tpu_zone: Optional[str] = None,
                 gcp_project: Optional[str] = None, master: Optional[str] = None):
    """The ``TPUClusterResolver`` for the original's TPU flags (``DistributionError`` if none).

    Args:
        tpu_name: the TPU; None: ``master``, a local TPU or ``$TPU_NAME``.
        tpu_zone: the TPU's GCE zone.
        gcp_project: the TPU's GCP project.
        master: the TPU master address, used when ``tpu_name`` is unset.

    Returns:
        A ``tf.distribute.cluster_resolver.TPUClusterResolver``.

    Raises:
        DistributionError: no TPU is named or found, or it cannot be resolved.
    """
    target = tpu_name or master
    if not target:
        if _local_tpu_present():
            target = "local"
        elif not os.environ.get("TPU_NAME"):
            raise DistributionError("--use_tpu/--strategy=tpu needs --tpu_name (or --master, "
                                    "or a TPU VM)")
    try:
        return tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=target, zone=tpu_zone, project=gcp_project)
    except Exception as e:  # noqa: BLE001 - resolver errors vary (HTTP, metadata, ValueError)
        raise DistributionError("--tpu_name=%s: cannot resolve the TPU (%s)"
                                % (target, first_line(e))) from None


def _local_tpu_present() -> bool:
    return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, num_tpu_cores):
    resolver = tpu_resolver(tpu_name, tpu_zone, gcp_project, master)
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        raise DistributionError("--tpu_name=%s: cannot connect to the TPU (%s)"
                                % (tpu_name or master, str(e).splitlines()[0])) from None
    check_tpu_cores(num_tpu_cores, strategy.num_replicas_in_sync)
    return strategy


def check_tpu_cores(num_tpu_cores: Optional[int], found: int) -> int:
    """The TPU replica count for ``--num_tpu_cores``: ``found`` (the cores TensorFlow found)
    when it is 0/None, else ``num_tpu_cores`` if it equals ``found``; ``DistributionError``
    otherwise (a slice of another size, or a negative value).

    Args:
        num_tpu_cores: the ``--num_tpu_cores`` value (0/None: whatever was found).
        found: the TPU replicas TensorFlow found.

    Returns:
        The replica count.

    Raises:
        DistributionError: ``num_tpu_cores`` is negative or differs from ``found``.
    """
    if num_tpu_cores is None or num_tpu_cores == 0:
        return found
    if num_tpu_cores < 0 or num_tpu_cores != found:
        raise DistributionError("--num_tpu_cores=%d but the TPU has %d cores (set it to %d, or "
                                "0 to use the cores found)" % (num_tpu_cores, found, found))
    return num_tpu_cores


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    """Whether ``strategy`` is a TPU strategy.

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        True for a (``experimental.``)``TPUStrategy``.
    """
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def step_devices(strategy: tf.distribute.Strategy) -> tuple:
    """The devices ``strategy``'s replicas compute on (``extended.worker_devices``); for the
    default strategy, which has none, TensorFlow's default device: the first GPU if any, else
    the CPU.

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        A tuple of device names.
    """
    try:
        return tuple(strategy.extended.worker_devices)
    except (RuntimeError, AttributeError, NotImplementedError):
        gpus = tf.config.list_logical_devices("GPU")
        return (gpus[0].name if gpus else "/device:CPU:0",)


def is_cpu_device(device: str) -> bool:
    """Whether the device name (``"/job:localhost/replica:0/task:0/device:CPU:0"``, ``"cpu:0"``,
    ...) names a CPU; ``False`` for GPUs, TPUs and names without a device type.

    Args:
        device: a device name string.

    Returns:
        True when its device type is ``CPU``.
    """
    try:
        return tf.DeviceSpec.from_string(device).device_type == "CPU"
    except (ValueError, TypeError):
        return False


_XLA_CPU_UNAVAILABLE: list = []  # [reason or None], once per process


def xla_cpu_unavailable() -> Optional[str]:
    """Why XLA cannot compile for the CPU in this TensorFlow build, or None when it can.

    tensorflow-tpu (the Cloud TPU VM wheel) has no XLA:CPU backend: every ``jit_compile`` on
    the CPU fails there with "could not find registered transfer manager for platform Host".
    Probed once per process with a one-op function on the CPU.

    Returns:
        The first line of the probe's error, or None.
    """
    if not _XLA_CPU_UNAVAILABLE:
        reason = None
        try:
            with tf.device("/CPU:0"):
                tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
        except (tf.errors.NotFoundError, tf.errors.UnimplementedError,
                tf.errors.InvalidArgumentError, tf.errors.InternalError) as e:
            reason = first_line(e, getattr(e, "message", None) or str(e)).split(" [Op:")[0]
        _XLA_CPU_UNAVAILABLE.append(reason)
    return _XLA_CPU_UNAVAILABLE[0]


def cpu_kernels_apply(strategy: tf.distribute.Strategy, variables=()) -> bool:
    """Whether the C++ training kernels (``modeling/kernels/cpu_ops.py``: registered for the
    CPU only) may run ``strategy``'s training step: every replica computes on a CPU (not a TPU
    strategy, every ``step_devices`` a CPU) and every placed variable of ``variables`` lives on
    a CPU. On a GPU they would pin dropout/LayerNorm to the host (or fail placement) and the
    optimizer's update would read GPU variables from a CPU op.

    Args:
        strategy: the training ``tf.distribute.Strategy``.
        variables: the variables the kernels would read or update (e.g. the trainable ones).

    Returns:
        True when the CPU kernels may run the step.
    """
    if is_tpu(strategy):
        return False
    devices = step_devices(strategy)
    if not devices or not all(is_cpu_device(d) for d in devices):
        return False
    placed = [getattr(v, "device", "") for v in variables]
    return all(is_cpu_device(d) for d in placed if d)


def prediction_kernels_apply(strategy: tf.distribute.Strategy, variables=()) -> bool:
    """Whether a prediction or evaluation step of ``strategy`` is traced with the fused LayerNorm
    (``switch.Kernels(inference=True)``): one replica, computing on a CPU (``cpu_kernels_apply``),
    unless an enclosing ``switch.fused_inference_kernels(False)`` (a tool's ``--noxla_kernels``
    or ``--deterministic``) turned the kernels off.

    Args:
        strategy: the prediction/evaluation ``tf.distribute.Strategy``.
        variables: the model's variables.

    Returns:
        True when the fused inference kernels apply.
    """
    return (strategy.num_replicas_in_sync == 1 and switch.inference_kernels_allowed()
            and cpu_kernels_apply(strategy, variables))


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether ``strategy`` is a ``MultiWorkerMirroredStrategy``.

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        A bool.
    """
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This process's worker index (0 without a multi-worker cluster).

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        The worker's ``task_id`` (an int).
    """
    if is_multi_worker(strategy):
        return int(strategy.cluster_resolver.task_id or 0)
    return 0


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """The number of workers of ``strategy``'s cluster (1 without a multi-worker cluster).

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        An int >= 1.
    """
    if is_multi_worker(strategy):
        return len(strategy.cluster_resolver.cluster_spec().as_dict().get("worker", [1]))
    return 1


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and results: the ``chief`` task, else
    worker 0 of a cluster without one (``bert_common.cluster``).

    Args:
        strategy: a ``tf.distribute.Strategy``.

    Returns:
        A bool (True without a multi-worker cluster).
    """
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    return cluster.is_chief_task(resolver.task_type, resolver.task_id,
                                 resolver.cluster_spec().as_dict())


def split_cpu(num_devices: int) -> None:
    """Splits the (first) physical CPU into ``num_devices`` logical devices, for ``mirrored``
    on a machine without GPUs. Must run before TensorFlow initialises its devices.

    Args:
        num_devices: the logical CPU devices to make.
    """
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])


# -------------------------------------------------------------------------------- precision


@dataclasses.dataclass(frozen=True)
class Precision:
    """The Keras dtype policy in force and the optimizer's ``loss_scale`` argument.

    Attributes:
        policy: the Keras dtype policy name (``float32``, ``mixed_bfloat16``, ``mixed_float16``).
        loss_scale: ``"dynamic"`` for ``mixed_float16``, else None.
    """

    policy: str
    loss_scale: Optional[str]

    @property
    def compute_dtype(self) -> str:
        return {"float32": "float32", "mixed_bfloat16": "bfloat16",
                "mixed_float16": "float16"}[self.policy]


def set_precision(mixed_precision: Optional[str]) -> Precision:
    """Sets the global Keras dtype policy for ``None``/"fp32", "bf16" or "fp16".

    Args:
        mixed_precision: None/``""``/``"fp32"``, ``"bf16"`` or ``"fp16"``.

    Returns:
        The ``Precision`` set.

    Raises:
        DistributionError: another value.
    """
    import keras

    if mixed_precision not in _POLICIES:
        raise DistributionError("--mixed_precision=%s: one of %s (or unset)"
                                % (mixed_precision, ", ".join(MIXED_PRECISIONS)))
    policy = _POLICIES[mixed_precision]
    keras.mixed_precision.set_global_policy(policy)
    return Precision(policy=policy, loss_scale="dynamic" if policy == "mixed_float16" else None)
