"""`make demo` end to end, shortened (3 pre-training steps, a quarter of a fine-tuning epoch: the
checks are the stages and their outputs, not what the model learns): every stage runs its entry
point, writes its outputs, and the exported SavedModel answers in a fresh process."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_runs_every_stage(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "demo.run_demo", "--output_dir=%s" % out,
                           "--pretrain_steps=3", "--finetune_epochs=0.25"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for stage in range(1, 7):
        assert "[%d/6]" % stage in proc.stdout
    for path in ("vocab.txt", "bert_config.json", "pretraining_data.tfrecord",
                 "pretrain/eval_results.txt", "pretrain/export/bert_model.ckpt.index",
                 "classifier/eval_results.txt", "classifier/test_results.tsv",
                 "serving/1/saved_model.pb"):
        assert (out / path).exists(), path
    # The query stage printed one prediction per sentence, with a label from the review set.
    answers = [line for line in proc.stdout.splitlines() if "-> " in line and "p=[" in line]
    assert len(answers) == 3
    assert all((" positive " in a or " negative " in a) for a in answers)
    with open(out / "classifier" / "test_results.tsv") as f:
        assert len(f.read().strip().split("\n")) == 40
    # The export is version 1 of TF Serving's model base path serving/, which the query used.
    assert os.listdir(out / "serving") == ["1"]
    assert "exported: %s" % (out / "serving" / "1") in proc.stdout
    assert "querying the SavedModel %s" % (out / "serving" / "1") in proc.stdout
    # Nothing half-written is left behind (atomic writes use hidden temporary names).
    assert not [p for p in os.listdir(out) if p.startswith(".")]
