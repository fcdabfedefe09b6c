"""Benchmark: the time a resume of run_pretraining takes to find its data position.

After N consumed global batches, under MirroredStrategy over 2 logical CPUs (the input as the
trainer builds it: shuffled training input of sharded records, per-replica batches).

Two ways, same process, same records:

* ``iterator state`` (the trainer now, every strategy but TPU): a new host iterator restores
  the state saved in the checkpoint, then yields its next batch;
* ``skip`` (the trainer before, and on TPUs now; also any checkpoint without an iterator
  state): the strategy's distributed input skips the N consumed global batches, then yields
  its next batch (every skipped record is read, shuffled and parsed again).

Prints the seconds to the first batch after the resume for each N, and the ratio of the
largest N to the smallest for each way: flat for the iterator state, linear for the skip.

    .venv/bin/python -m bench resume [--batches 10,100,1000] [--batch_size 32]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench import harness  # noqa: E402


def main() -> None:
    parser = harness.parser(__doc__, batch_size=32, repeats=3,
                            helps={"batch_size": "global batch", "repeats": "timed runs"})
    parser.add_argument("--batches", default="10,100,1000")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work = tempfile.mkdtemp(prefix="bench-resume-")
    try:
        prefix = harness.sharded_records(work, 16, 3)
        run(prefix, [int(n) for n in args.batches.split(",")], args.batch_size, args.repeats,
            work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(prefix, batches, batch_size, repeats, work) -> None:
    from modeling.training import strategies

    strategies.split_cpu(2)
    import tensorflow as tf

    from data.pretraining import dataset as pd
    from data.pretraining import corpus_shards
    from modeling.training import host_input

    strategy = strategies.make_strategy("mirrored")
    replicas = strategy.num_replicas_in_sync
    files = corpus_shards.input_files(prefix + "-*")

    def dataset_fn(context):
        return pd.pretraining_dataset(files, 128, 20, batch_size, is_training=True, seed=7,
                                      input_context=context)

    context = tf.distribute.InputContext(num_replicas_in_sync=replicas)
    rows = []
    print("load average at start: %.2f %.2f %.2f; %d records in %d files, %d replicas"
          % (os.getloadavg() + (sum(1 for f in files for _ in tf.data.TFRecordDataset(f)),
                                len(files), replicas)))
    for n in batches:
        with tf.device("/cpu:0"):
            iterator = iter(dataset_fn(context))
        for _ in range(n * replicas):
            next(iterator)
        path = tf.train.Checkpoint(iterator=iterator).save(os.path.join(work, "it-%d" % n))
        want = next(iterator)["input_ids"].numpy()
        times = {"iterator state": [], "skip": []}
        for _ in range(repeats):
            start = time.perf_counter()
            with tf.device("/cpu:0"):
                restored = iter(dataset_fn(context))
            tf.train.Checkpoint(iterator=restored).restore(path).assert_consumed()
            got = next(restored)["input_ids"].numpy()
            times["iterator state"].append(time.perf_counter() - start)
            assert (got == want).all(), "the restored iterator is not where it was saved"
            start = time.perf_counter()
            skipped = iter(host_input.distribute(strategy, dataset_fn, n))
            first = strategy.experimental_local_results(next(skipped))[0]["input_ids"].numpy()
            times["skip"].append(time.perf_counter() - start)
            assert (first == want).all(), "the skip is not at the same position"
        row = {"consumed_global_batches": n, "records": n * batch_size}
        row.update({way: round(min(t), 4) for way, t in times.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
    for way in ("iterator state", "skip"):
        print("%s: %.1fx the time at N=%d as at N=%d" % (
            way, rows[-1][way] / max(rows[0][way], 1e-9), batches[-1], batches[0]))
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
