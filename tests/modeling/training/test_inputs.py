"""modeling.training.inputs: the JAX steps' input contract (open at a checkpoint, save)
and the one rule of which reader a JAX job uses."""

import os

import numpy as np
import tensorflow as tf

from modeling.training import inputs


def _batches(seed=None):
    """Batches of 4 of the numbers 0..63, shuffled with ``seed`` (a shuffle buffer: state that
    only a saved iterator keeps)."""
    dataset = tf.data.Dataset.range(64).repeat()
    if seed is not None:
        dataset = dataset.shuffle(16, seed=seed)
    return dataset.batch(4, drop_remainder=True).map(lambda x: {"x": x})


def _take(iterator, n):
    return [next(iterator)["x"].tolist() for _ in range(n)]


def test_re_read_input_starts_at_the_checkpoints_record_count(tmp_path):
    seen = []
    data = inputs.ReReadInput(lambda records: iter(seen.append(records) or [records]))
    assert list(data.open(None, 0)) == [0]
    assert list(data.open(str(tmp_path / "jax-ckpt-2.npz"), 8)) == [8]
    data.save(str(tmp_path / "jax-ckpt-2.npz"))
    assert seen == [0, 8] and os.listdir(tmp_path) == []


def test_tf_data_input_resumes_from_its_saved_iterator_state(tmp_path):
    checkpoint = str(tmp_path / "jax-ckpt-3.npz")
    whole = _take(inputs.TFDataInput(_batches(seed=7)).open(None, 0), 6)
    first = inputs.TFDataInput(_batches(seed=7), transform=lambda b: {"x": b["x"] + 0})
    batches = first.open(None, 0)
    assert _take(batches, 3) == whole[:3]
    first.save(checkpoint)
    assert any(name.startswith("jax-ckpt-3.input") for name in os.listdir(tmp_path))
    # A new process's input, opened at the checkpoint: the shuffle buffer as it was.
    assert _take(inputs.TFDataInput(_batches(seed=7)).open(checkpoint, 12), 3) == whole[3:]


def test_tf_data_input_without_a_saved_state_skips_the_batches_read(tmp_path):
    checkpoint = str(tmp_path / "jax-ckpt-2.npz")  # written by ReReadInput: no state beside it
    whole = _take(inputs.TFDataInput(_batches()).open(None, 0), 4)
    assert _take(inputs.TFDataInput(_batches()).open(checkpoint, 8), 2) == whole[2:]


def test_a_process_share_has_its_own_state_and_skips_by_global_steps(tmp_path):
    """A process's part of each global batch (2 of the 4 rows): its state is saved under its
    share; without one, a resumed run skips one element per global step read."""
    checkpoint = str(tmp_path / "jax_checkpoints" / "3")
    part = inputs.TFDataInput(_batches().map(lambda b: {"x": b["x"][:2]}), global_batch=4,
                              share="process-0-of-2-devices-2")
    assert part.local and part.state_prefix(checkpoint).endswith(
        os.path.join("jax_input", "3.process-0-of-2-devices-2"))
    whole = _take(part.open(None, 0), 5)
    assert _take(part.open(checkpoint, 12), 2) == whole[3:]  # 12 records: 3 steps
    assert not inputs.TFDataInput(_batches(), share="process-0-of-1-devices-2").local


def test_tensorflow_for_input_hides_the_accelerators_from_tensorflow(monkeypatch):
    hidden = []
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda devices, kind: hidden.append((list(devices), kind)))
    assert inputs.tensorflow_for_input() is tf
    assert hidden == [([], "GPU"), ([], "TPU")]
    monkeypatch.setattr(inputs, "tensorflow_installed", lambda: False)
    assert inputs.tensorflow_for_input() is None
    assert len(hidden) == 2


def test_the_transform_applies_to_each_numpy_batch():
    data = inputs.TFDataInput(_batches(), transform=lambda b: {"x": np.asarray(b["x"]) * 10})
    batch = next(data.open(None, 0))
    assert isinstance(batch["x"], np.ndarray) and batch["x"].tolist() == [0, 10, 20, 30]
