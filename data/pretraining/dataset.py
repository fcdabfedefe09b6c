"""tf.data input pipeline over pre-training TFRecords (the original run_pretraining input_fn).

``data.pretraining.corpus_shards.input_files(pattern_list)`` gives the files (the original
``--input_file``: comma-separated globs).
``check_input_files(files, max_seq_length, max_predictions_per_seq)``: reads the first record of
up to ``CHECK_SAMPLE`` files (evenly spaced), in parallel, and raises ``PretrainingDataError``
(one line naming the file and the feature) when a feature is missing or its length differs from
the flags, or when no file holds a record; ``find_bad_file`` names a bad file outside the sample
when the input reaches it.

``pretraining_dataset(files, max_seq_length, max_predictions_per_seq, batch_size, is_training,
deterministic=False, seed=None, input_context=None)`` yields dicts of batched features [batch_size, ...]: the 7
features of ``data.pretraining.schema`` with int64 cast to int32 (``masked_lm_weights`` float32).
Every batch is full (``drop_remainder``) and the data repeats forever, as the original:

* training: file names repeated and shuffled (buffer = number of files), records read by a
  parallel interleave over min(4, #files) files (non-deterministic order, like the original's
  ``sloppy`` interleave), shuffled with a buffer of 100 records, then batched;
* eval (``is_training=False``) and ``deterministic=True``: the files in the given order, records
  in file order, no shuffling: batch t holds records t*B .. t*B+B-1 (wrapping at the end).

``seed`` fixes the shuffles and makes the interleave deterministic (training mode), so the
same seed gives the same batches (what resuming by skipping consumed batches needs). Parsing is vectorised (``batch`` then
``parse_example``): the same tensors as the original's per-record parse. Under several
replicas the trainer feeds each host only its replicas' batches
(``modeling.training.host_input``): shuffled training builds one pipeline per host
(``input_context``: its share of the files, per-replica batches); deterministic/eval batches are
the global stream's, cut into per-replica pieces (every global batch is split, not changed).
On JAX, ``device_rows_dataset`` gives a process the rows of its devices only, by the same two
rules at the granularity of a device, so that the global batches do not depend on how the
devices are spread over processes.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from bert_common.errors import first_line
from data.pretraining import schema as pretraining_schema
from data.pretraining.instances import PretrainingDataError
from data.records import numpy_reader

NUM_CPU_THREADS = 4  # the original's input_fn constant
RECORD_SHUFFLE_BUFFER = 100


def op_error_reason(error: Exception) -> str:
    """The reader's own words in a ``tf.errors.OpError`` (``corrupted record at 0``,
    ``truncated record at 123``), without TensorFlow's op and function names.

    Args:
        error: the exception (an ``OpError`` or any other).

    Returns:
        One line of reason.
    """
    text = getattr(error, "message", None) or str(error)
    match = re.search(r"(corrupted|truncated) record at \d+", text)
    if match:
        return match.group(0)
    text = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]( name: ?\S*)?", "", text)
    return first_line(error, text)


def damaged_record_error(files: Sequence[str], error: Exception) -> PretrainingDataError:
    """The error for a ``DataLossError`` met while reading ``files`` (a record file truncated
    or corrupted part-way is only found when the reader gets there): the files are read
    through, in order, to name the first damaged one and where.

    Args:
        files: the input files, in reading order.
        error: the ``DataLossError`` met.

    Returns:
        A ``PretrainingDataError`` naming the damaged file.
    """
    import numpy as np

    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1)
        except tf.errors.OpError as e:
            return PretrainingDataError("%s: damaged TFRecord file (%s): recreate it (e.g. with "
                                        "create_pretraining_data.py)" % (path, op_error_reason(e)))
    return PretrainingDataError("--input_file=%s: a damaged TFRecord file (%s)"
                                % (",".join(files), op_error_reason(error)))


def _first_example(path: str):
    try:
        payload = numpy_reader.read_first_record(path)
    except ValueError as e:
        raise PretrainingDataError("%s: not a readable TFRecord file (%s)" % (path, e)) from None
    if payload is None:
        return None
    try:
        return tf.train.Example.FromString(payload)
    except Exception as e:  # protobuf DecodeError and friends
        raise PretrainingDataError("%s: first record is not a tf.train.Example (%s)"
                                   % (path, type(e).__name__)) from None


CHECK_SAMPLE = 64  # files whose first record is read before training (all when fewer)
CHECK_THREADS = 16  # read at once: on an object store each read is a round trip


def check_sample(files: Sequence[str], sample: Optional[int] = CHECK_SAMPLE) -> List[str]:
    """The files ``check_input_files`` reads: all of them when there are at most ``sample``
    (or ``sample`` is None), else ``sample`` evenly spaced ones, the first and last included.

    Args:
        files: the input files.
        sample: the most files to read, or None for all.

    Returns:
        The files to check, in order.
    """
    files = list(files)
    if sample is None or len(files) <= sample:
        return files
    if sample <= 1:
        return files[:1]
    step = (len(files) - 1) / (sample - 1)
    return [files[i] for i in sorted({int(round(k * step)) for k in range(sample)})]


def _check_one(path: str, lengths: Dict[str, int], flag_of: Dict[str, str]) -> bool:
    """Checks ``path``'s first record; returns whether it has one."""
    if not tf.io.gfile.exists(path):
        raise PretrainingDataError("%s: no such file" % path)
    if tf.io.gfile.isdir(path) and not tf.io.gfile.glob(path + ".*"):
        # (ram:// tells a file prefix a folder: only a folder with no files beside it is)
        raise PretrainingDataError("%s is a folder, not a TFRecord file" % path)
    example = _first_example(path)
    if example is None:
        return False
    feature = example.features.feature
    for name, expected in lengths.items():
        if name not in feature:
            raise PretrainingDataError("%s: record 0 has no feature %r (not a pre-training "
                                       "record?)" % (path, name))
        kind = feature[name].WhichOneof("kind")
        values = getattr(feature[name], kind).value if kind else []
        if len(values) != expected:
            if name in flag_of:
                raise PretrainingDataError(
                    "%s: %s has %d values per record but %s=%d" % (
                        path, name, len(values), flag_of[name], expected))
            raise PretrainingDataError("%s: %s has %d values per record, expected %d"
                                       % (path, name, len(values), expected))
    return True


