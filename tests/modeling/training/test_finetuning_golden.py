"""Fine-tuning's update against the original's (``../shared/golden/finetuning_trajectory``:
20 steps of run_classifier's create_model + create_optimizer on the tiny model, 7 of them
clipped), replayed by ``tests/support/golden_replay.py`` on the op-by-op and the fused path;
the rule that decides which gradients reach clipping sparse; and the replay's own verdict
beyond a tolerance (exit status 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import modeling
from modeling.layers import embeddings
from modeling.training import objectives, trainer
from tests import paths
from tests.support import golden_replay
from tests.support import noise

GOLDEN = os.path.join(paths.GOLDEN, "finetuning_trajectory")


@pytest.mark.parametrize("path", ["opbyop", "fused"])
def test_the_replay_of_the_originals_finetuning_steps_passes(path):
    report = golden_replay.replay_finetuning(GOLDEN, path)
    for quantity in ("loss_max_rel", "global_norm_max_rel"):
        noise.record("finetuning_golden/%s/%s" % (path, quantity), report[quantity],
                     report["tolerances"][quantity.split("_max")[0]])
    for name, diff in report["params_max_abs"].items():
        noise.record("finetuning_golden/%s/%s" % (path, name), diff,
                     report["tolerances"]["params"][name])
    assert report["steps"] == 20 and report["steps_clipped"] == 7
    assert report["clipped_steps_differ"] == []
    assert report["ok"], json.dumps(report)
    # Before the rule (token types sparse), the norm was 40% off on clipped steps.
    assert report["global_norm_max_rel"] <= report["tolerances"]["global_norm"]


def test_only_the_word_table_reaches_clipping_sparse_off_tpu():
    config = modeling.BertConfig.from_json_file(os.path.join(GOLDEN, "bert_config.json"))
    model = modeling.BertClassifier(modeling.BertModel(config, seq_length=16), num_labels=2)
    tables = embeddings.sparse_gradient_tables(model)
    assert [t.path.rsplit("/", 2)[-2:] for t in tables] == [["word_embeddings", "embeddings"]]
    assert embeddings.sparse_gradient_tables(model, one_hot_embeddings=True) == []
    optimizer = modeling.create_optimizer(1e-3, 10, 1)
    loop = trainer.Trainer(
        model, optimizer, objectives.MeanLossObjective(lambda out, batch: out["logits"]),
        None, trainer.TrainerConfig(model_dir="unused", num_train_steps=1))
    sparse = [v.path for v, dense in zip(model.trainable_variables, loop._dense)
              if not dense]
    assert len(sparse) == 1 and "word_embeddings" in sparse[0]
    assert any("token_type" in v.path for v in model.trainable_variables)


def test_the_replay_exits_1_beyond_a_tolerance(tmp_path):
    folder = tmp_path / "golden"
    folder.mkdir()
    for name in os.listdir(GOLDEN):
        os.symlink(os.path.join(GOLDEN, name), folder / name)
    os.remove(folder / "trajectory.jsonl")
    with open(os.path.join(GOLDEN, "trajectory.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows[9]["global_norm"] *= 1.001  # a norm 0.1% off at step 10
    with open(folder / "trajectory.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([sys.executable, "-m", "tests.support.golden_replay", "finetuning",
                           str(folder)], cwd=paths.ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                   PYTHONPATH=paths.ROOT), timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["ok"] and report["global_norm_max_rel"] > 5e-4
