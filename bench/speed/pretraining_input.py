"""Benchmark: records/s of run_pretraining's input pipeline alone, 1 thread vs all cores.

Records/s read, shuffled, batched and parsed (``data.pretraining.dataset.pretraining_dataset``,
shuffled training mode, as the trainer builds it), on sharded records of the derived corpus,
with tf.data limited to 1 thread and then to all the machine's cores; next to what an
accelerator consumes (keras-hub on JAX trains BERT-base at seq 128 at about 3,900 sequences/s on
one H200).

    .venv/bin/python -m bench pretraining_input [--batch_size 256] [--seconds 20]
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
H200_SEQ_PER_S = 3900  # keras-hub BERT-base, seq 128, JAX, one H200 (the reference)


def main() -> None:
    parser = harness.parser(__doc__, batch_size=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work = tempfile.mkdtemp(prefix="bench-input-")
    try:
        prefix = harness.sharded_records(work, 16, 5)
        import tensorflow as tf

        from data.pretraining import dataset as pd
        from data.pretraining import corpus_shards

        files = corpus_shards.input_files(prefix + "-*")
        cores = os.cpu_count() or 1
        print("load average at start: %.2f %.2f %.2f; %d cores" % (os.getloadavg() + (cores,)))
        for threads in sorted({1, cores}):
            dataset = pd.pretraining_dataset(files, 128, 20, args.batch_size, is_training=True,
                                             seed=3)
            options = tf.data.Options()
            options.threading.private_threadpool_size = threads
            options.threading.max_intra_op_parallelism = 1
            iterator = iter(dataset.with_options(options))
            for _ in range(3):  # warm-up: files opened, buffers filled
                next(iterator)
            start = time.perf_counter()
            cpu0 = time.process_time()
            batches = 0
            while time.perf_counter() - start < args.seconds:
                next(iterator)
                batches += 1
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu0
            rate = batches * args.batch_size / wall
            print(json.dumps({
                "tf_data_threads": threads, "records_per_s": round(rate),
                "records_per_cpu_s": round(batches * args.batch_size / max(cpu, 1e-9)),
                "cores_for_one_h200": round(H200_SEQ_PER_S / (rate / threads), 2)}),
                flush=True)
        print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
