"""modeling/training/backends/jax/checkpoints.py: the housekeeping (an input state whose
checkpoint was never written is removed, nothing else) and, on Keras' JAX backend in a process
of its own, Orbax's store: save, keep, restore, and a folder of the npz store before it resumed
once."""

import json
import os
import subprocess
import sys

import pytest

from modeling.training.backends.jax import checkpoints
from tests import paths


def test_orphan_input_states_are_removed_and_nothing_else(tmp_path):
    names = ["jax-ckpt-8.npz", "jax-ckpt-8.input.index", "jax-ckpt-8.input.data-00000-of-00001",
             # killed after the input state of step 16, before its checkpoint:
             "jax-ckpt-16.input.index", "jax-ckpt-16.input.data-00000-of-00001",
             # Orbax's store: step 24 complete, step 32's input state without its checkpoint
             "jax_input/24.index", "jax_input/24.data-00000-of-00001",
             "jax_input/32.index", "jax_input/32.data-00000-of-00001",
             # not ours: kept
             "notes-16.input.index", "jax-ckpt-x.input.index", "train_steps.jsonl",
             "jax_input/notes.txt"]
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    own = [path for _, path in checkpoints.checkpoints_in(str(tmp_path))]
    own.append(str(tmp_path / "jax_checkpoints" / "24"))  # as checkpoints_in lists a step
    removed = checkpoints.remove_orphan_input_states(str(tmp_path), own)
    assert sorted(os.path.relpath(p, tmp_path) for p in removed) == [
        "jax-ckpt-16.input.data-00000-of-00001", "jax-ckpt-16.input.index",
        "jax_input/32.data-00000-of-00001", "jax_input/32.index"]
    left = sorted(os.path.relpath(os.path.join(root, f), tmp_path)
                  for root, _, found in os.walk(tmp_path) for f in found)
    assert left == sorted(n for n in names if not n.startswith(("jax-ckpt-16.",
                                                                "jax_input/32.")))


def test_a_process_removes_its_own_dropped_input_states_only(tmp_path):
    """After a save, each process removes the states of its share whose checkpoint is gone
    (dropped by --keep_checkpoint_max); the other processes' and the run's one state stay."""
    share = "process-1-of-2-devices-2"
    names = ["jax_input/8.%s.index" % share, "jax_input/8.%s.data-00000-of-00001" % share,
             "jax_input/16.%s.index" % share,  # kept: its checkpoint is there
             "jax_input/8.process-0-of-2-devices-2.index", "jax_input/8.index"]
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    kept = [str(tmp_path / "jax_checkpoints" / "16")]
    removed = checkpoints.remove_orphan_input_states(str(tmp_path), kept, share=share)
    assert sorted(os.path.relpath(p, tmp_path) for p in removed) == sorted(names[:2])
    removed = checkpoints.remove_orphan_input_states(str(tmp_path), kept, share="")
    assert [os.path.relpath(p, tmp_path) for p in removed] == ["jax_input/8.index"]
    assert sorted(os.listdir(tmp_path / "jax_input")) == [
        "16.%s.index" % share, "8.process-0-of-2-devices-2.index"]


def test_input_states_go_beside_their_checkpoint():
    assert checkpoints.input_state_prefix("/o/jax_checkpoints/40") == "/o/jax_input/40"
    assert checkpoints.input_state_prefix("/o/jax-ckpt-40.npz") == "/o/jax-ckpt-40.input"