def check_input_files(files: Sequence[str], max_seq_length: int,
                      max_predictions_per_seq: int, sample: Optional[int] = CHECK_SAMPLE
                      ) -> None:
    """Checks the first record of the files of ``check_sample(files, sample)`` against the
    flags (see the module docstring), ``CHECK_THREADS`` at a time, so that its cost does not
    grow with the number of files; the first bad file in ``files``' order is the error. When
    none of them holds a record, the other files are checked too. A bad file outside the
    sample is found when the input reaches it (``find_bad_file``).

    Args:
        files: the input files.
        max_seq_length: S.
        max_predictions_per_seq: P.
        sample: the most files to read, or None for all.

    Raises:
        PretrainingDataError: a bad file, or no file holds a record.
    """
    from concurrent.futures import ThreadPoolExecutor

    lengths = pretraining_schema.feature_lengths(max_seq_length, max_predictions_per_seq)
    flag_of = {name: "--max_seq_length" for name in pretraining_schema.SEQUENCE_FEATURES}
    flag_of.update({name: "--max_predictions_per_seq"
                    for name in pretraining_schema.PREDICTION_FEATURES})
    files = list(files)
    checked = check_sample(files, sample)

    def check(path):
        try:
            return _check_one(path, lengths, flag_of), None
        except PretrainingDataError as e:
            return False, e

    def check_all(paths):
        if len(paths) == 1:
            return [check(paths[0])]
        with ThreadPoolExecutor(min(CHECK_THREADS, len(paths))) as pool:
            return list(pool.map(check, paths))

    results = check_all(checked)
    for _, error in results:
        if error is not None:
            raise error
    if any(has_record for has_record, _ in results):
        return
    sampled = set(checked)
    rest = [p for p in files if p not in sampled]
    results = check_all(rest) if rest else []
    for _, error in results:
        if error is not None:
            raise error
    if not any(has_record for has_record, _ in results):
        raise PretrainingDataError("no records in the input files (%s)" % ", ".join(files))


def find_bad_file(files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int,
                  error: Exception) -> Exception:
    """The error to report for ``error`` (an ``InvalidArgumentError`` met while the input was
    read, e.g. a record of other lengths in a file the sample left out): the one line naming
    the first file whose first record is bad, all files checked; else ``error`` itself.

    Args:
        files: the input files.
        max_seq_length: S.
        max_predictions_per_seq: P.
        error: the ``InvalidArgumentError`` met.

    Returns:
        The exception to raise.
    """
    try:
        check_input_files(files, max_seq_length, max_predictions_per_seq, sample=None)
    except PretrainingDataError as found:
        return found
    return error


def _parse_batch(serialized: tf.Tensor, spec) -> Dict[str, tf.Tensor]:
    """serialized [B] -> features [B, n]; int64 -> int32."""
    parsed = tf.io.parse_example(serialized, spec)
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
            for name, value in parsed.items()}


