"""Fine-tuning's update against the original's (``../shared/golden/finetuning_trajectory``:
20 steps of run_classifier's create_model + create_optimizer on the tiny model, 7 of them
clipped), replayed by ``tests/support/golden_replay.py`` on the op-by-op and the fused path;
the rule that decides which gradients reach clipping sparse; and the replay's own verdict
beyond a tolerance (exit status 1)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest

import modeling
from modeling.layers import embeddings
from modeling.training import finetuning, job, objectives
from modeling.training.backends.tensorflow import steps as trainer
from tests import paths
from tests.support import golden_replay
from tests.support import noise

GOLDEN = os.path.join(paths.GOLDEN, "finetuning_trajectory")


def _training_inputs(folder: str) -> tuple:
    """What a replay of ``folder`` trains from (its summary, config, initial checkpoint and
    features), each as the file it resolves to: two folders with the same ones train the same
    run; the trajectory and snapshots they are compared with may differ."""
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    names = ["summary.json", "bert_config.json", summary["features"],
             os.path.dirname(summary["init_checkpoint"]) or summary["init_checkpoint"]]
    return tuple(os.path.realpath(os.path.join(folder, name)) for name in names)


def _link_or_copy(source, target):
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


class _Replays:
    """``golden_replay``'s replay and command-line entry point, run in this process with each
    of their trainings done once per module: the replay trains (``finetuning.finetune``) and
    then compares; a later replay of the same training inputs on the same path (same
    ``finetune`` arguments) gets the files the first one's training wrote (its step log and
    checkpoints) instead of training again, and compares them with its own folder. The
    training is deterministic (dropout off, batches in file order), so the replay judges what
    it would have trained; which replays share a training is decided by the files they train
    from, never assumed."""

    def __init__(self, root):
        self.root = root
        self.trained = {}  # (training inputs, finetune's settings) -> (folder, result)

    @contextlib.contextmanager
    def _recording(self, folder):
        inputs = _training_inputs(folder)
        real = finetuning.finetune

        def finetune(*args, model_dir, **settings):
            key = (inputs, tuple(sorted(settings.items())))
            if key not in self.trained:
                result = real(*args, model_dir=model_dir, **settings)
                saved = os.path.join(self.root, str(len(self.trained)))
                shutil.copytree(model_dir, saved, copy_function=_link_or_copy)
                self.trained[key] = (saved, result)
                return result
            saved, result = self.trained[key]
            shutil.copytree(saved, model_dir, copy_function=_link_or_copy, dirs_exist_ok=True)
            return result

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(finetuning, "finetune", finetune)
            yield

    def replay(self, folder: str, path: str) -> dict:
        """``golden_replay.replay_finetuning(folder, path)``."""
        with self._recording(folder):
            return golden_replay.replay_finetuning(folder, path)

    def main(self, folder: str):
        """``python -m tests.support.golden_replay finetuning FOLDER`` (``main``, whose return
        value is the exit status): (status, stdout)."""
        out = io.StringIO()
        with self._recording(folder), contextlib.redirect_stdout(out):
            status = golden_replay.main(["finetuning", folder])
        return status, out.getvalue()


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    return _Replays(str(tmp_path_factory.mktemp("replayed_trainings")))


@pytest.mark.parametrize("path", ["opbyop", "fused"])
def test_the_replay_of_the_originals_finetuning_steps_passes(replays, path):
    report = replays.replay(GOLDEN, path)
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
        None, job.TrainerConfig(model_dir="unused", num_train_steps=1))
    sparse = [v.path for v, dense in zip(model.trainable_variables, loop._dense)
              if not dense]
    assert len(sparse) == 1 and "word_embeddings" in sparse[0]
    assert any("token_type" in v.path for v in model.trainable_variables)


def test_the_replay_exits_1_beyond_a_tolerance(replays, tmp_path):
    """The golden's trajectory with one norm 0.1% off: the command's verdict is exit status 1
    and its one JSON line says so. The training is the golden's own (the same inputs: linked),
    shared with the op-by-op replay above when it ran in this module (``_Replays``)."""
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
    status, stdout = replays.main(str(folder))
    assert status == 1, stdout[-2000:]
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout[-2000:]
    report = json.loads(lines[0])
    assert not report["ok"] and report["global_norm_max_rel"] > 5e-4
