"""Benchmark (not CI): classifier inference throughput on MRPC dev at real lengths.

All 408 MRPC dev pairs (``../shared/data/glue/MRPC/dev.tsv``), features of
``run_classifier`` (``max_seq_length`` 128), MiniLM-L6 size (L=6, H=384, A=12, I=1536; our
side loads the real all-MiniLM-L6-v2 weights, keras-hub random ones of the same shape, which
does not change the cost), batch ``--batch_size``; examples/second of a full pass over the
dev set, classifier head included:

* ``ours length-aware``: ``run_classifier``'s eval pipeline: ``eval.tf_record`` parsed by
  ``tf.data``, sorted by length in windows and every batch cut to its longest example
  (``bert_tasks.classifier.dataset``), model in a ``tf.function``;
* ``ours padded 128``: the same model and records, every example padded to 128 (the original);
* ``keras-hub padded 128``: ``keras_hub.models.BertBackbone`` + a dense head on the pooled
  output, pre-batched int32 tensors padded to 128, ``tf.function`` graph and XLA
  (venv ``bench/.venvs/kerashub``: keras-hub over the project's TensorFlow; created by
  ``bench/speed/inference.py --setup_only --skip_hf``).

Each engine lives in a worker process; engines are timed in interleaved rounds, so a shared
CPU disturbs all alike; the table gives medians and the median per-round ratio against
keras-hub. The two "ours" engines are also compared prediction by prediction (max |diff| of
probabilities, label agreement).

    .venv/bin/python -m bench classifier_throughput [--rounds 5] [--batch_size 32]
"""

from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MODEL_DIR = os.path.join(SHARED, "data", "minilm")
MRPC = os.path.join(SHARED, "data", "glue", "MRPC")
REFERENCE = "keras-hub padded 128 XLA"
SEQ = 128