def pretraining_dataset(files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int,
                        batch_size: int, is_training: bool, deterministic: bool = False,
                        seed: Optional[int] = None,
                        input_context: Optional[tf.distribute.InputContext] = None,
                        rows: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
    """The input pipeline (see the module docstring); global batches of ``batch_size``.

    With ``input_context`` (shuffled training only: the trainer's per-host input), the batches
    of that input pipeline's replicas: per-replica batches, and with several pipelines (hosts)
    each reads only its share of the files (``files[pipeline_id::num_pipelines]``; by record
    when there are fewer files than pipelines). One pipeline sees the records of the global
    stream in the same order, so the global batches do not change.

    Args:
        files: the input TFRecord files.
        max_seq_length: S.
        max_predictions_per_seq: P.
        batch_size: B, the global batch size.
        is_training: shuffle (unless ``deterministic``).
        deterministic: read in file order without shuffling.
        seed: the shuffle seed, or None.
        input_context: the per-host input context, or None.
        rows: ``(start, stop)``: only these rows of every batch, cut before parsing (a
            process's rows among several: ``device_rows_dataset``), or None (all).

    Returns:
        A repeating ``tf.data.Dataset`` of feature dicts ([B, S], [B, P], [B, 1]; with
        ``rows``, [stop - start, ...]).

    Raises:
        PretrainingDataError: a batch size that is not positive.
        ValueError: ``input_context`` without shuffled training.
    """
    if batch_size <= 0:
        raise PretrainingDataError("batch size must be positive, got %d" % batch_size)
    files = list(files)
    spec = pretraining_schema.feature_spec(max_seq_length, max_predictions_per_seq)
    options = tf.data.Options()
    shard_records = False
    if input_context is not None:
        if not is_training or deterministic:
            raise ValueError("input_context is for shuffled training input")
        batch_size = input_context.get_per_replica_batch_size(batch_size)
        pipelines, pipeline = input_context.num_input_pipelines, input_context.input_pipeline_id
        if pipelines > 1 and len(files) >= pipelines:
            files = files[pipeline::pipelines]
        shard_records = pipelines > 1 and not len(files) >= pipelines
    if is_training and not deterministic:
        d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        d = d.repeat()
        d = d.shuffle(buffer_size=len(files), seed=seed)
        cycle_length = min(NUM_CPU_THREADS, len(files))
        d = d.interleave(tf.data.TFRecordDataset, cycle_length=cycle_length,
                         num_parallel_calls=cycle_length, deterministic=seed is not None)
        if shard_records:
            d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        d = d.shuffle(buffer_size=RECORD_SHUFFLE_BUFFER, seed=seed)
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.AUTO)
    else:
        d = tf.data.TFRecordDataset(files)
        d = d.repeat()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        options.deterministic = True
    d = d.batch(batch_size, drop_remainder=True)
    if rows is not None and tuple(rows) != (0, batch_size):
        d = d.map(lambda serialized: serialized[rows[0]:rows[1]])
    d = d.map(lambda serialized: _parse_batch(serialized, spec),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    d = d.prefetch(tf.data.AUTOTUNE)
    return d.with_options(options)


def device_rows_dataset(files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int,
                        batch_size: int, devices: Sequence[int], num_devices: int, *,
                        deterministic: bool, seed: Optional[int] = None) -> tf.data.Dataset:
    """The training batches' rows that ``devices`` hold, of ``num_devices`` devices that split
    each global batch of ``batch_size`` evenly, in order (a JAX process's devices in its
    data-parallel mesh: ``modeling.training.backends.jax``). However the devices are spread
    over processes, the global batch of a step is the same:

    * ``deterministic``: the global stream of ``pretraining_dataset`` (file order), every
      batch cut to the devices' rows before parsing: each process reads the records, parses
      only its own;
    * shuffled: one pipeline per device (``pretraining_dataset`` with the ``input_context``
      of ``num_devices`` pipelines: its share of the files, ``files[d::D]``, or of the records
      with fewer files than devices, each shuffled with ``seed``), the devices' batches side
      by side. One device is the one pipeline of a single-device run.

    Args:
        files: the input TFRecord files.
        max_seq_length: S.
        max_predictions_per_seq: P.
        batch_size: B, the global batch.
        devices: the devices' indexes in the mesh (consecutive, ascending).
        num_devices: D, the devices in all (D divides B).
        deterministic: the file order, unshuffled.
        seed: the shuffle seed.

    Returns:
        A repeating ``tf.data.Dataset`` of feature dicts [len(devices) * B / D, ...].

    Raises:
        ValueError: ``devices`` not consecutive, or B not divisible by D.
    """
    devices = list(devices)
    if not devices or devices != list(range(devices[0], devices[0] + len(devices))):
        raise ValueError("devices must be consecutive places in the mesh, got %s" % devices)
    if batch_size % num_devices:
        raise ValueError("batch %d is not divisible by %d devices" % (batch_size, num_devices))
    per_device = batch_size // num_devices
    if deterministic:
        return pretraining_dataset(files, max_seq_length, max_predictions_per_seq, batch_size,
                                   is_training=True, deterministic=True, seed=seed,
                                   rows=(devices[0] * per_device, (devices[-1] + 1) * per_device))
    pipelines = [pretraining_dataset(
        files, max_seq_length, max_predictions_per_seq, batch_size, is_training=True,
        seed=seed, input_context=tf.distribute.InputContext(
            num_input_pipelines=num_devices, input_pipeline_id=device,
            num_replicas_in_sync=num_devices)) for device in devices]
    if len(pipelines) == 1:
        return pipelines[0]
    return tf.data.Dataset.zip(tuple(pipelines)).map(
        lambda *batches: {name: tf.concat([b[name] for b in batches], 0)
                          for name in batches[0]})
