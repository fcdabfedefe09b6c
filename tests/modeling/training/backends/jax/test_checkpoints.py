"""modeling/training/backends/jax/checkpoints.py's housekeeping (no JAX needed): an input state
whose checkpoint was never written (a kill between the two) is removed, nothing else."""

from modeling.training.backends.jax import checkpoints


def test_orphan_input_states_are_removed_and_nothing_else(tmp_path):
    names = ["jax-ckpt-8.npz", "jax-ckpt-8.input.index", "jax-ckpt-8.input.data-00000-of-00001",
             # killed after the input state of step 16, before its checkpoint:
             "jax-ckpt-16.input.index", "jax-ckpt-16.input.data-00000-of-00001",
             # not ours: kept
             "notes-16.input.index", "jax-ckpt-x.input.index", "train_steps.jsonl"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    own = [path for _, path in checkpoints.checkpoints_in(str(tmp_path))]
    removed = checkpoints.remove_orphan_input_states(str(tmp_path), own)
    assert sorted(p.rsplit("/", 1)[1] for p in removed) == [
        "jax-ckpt-16.input.data-00000-of-00001", "jax-ckpt-16.input.index"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n in names if not n.startswith("jax-ckpt-16."))