def prepare(work_dir: str) -> dict:
    """Writes eval.tf_record (run_classifier's features) and padded.npz; returns lengths."""
    import numpy as np

    sys.path.insert(0, ROOT)
    from data.glue import processors as classifier
    from data.glue import features as classifier_features
    from data.tokenization import wordpiece as tokenization

    examples = classifier.get_processor("mrpc").get_dev_examples(MRPC)
    tokenizer = tokenization.FastFullTokenizer(os.path.join(MODEL_DIR, "vocab.txt"), True)
    record = os.path.join(work_dir, "eval.tf_record")
    classifier_features.file_based_convert_examples_to_features(
        examples, ["0", "1"], SEQ, tokenizer, record)
    features = classifier_features.convert_examples_to_features(examples, ["0", "1"], SEQ,
                                                                tokenizer)
    arrays = {k: np.array([getattr(f, k) for f in features], np.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    np.savez(os.path.join(work_dir, "padded.npz"), **arrays)
    lengths = arrays["input_mask"].sum(1)
    return {"examples": len(examples), "mean_length": float(lengths.mean()),
            "max_length": int(lengths.max())}


# ----------------------------------------------------------------------------------- workers


def _ours_engines(work_dir: str, batch_size: int):
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from bert_tasks import classifier as classifier_task
    from data.glue import dataset as classifier_input
    from modeling import checkpoints
    from modeling.heads import classifier as classifier_head
    from modeling.training.backends.tensorflow import predict as tf_predict
    from modeling.config import BertConfig

    config = BertConfig.from_json_file(os.path.join(MODEL_DIR, "config.json"))
    tf.keras.utils.set_random_seed(0)
    model = classifier_head.build_classifier_model(config, 2)
    checkpoints.load_checkpoint(model, MODEL_DIR, log=False)
    record = os.path.join(work_dir, "eval.tf_record")

    def engine(length_aware: bool):
        dataset = classifier_task.dataset(record, SEQ, batch_size, False,
                                          length_aware=length_aware)  # run_classifier's eval
        predictor = tf_predict.Predictor(model, ["probabilities"])

        def run():
            out = predictor.run(dataset)
            return classifier_input.restore_order(out["example_index"], out["probabilities"])

        return run

    engines = {"ours length-aware": engine(True), "ours padded 128": engine(False)}
    a, b = engines["ours length-aware"](), engines["ours padded 128"]()
    check = {"max_abs_diff_probabilities": float(np.abs(a - b).max()),
             "labels_equal": int((a.argmax(1) == b.argmax(1)).sum()), "examples": len(a)}
    return engines, check


def _kerashub_engines(work_dir: str, batch_size: int):
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    x = np.load(os.path.join(work_dir, "padded.npz"))
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=384, intermediate_dim=1536,
        max_sequence_length=512, num_segments=2, dropout=0.1)
    head = keras.layers.Dense(2)
    batches = [{"token_ids": tf.constant(x["input_ids"][i:i + batch_size]),
                "padding_mask": tf.constant(x["input_mask"][i:i + batch_size]),
                "segment_ids": tf.constant(x["segment_ids"][i:i + batch_size])}
               for i in range(0, len(x["input_ids"]), batch_size)]
    engines = {}
    for jit in (True, False):
        fn = tf.function(lambda b: tf.nn.softmax(head(backbone(b, training=False)["pooled_output"])),
                         jit_compile=jit)

        def run(fn=fn):
            return np.concatenate([fn(b).numpy() for b in batches])

        engines["keras-hub padded 128 %s" % ("XLA" if jit else "graph")] = run
    return engines, {}


def worker(kind: str, work_dir: str, batch_size: int) -> None:
    """Builds the engines (one dev-set pass a unit), warms them up (1 pass) and serves them;
    READY's info carries the ours length-aware vs padded comparison."""
    builders = {"ours": _ours_engines, "kerashub": _kerashub_engines}
    engines, check = builders[kind](work_dir, batch_size)
    harness.serve({name: harness.repeated(engines[name]) for name in sorted(engines)},
                  info=check)


def main() -> None:
    parser = harness.parser(__doc__, peers=("kerashub",), work_dir=None, batch_size=32,
                            rounds=5)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.work_dir, args.batch_size)
        return
    if not harness.set_up_peers(args):
        return
    os.makedirs(harness.OUT_DIR, exist_ok=True)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="classifier_throughput_",
                                                 dir=harness.OUT_DIR)
    data = prepare(work_dir)
    workers, engines, check = harness.start_workers(
        __file__, harness.peers(args),
        ["--work_dir", work_dir, "--batch_size", str(args.batch_size)])
    rates = harness.run_rounds(workers, engines, args.rounds, 1,
                               lambda name, seconds: data["examples"] / seconds)
    reference = rates.get(REFERENCE)
    print("\nMRPC dev: %d examples, mean %.1f tokens (max %d) of max_seq_length %d; MiniLM-L6 "
          "size; batch %d; %d rounds; load average now %.2f"
          % (data["examples"], data["mean_length"], data["max_length"], SEQ, args.batch_size,
             args.rounds, os.getloadavg()[0]))
    print("%-26s %12s %12s %14s" % ("engine", "examples/s", "best", "x " + REFERENCE))
    results = {}
    for name, _ in engines:
        median, best, ratio = harness.summarize(rates[name], reference)
        results[name] = {"examples_per_s_median": median, "best": best,
                         "ratio_vs_reference": ratio, "rounds": rates[name]}
        print("%-26s %12.1f %12.1f %14.2f" % (name, median, best, ratio))
    print("ours length-aware vs ours padded 128: max |diff| of probabilities %.2e, same label "
          "for %d/%d examples" % (check["max_abs_diff_probabilities"], check["labels_equal"],
                                  check["examples"]))
    harness.write_json("bench_classifier_throughput.json", {
        "data": data, "batch_size": args.batch_size, "reference": REFERENCE,
        "results": results, "check": check})


if __name__ == "__main__":
    main()
