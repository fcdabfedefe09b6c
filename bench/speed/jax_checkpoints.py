"""Benchmark: JAX checkpoints, Orbax's store against the npz files before it: save and restore
time and size, at two model sizes.

``KERAS_BACKEND=jax``, one process, TensorFlow not imported: a pre-training model
(``BertPretrainingModel``: MLM + NSP heads) and its built optimizer (AdamWeightDecay: two slots
per variable, filled with random values as after training), of the tiny golden's size and of MiniLM's (L6-H384, vocabulary 30,522). For
each store, ``--repeats`` times: save step N (``backends.jax.checkpoints.save_checkpoint``; the
npz file as the store before it wrote it, the same arrays and meta, atomically), then restore
it into a fresh model and optimizer (``restore_checkpoint``). Prints one JSON line per model
and store (median seconds, bytes on disk), then the Orbax/npz ratios.

    KERAS_BACKEND=jax .venv/bin/python -m bench jax_checkpoints [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

SIZES = {
    "tiny": os.path.join(ROOT, "..", "shared", "golden", "modeling", "tiny", "bert_config.json"),
    "minilm": os.path.join(ROOT, "..", "shared", "data", "minilm", "config.json"),
}


def _npz_save(folder, state, model, optimizer, step, records):
    """The store before Orbax: every value in one npz file, written atomically by one
    process (its writer as it was)."""
    import numpy as np

    from bert_common import atomic

    arrays = {}
    for prefix, values in (("t", state.trainable), ("n", state.non_trainable),
                           ("o", state.optimizer)):
        for index, value in enumerate(values):
            arrays["%s%d" % (prefix, index)] = np.asarray(value)
    meta = {"step": step, "records": records,
            "variables": [v.path for v in model.trainable_variables],
            "non_trainable": [v.path for v in model.non_trainable_variables],
            "optimizer": [v.path for v in optimizer.variables]}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = os.path.join(folder, "jax-ckpt-%d.npz" % step)
    with atomic.atomic_open(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, f))
               for root, _, files in os.walk(path) for f in files)


def _build(config_path: str):
    import keras
    import numpy as np

    import modeling
    from modeling.checkpoints import hf

    config = (hf.read_hf_config(os.path.dirname(config_path))
              if os.path.basename(config_path) == "config.json"
              else modeling.BertConfig.from_json_file(config_path))
    keras.utils.set_random_seed(1)
    model = modeling.BertPretrainingModel(config)
    optimizer = modeling.create_optimizer(1e-4, 100, 10)
    optimizer.build(model.trainable_variables)
    # The slots as after training (a fresh optimizer's are zeros, which compress to nothing)
    rng = np.random.default_rng(2)
    for variable in optimizer.variables:
        if len(variable.shape) and "float" in str(variable.dtype):
            variable.assign(rng.standard_normal(variable.shape).astype(np.float32) ** 2 * 1e-4)
    return model, optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="tiny,minilm")
    args = parser.parse_args()
    import keras

    if keras.backend.backend() != "jax":
        sys.exit("run with KERAS_BACKEND=jax")
    from modeling.training.backends.jax import checkpoints, steps

    results = {}
    for name in args.sizes.split(","):
        model, optimizer = _build(SIZES[name])
        state = steps.TrainState.from_model(model, optimizer)
        fresh = _build(SIZES[name])
        values = sum(int(v.numpy().size) for v in model.weights + optimizer.variables)
        for store in ("npz", "orbax"):
            saves, restores, size = [], [], 0
            for repeat in range(args.repeats):
                folder = tempfile.mkdtemp(prefix="bench-ckpt-")
                try:
                    start = time.perf_counter()
                    if store == "npz":
                        path = _npz_save(folder, state, model, optimizer, 10 + repeat, 320)
                    else:
                        path = checkpoints.save_checkpoint(folder, state, model, optimizer,
                                                           10 + repeat, 320, keep=0)
                    saves.append(time.perf_counter() - start)
                    size = _size(path)
                    start = time.perf_counter()
                    checkpoints.restore_checkpoint(path, *fresh)
                    restores.append(time.perf_counter() - start)
                finally:
                    shutil.rmtree(folder)
            row = {"model": name, "store": store, "values": values,
                   "save_s": round(statistics.median(saves), 4),
                   "restore_s": round(statistics.median(restores), 4), "bytes": size}
            results[name, store] = row
            print(json.dumps(row), flush=True)
        orbax, npz = results[name, "orbax"], results[name, "npz"]
        print(json.dumps({"model": name, "orbax/npz": {
            key: round(orbax[key] / npz[key], 2) for key in ("save_s", "restore_s", "bytes")}}),
            flush=True)


if __name__ == "__main__":
    main()