_STORE = r"""
import json, os, sys
import numpy as np
import keras
import modeling
from modeling.training.backends.jax import checkpoints, steps

folder = sys.argv[1]
config = modeling.BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16,
                             max_position_embeddings=16, hidden_dropout_prob=0.1)

def build(seed):
    keras.utils.set_random_seed(seed)
    model = modeling.BertPretrainingModel(config)
    optimizer = modeling.create_optimizer(1e-3, 10, 1)
    optimizer.build(model.trainable_variables)
    return model, optimizer

model, optimizer = build(1)
state = steps.TrainState.from_model(model, optimizer)
# the store before Orbax: one npz file (its writer, as it was, for the resume from it)
arrays = {}
for prefix, values in (("t", state.trainable), ("n", state.non_trainable),
                       ("o", state.optimizer)):
    for index, value in enumerate(values):
        arrays["%s%d" % (prefix, index)] = np.asarray(value)
meta = {"step": 3, "records": 24, "variables": [v.path for v in model.trainable_variables],
        "non_trainable": [v.path for v in model.non_trainable_variables],
        "optimizer": [v.path for v in optimizer.variables]}
arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
np.savez(os.path.join(folder, "jax-ckpt-3.npz"), **arrays)
out = {}
other, other_optimizer = build(2)  # other values: the restore must replace them all
out["from_npz"] = checkpoints.restore_checkpoint(
    checkpoints.checkpoints_in(folder)[-1][1], other, other_optimizer)
out["npz_equal"] = all(np.array_equal(a.numpy(), b.numpy())
                       for a, b in zip(model.weights + optimizer.variables,
                                       other.weights + other_optimizer.variables))
# a step a killed save left under its temporary name: never listed, gone at the next save
os.makedirs(os.path.join(folder, "jax_checkpoints", "4.orbax-checkpoint-tmp-1", "state"))
out["half_written_listed"] = any(s == 4 for s, _ in checkpoints.checkpoints_in(folder))
for step in (5, 7, 9):  # Orbax from here on, the newest two kept
    path = checkpoints.save_checkpoint(folder, state, model, optimizer, step, step * 8, keep=2)
out["listed"] = [[s, os.path.relpath(p, folder)] for s, p in checkpoints.checkpoints_in(folder)]
third, third_optimizer = build(3)
out["from_orbax"] = checkpoints.restore_checkpoint(path, third, third_optimizer)
out["orbax_equal"] = all(np.array_equal(a.numpy(), b.numpy())
                         for a, b in zip(model.weights + optimizer.variables,
                                         third.weights + third_optimizer.variables))
values, meta = checkpoints.read_checkpoint(path)
out["read"] = [len(values), meta["step"], meta["records"]]
try:
    checkpoints.restore_checkpoint(path, modeling.BertPretrainingModel(
        modeling.BertConfig(**dict(config.to_dict(), num_hidden_layers=2))), third_optimizer)
except Exception as e:
    out["other_model"] = str(e)
print("STORE " + json.dumps(out))
"""


def test_orbax_store_saves_keeps_restores_and_takes_over_from_npz(tmp_path):
    """Keras on JAX: a folder holding an npz checkpoint of the store before Orbax resumes from
    it (every value back), then Orbax checkpoints follow, the newest two kept, the npz left, a
    step a killed save left half-written never listed and removed;
    an Orbax step restores every model and optimizer value; another model's checkpoint is one
    error naming it."""
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is in requirements-dev.txt")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.join(paths.ROOT, "tests", "support",
                                                        "no_tensorflow"), paths.ROOT]))
    proc = subprocess.run([sys.executable, "-c", _STORE, str(tmp_path)], cwd=paths.ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("STORE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[0][len("STORE "):])
    assert out["from_npz"] == [3, 24] and out["npz_equal"]
    assert out["listed"] == [[3, "jax-ckpt-3.npz"], [7, "jax_checkpoints/7"],
                             [9, "jax_checkpoints/9"]]
    assert out["from_orbax"] == [9, 72] and out["orbax_equal"]
    assert out["read"][1:] == [9, 72] and out["read"][0] > 20
    assert "a checkpoint of another model" in out["other_model"]
    assert not out["half_written_listed"]
    assert sorted(os.listdir(tmp_path / "jax_checkpoints")) == ["7", "9"]  # the half-written gone


def test_without_orbax_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)  # as if not installed
    with pytest.raises(checkpoints.InputError, match="pip install 'orbax-checkpoint==0.12.8'"):
        checkpoints.read_checkpoint("/nowhere/jax_checkpoints/3")


def test_on_gs_without_google_cloud_storage_the_error_says_how_to_install_it(monkeypatch):
    pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is in requirements-dev.txt")
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)  # as if not installed
    with pytest.raises(checkpoints.InputError, match="gs://b/out/jax_checkpoints/3: .*"
                                                     "pip install google-cloud-storage"):
        checkpoints.read_checkpoint("gs://b/out/jax_checkpoints/3")
