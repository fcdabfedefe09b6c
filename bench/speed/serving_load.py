"""Load check: threads x requests of hostile text against a classifier SavedModel.

N threads x M requests of hostile text to its raw-text signature, in one process (as a TF
Serving process shares one loaded model between requests).

Loads ``--export_dir`` (a version folder holding ``saved_model.pb``, or a TF Serving model base
path: its largest version), or, without it, exports the tiny golden model
(``../shared/golden/modeling/tiny``, a seeded random classifier head) as version 1 of a
temporary base path. Every request calls the ``text`` signature on a batch drawn from hostile
inputs: empty and blank strings, 10,000 characters (one word, and 2,000 words), non-Latin
scripts (Chinese, Arabic, Hindi, Russian, Thai, Korean, Greek), emoji (skin tones, flags, ZWJ
sequences), NUL and control characters, combining marks, zero-width and bidi marks, bytes that
are not UTF-8, and all of them mixed in one batch. Each distinct batch is first run once alone
(the reference, also the warm-up); then every concurrent answer must equal its reference
exactly (probabilities, label ids, labels) and no request may fail.

Prints the request count, errors, mismatches, latency p50/p99 (ms) and requests/s; exits 1 on
any error or mismatch. Not a timing benchmark of record (CPU numbers depend on the machine and
its load); a quick run:

    .venv/bin/python -m bench serving_load --threads 4 --requests 10
    .venv/bin/python -m bench serving_load --export_dir models/mrpc    # latest version
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402
SHARED = harness.SHARED
TINY = os.path.join(SHARED, "golden", "modeling", "tiny")
VOCAB = os.path.join(SHARED, "golden", "inputs", "vocab.txt")

HOSTILE = [
    "",
    " ",
    "\t\r\n  \n",
    "x" * 10000,  # one 10k-character word
    "word " * 2000,  # 10k characters, 2,000 words
    "中文分词测试，没有空格的句子。" * 40,
    "مرحبا بالعالم، هذه جملة عربية.",
    "नमस्ते दुनिया, यह एक हिंदी वाक्य है।",
    "Привет, мир! Это русское предложение.",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "안녕하세요 세계, 한국어 문장입니다.",
    "Γειά σου κόσμε· ελληνική πρόταση.",
    "😀🎉👍🏽🇫🇷👨‍👩‍👧‍👦 emoji 🧪" * 20,
    "\x00",
    "before\x00after \x00\x00 \x01\x02\x1f\x7f",
    "e\u0301 n\u0303 a\u030a\u0323 Z\u0351\u0352\u0353",  # combining marks
    "zero\u200bwidth\u200c joiner\u200d bidi\u202e reversed\u202c \ufeffbom",
    "Café 中文 😀 \x00 Привет\tthe end\r\n مرحبا ☃ " * 30,  # mixed
    b"invalid UTF-8: \xff\xfe \xc3 \xed\xa0\x80 end",  # bytes no UTF-8 decoder accepts
]


def _requests() -> List[List[str]]:
    """The distinct request batches: each hostile text alone, consecutive pairs, all at once."""
    batches = [[t] for t in HOSTILE]
    batches += [[HOSTILE[i], HOSTILE[(i + 1) % len(HOSTILE)]] for i in range(len(HOSTILE))]
    batches.append(list(HOSTILE))
    return batches


def _build_tiny(folder: str) -> str:
    """The tiny golden encoder + a seeded 2-label head, exported as version 1 of ``folder``."""
    import keras

    from bert_tasks.exports import classifier as serving
    from modeling import load_checkpoint
    from modeling.config import BertConfig
    from modeling.heads.classifier import build_classifier_model

    keras.utils.set_random_seed(0)
    config = BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
    model = build_classifier_model(config, 2)
    load_checkpoint(model, os.path.join(TINY, "bert_model.ckpt"), log=False)
    return serving.ClassifierServingModule(
        model, VOCAB, do_lower_case=True, max_seq_length=128,
        label_list=["negative", "positive"]).export_version(folder)


def _resolve(export_dir: str) -> str:
    """A SavedModel folder, or the largest version of a model base path."""
    from bert_tasks.exports import saved_model

    if saved_model.is_saved_model(export_dir):
        return export_dir
    versions = saved_model.saved_model_versions(export_dir)
    if not versions:
        sys.exit("serving_load.py: error: --export_dir=%s is neither a SavedModel nor a "
                 "model base path with versions" % export_dir)
    return os.path.join(export_dir, str(versions[-1]))


def _call(signature, texts: Sequence[str]) -> Dict[str, "object"]:
    import tensorflow as tf

    out = signature(text_a=tf.constant(list(texts)))
    return {k: v.numpy() for k, v in out.items()}


def _same(a: Dict, b: Dict) -> bool:
    import numpy as np

    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--export_dir", help="SavedModel (version folder) or model base path; "
                        "default: the tiny golden model exported to a temporary folder")
    parser.add_argument("--threads", type=int, default=8, help="concurrent clients (8)")
    parser.add_argument("--requests", type=int, default=50, help="requests per thread (50)")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.requests < 1:
        parser.error("--threads and --requests must be positive")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow_text  # noqa: F401  (the text signatures' ops)
    import tensorflow as tf

    temp = None
    try:
        if args.export_dir:
            path = _resolve(args.export_dir)
        else:
            temp = tempfile.mkdtemp(prefix="bench_serving_load.")
            path = _build_tiny(os.path.join(temp, "models", "tiny"))
        signature = tf.saved_model.load(path).signatures["text"]
        requests = _requests()
        start = time.perf_counter()
        reference = [_call(signature, r) for r in requests]  # alone; also the warm-up
        print("%s: %d distinct request batches (%d hostile texts), run alone in %.1fs"
              % (path, len(requests), len(HOSTILE), time.perf_counter() - start), flush=True)

        latencies: List[float] = []
        errors: List[str] = []
        mismatches: List[int] = []
        lock = threading.Lock()

        def client(t: int) -> None:
            for j in range(args.requests):
                k = (t * 7 + j) % len(requests)
                begin = time.perf_counter()
                try:
                    out = _call(signature, requests[k])
                except Exception as e:  # noqa: BLE001 - counted and reported
                    with lock:
                        errors.append("request %d: %s: %s" % (k, type(e).__name__,
                                                              str(e).strip()[:200]))
                    continue
                took = time.perf_counter() - begin
                same = _same(out, reference[k])
                with lock:
                    latencies.append(took)
                    if not same:
                        mismatches.append(k)

        threads = [threading.Thread(target=client, args=(t,)) for t in range(args.threads)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start

        total = args.threads * args.requests
        ordered = sorted(latencies) or [float("nan")]
        p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
        print("%d threads x %d requests = %d: %d errors, %d mismatches; latency p50 %.1f ms, "
              "p99 %.1f ms; %.1f requests/s"
              % (args.threads, args.requests, total, len(errors), len(mismatches),
                 1000 * statistics.median(ordered), 1000 * p99, len(latencies) / wall))
        for line in errors[:5]:
            print("  error: " + line)
        if mismatches:
            print("  outputs differing from the request run alone: batches %s"
                  % sorted(set(mismatches))[:10])
        return 1 if errors or mismatches else 0
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
