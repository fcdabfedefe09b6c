"""Replays a golden trajectory of the original with this project's step; prints how far it is.

    python -m tests.support.golden_replay finetuning DIR [--path opbyop|fused]

``finetuning``: DIR in the layout of ``../shared/golden/finetuning_trajectory`` (its README):
``summary.json`` (batch size, learning rate, steps, warmup, labels, snapshot steps),
``bert_config.json``, ``init/bert_model.ckpt`` (every trainable variable before step 1),
``features.tfrecord`` (run_classifier's features, read in file order, ``drop_remainder``),
``trajectory.jsonl`` (per step: the loss at the pre-step parameters, the global norm the update
used, whether it was clipped), ``params_after_step_N.npz`` (every variable after step N, ``/`` as
``__``; the word table only at ``word_embeddings_rows``) and ``float_noise_floor.json`` (how far
the original moves from itself). It runs this project's fine-tuning step (the one trainer
through ``modeling.training.finetuning.finetune``: mean cross-entropy, ``create_optimizer``,
no dropout) on one replica, op by op (``--path opbyop``, the ``--deterministic`` step) or with
the fused CPU kernels and optimizer (``--path fused``, the tools' default), and prints one JSON
line: the largest relative deviation of the loss and of ``global_norm`` over the steps, the
largest absolute deviation of the parameters at each snapshot, the steps whose clipping differs,
the tolerances and ``ok``. Exit status 1 beyond a tolerance.

Tolerances, for each quantity the larger of this project's own and 4x the golden's noise floor
(read from the folder, never assumed): own 1e-5 relative on loss and norm, and on parameters
the pre-training trajectory's (5x its final-parameter noise floor, 2.83e-6 absolute).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Dict

import numpy as np

OWN_REL_TOLERANCE = 1e-5  # loss and global norm, relative
OWN_PARAM_TOLERANCE = 5 * 2.828892320394516e-06  # the pre-training trajectory test's
FLOOR_MARGIN = 4.0


def _features(path: str, seq_length: int, batch_size: int, steps: int):
    import tensorflow as tf

    spec = {"input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
            "label_ids": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return {k: tf.cast(v, tf.int32) for k, v in example.items()}

    data = tf.data.TFRecordDataset(path).map(parse).batch(batch_size, drop_remainder=True)
    return data.repeat().take(steps)


def replay_finetuning(folder: str, path: str = "opbyop") -> Dict:
    """Runs the replay (see the module docstring); returns the report."""
    import tensorflow as tf

    import modeling
    from modeling import checkpoints
    from modeling.heads.classifier import per_example_classifier_loss
    from modeling.training import finetuning
    from modeling.training import step_log

    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "float_noise_floor.json")) as f:
        floor = json.load(f)
    with open(os.path.join(folder, "trajectory.jsonl")) as f:
        golden = [json.loads(line) for line in f if line.strip()]
    steps = int(summary["num_train_steps"])
    config = modeling.BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))

    def fresh_model():
        encoder = modeling.BertModel(config, seq_length=summary["seq_length"])
        return modeling.BertClassifier(encoder, num_labels=summary["num_labels"],
                                       dropout_rate=0.0)

    model = fresh_model()
    checkpoints.load_checkpoint(model, os.path.join(folder, summary["init_checkpoint"]),
                                log=False)
    optimizer = modeling.create_optimizer(summary["learning_rate"], steps,
                                          summary["num_warmup_steps"])
    data = _features(os.path.join(folder, summary["features"]), summary["seq_length"],
                     summary["batch_size"], steps)
    fused = path == "fused"
    with tempfile.TemporaryDirectory() as model_dir:
        finetuning.finetune(model, optimizer, data, per_example_classifier_loss,
                            model_dir=model_dir, num_train_steps=steps, steps_per_loop=1,
                            save_checkpoints_steps=1, keep_checkpoint_max=steps + 1,
                            progress=False, fuse_optimizer=fused, fused_kernels=fused)
        log = step_log.read_step_log(model_dir)

        def params_after(step):
            snapshot_model = fresh_model()
            checkpoints.load_checkpoint(snapshot_model, os.path.join(
                model_dir, "%s-%d" % (finetuning.CHECKPOINT_NAME, step)), log=False)
            return checkpoints.model_tf1_arrays(snapshot_model)

        snapshots = sorted(int(n[len("params_after_step_"):-len(".npz")])
                           for n in os.listdir(folder)
                           if n.startswith("params_after_step_") and n.endswith(".npz"))
        params = {}
        for step in snapshots:
            name = "params_after_step_%d.npz" % step
            want = dict(np.load(os.path.join(folder, name)))
            rows = want.pop("word_embeddings_rows", None)
            ours = params_after(step)
            worst = 0.0
            for key, value in want.items():
                tf1 = key.replace("__", "/")
                mine = ours[tf1]
                if tf1 == "bert/embeddings/word_embeddings" and rows is not None \
                        and value.shape[0] == len(rows):
                    mine = mine[rows]
                worst = max(worst, float(np.abs(mine - value).max()))
            params[name] = worst

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-12)

    loss_dev = max(rel(ours["loss"], g["loss"]) for ours, g in zip(log, golden))
    norm_dev = max(rel(ours["global_norm"], g["global_norm"]) for ours, g in zip(log, golden))
    clip_differs = [g["step"] for ours, g in zip(log, golden)
                    if (ours["global_norm"] > 1.0) != bool(g["clipped"])]
    tolerances = {
        "loss": max(OWN_REL_TOLERANCE, FLOOR_MARGIN * floor.get("loss_max_rel", 0.0)),
        "global_norm": max(OWN_REL_TOLERANCE,
                           FLOOR_MARGIN * floor.get("global_norm_max_rel", 0.0)),
        "params": {name: max(OWN_PARAM_TOLERANCE, FLOOR_MARGIN * floor.get(
            "params_max_abs", {}).get(name, 0.0)) for name in params},
    }
    ok = (len(log) == len(golden) == steps and loss_dev <= tolerances["loss"]
          and norm_dev <= tolerances["global_norm"] and not clip_differs
          and all(params[n] <= tolerances["params"][n] for n in params))
    return {"golden": folder, "path": path, "steps": len(log),
            "loss_max_rel": loss_dev, "global_norm_max_rel": norm_dev,
            "params_max_abs": params, "clipped_steps_differ": clip_differs,
            "steps_clipped": sum(1 for g in golden if g["clipped"]),
            "tolerances": tolerances, "ok": ok}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=["finetuning"])
    parser.add_argument("folder")
    parser.add_argument("--path", choices=["opbyop", "fused"], default="opbyop")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    report = replay_finetuning(args.folder, args.path)
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
