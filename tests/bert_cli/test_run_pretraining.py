"""run_pretraining.py in-process: golden eval losses, the original's train trajectory replayed,
and bad input stopped before training.

The distributed runs (mirrored, multi-worker), kill -9 resume and the real-data run are in
test_run_pretraining_distributed.py / test_run_pretraining_real_data.py.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_cli import run_pretraining
from bert_cli.flags import FlagError
from data.pretraining import dataset as pretraining_dataset
from tests.support.features import float_feature, int64_feature
from modeling import checkpoints
from modeling.training import step_log
from modeling.config import ConfigError
from tests import paths
from tests.support import noise
from tests.support.tools import KilledAfterFirstCheckpoint

TRAJ = os.path.join(paths.GOLDEN, "pretraining_trajectory")
TRAJ_RECORDS = os.path.join(TRAJ, "seq64_seed12345_dupe1.tfrecord")
NOISE_MARGIN = 5.0  # tolerances: 5x the original's own float noise floor (README section 7)


def parse_flags(argv):
    """A fresh FlagValues with run_pretraining's flags, parsed from ``argv``."""
    values = flags.FlagValues()
    run_pretraining.define_flags(values)
    values(["run_pretraining.py"] + list(argv))
    return values


def trajectory_args(output_dir, *extra):
    return ["--bert_config_file=%s" % os.path.join(TRAJ, "init", "bert_config.json"),
            "--init_checkpoint=%s" % os.path.join(TRAJ, "init", "bert_model.ckpt"),
            "--input_file=%s" % TRAJ_RECORDS, "--output_dir=%s" % output_dir,
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--train_batch_size=8",
            "--eval_batch_size=8", "--max_eval_steps=2", "--learning_rate=1e-3",
            "--num_train_steps=40", "--num_warmup_steps=4"] + list(extra)


def read_eval_results(output_dir):
    results = {}
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        for line in f:
            key, value = line.strip().split(" = ")
            results[key] = float(value)
    return results


# ------------------------------------------------------------------------------ golden eval


def _write_golden_batch(golden, path):
    names = {"input_ids": "input_ids", "input_mask": "input_mask",
             "segment_ids": "token_type_ids", "masked_lm_positions": "masked_lm_positions",
             "masked_lm_ids": "masked_lm_ids", "next_sentence_labels": "next_sentence_labels"}
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(golden["input_ids"].shape[0]):
            feature = {name: int64_feature(golden[key][i]) for name, key in names.items()}
            feature["masked_lm_weights"] = float_feature(golden["masked_lm_weights"][i])
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())


@pytest.mark.parametrize("name", ["tiny", "tiny_wide_init"])
def test_eval_reproduces_golden_losses(name, tmp_path):
    folder = os.path.join(paths.GOLDEN, "modeling", name)
    golden = dict(np.load(os.path.join(folder, "outputs.npz")))
    records = str(tmp_path / "golden_batch.tfrecord")
    _write_golden_batch(golden, records)
    batch, seq = golden["input_ids"].shape
    predictions = golden["masked_lm_ids"].shape[1]
    out = tmp_path / "out"
    results = run_pretraining.run(parse_flags([
        "--bert_config_file=%s" % os.path.join(folder, "bert_config.json"),
        "--init_checkpoint=%s" % os.path.join(folder, "bert_model.ckpt"),
        "--input_file=%s" % records, "--output_dir=%s" % out, "--do_eval",
        "--max_seq_length=%d" % seq, "--max_predictions_per_seq=%d" % predictions,
        "--eval_batch_size=%d" % batch, "--max_eval_steps=1"]))
    # The original's metric_fn on the golden outputs (one batch).
    w = golden["masked_lm_weights"].reshape(-1).astype(np.float64)
    ids = golden["masked_lm_ids"].reshape(-1)
    expected = {
        "loss": float(golden["total_loss"]),
        "masked_lm_loss": float((w * golden["masked_lm_example_loss"]).sum() / w.sum()),
        "masked_lm_accuracy": float((w * (golden["masked_lm_log_probs"].argmax(-1) == ids)
                                     ).sum() / w.sum()),
        "next_sentence_loss": float(golden["next_sentence_loss"]),
        "next_sentence_accuracy": float((golden["next_sentence_log_probs"].argmax(-1)
                                         == golden["next_sentence_labels"][:, 0]).mean()),
        "global_step": 0,
    }
    written = read_eval_results(out)
    assert set(written) == set(expected)
    for key, value in expected.items():
        assert results[key] == pytest.approx(value, abs=1e-5), key
        assert written[key] == pytest.approx(value, abs=1e-5), key


def test_eval_of_the_trajectory_initial_checkpoint(tmp_path):
    with open(os.path.join(TRAJ, "eval_results.json")) as f:
        golden = json.load(f)["init"]
    results = run_pretraining.run(parse_flags(trajectory_args(tmp_path, "--do_eval")))
    for key, value in golden.items():
        assert results[key] == pytest.approx(value, abs=1e-5), key


# ------------------------------------------------------------------------- trajectory replay


@pytest.fixture(scope="session")
def trajectory_run(tmp_path_factory):
    """40 deterministic train steps from the trajectory's initial checkpoint (a checkpoint after
    every step), then eval; shared with the kill -9 resume test as its uninterrupted run."""
    output_dir = tmp_path_factory.mktemp("trajectory_run")
    results = run_pretraining.run(parse_flags(trajectory_args(
        output_dir, "--do_train", "--do_eval", "--deterministic", "--save_checkpoints_steps=1",
        "--keep_checkpoint_max=40", "--iterations_per_loop=10")))
    return output_dir, results


def test_deterministic_training_replays_the_original_trajectory(trajectory_run):
    """README section 7: same checkpoint, same batches, 40 train steps of the original."""
    with open(os.path.join(TRAJ, "float_noise_floor.json")) as f:
        floor = json.load(f)["float_noise_floor_same_lr"]
    traj = np.load(os.path.join(TRAJ, "trajectory.npz"))
    tmp_path, results = trajectory_run

    log = step_log.read_step_log(str(tmp_path))
    assert [r["step"] for r in log] == list(range(1, 41))
    # The learning rate of every update: schedule(t + 1), bit for bit.
    np.testing.assert_array_equal(np.float32([r["learning_rate"] for r in log]),
                                  traj["lr_used"])
    loss_diff = np.abs(np.float32([r["loss"] for r in log]) - traj["total_loss"])
    norm_diff = np.abs(np.float32([r["global_norm"] for r in log]) - traj["global_norm"])
    diffs = floor["trajectory_max_abs_diff"]
    noise.within("pretraining_trajectory/total_loss", loss_diff.max(),
                 NOISE_MARGIN * diffs["total_loss"])
    noise.within("pretraining_trajectory/global_norm", norm_diff.max(),
                 NOISE_MARGIN * diffs["global_norm"])

    # Parameters after steps 1 and 10 (snapshots) and after step 40 (the final checkpoint).
    def ours_after(step):
        model = _fresh_model()
        checkpoints.load_checkpoint(model, str(tmp_path / ("ckpt-%d" % step)), log=False)
        return checkpoints.model_tf1_arrays(model)

    for step in (1, 10):
        snapshot = dict(np.load(os.path.join(TRAJ, "params_after_step_%d.npz" % step)))
        ours = ours_after(step)
        worst = 0.0
        for name, value in snapshot.items():
            if name.endswith("/rows"):
                continue
            if name.endswith("/values"):
                table = name[: -len("/values")]
                rows = snapshot[table + "/rows"]
                worst = max(worst, np.abs(ours[table][rows] - value).max())
            else:
                worst = max(worst, np.abs(ours[name] - value).max())
        noise.within("pretraining_trajectory/params_after_step_%d" % step, worst,
                     NOISE_MARGIN * floor["params_after_step_%d_max_abs_diff" % step])
    final = checkpoints.read_tf1_checkpoint(os.path.join(TRAJ, "after_step_40",
                                                         "bert_model.ckpt"))
    exported = checkpoints.read_tf1_checkpoint(str(tmp_path / "export" / "bert_model.ckpt"))
    worst = max(np.abs(exported[name] - value).max() for name, value in final.items())
    noise.within("pretraining_trajectory/final_params", worst,
                 NOISE_MARGIN * floor["final_params_max_abs_diff"])
    assert int(exported["global_step"]) == 40

    with open(os.path.join(TRAJ, "eval_results.json")) as f:
        golden_eval = json.load(f)["final"]
    for key, value in golden_eval.items():
        assert results[key] == pytest.approx(value, abs=1e-5), key


def _fresh_model():
    from modeling.config import BertConfig
    from modeling.heads.pretraining import BertPretrainingModel

    config = BertConfig.from_json_file(os.path.join(TRAJ, "init", "bert_config.json"))
    return BertPretrainingModel(config, seq_length=64, max_predictions_per_seq=10)


@pytest.mark.bf16_matmul
def test_bf16_lamb_accumulation_shuffled_run_resumes(tmp_path):
    """The other code paths of a training run: mixed_bfloat16, LAMB, 2 micro-batches per
    update, the shuffling pipeline and the XLA-fused optimizer update (the default); a run
    restarted from its step-2 checkpoint (iterator state of the shuffled pipeline restored)
    ends exactly as the uninterrupted one; then eval of the saved checkpoint. The whole step
    under XLA (--use_xla) with accumulation is checked on a tiny model in
    tests/modeling/training/backends/tensorflow/test_steps.py (its compile is too slow for this
    model here)."""
    args = trajectory_args(tmp_path, "--do_train", "--mixed_precision=bf16", "--optimizer=lamb",
                           "--num_accumulation_steps=2", "--num_train_steps=4",
                           "--save_checkpoints_steps=2", "--iterations_per_loop=2")
    import keras

    try:
        run_pretraining.run(parse_flags(args))
        full_log = step_log.read_step_log(str(tmp_path))
        full = checkpoints.read_tf1_checkpoint(str(tmp_path / "export" / "bert_model.ckpt"))
        # As if killed after the step-2 checkpoint: forget ckpt-4, run the same command again.
        for name in os.listdir(tmp_path):
            if name.startswith("ckpt-4"):
                os.remove(tmp_path / name)
        tf.compat.v1.train.update_checkpoint_state(str(tmp_path), str(tmp_path / "ckpt-2"))
        run_pretraining.run(parse_flags(args))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    log = step_log.read_step_log(str(tmp_path))
    assert [r["step"] for r in log] == [1, 2, 3, 4]
    assert all(np.isfinite(r["loss"]) and r["global_norm"] > 0 for r in log)
    assert [r["loss"] for r in log] == [r["loss"] for r in full_log]
    resumed = checkpoints.read_tf1_checkpoint(str(tmp_path / "export" / "bert_model.ckpt"))
    for name, value in full.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-4")
    results = run_pretraining.run(parse_flags(trajectory_args(tmp_path, "--do_eval")))
    assert results["global_step"] == 4 and np.isfinite(results["loss"])



def test_kill_9_after_a_checkpoint_then_resume_equals_uninterrupted(trajectory_run, tmp_path):
    """The tool killed with SIGKILL after its first checkpoint (a process of its own, as a
    user's is), then the same flags run again (here: the state is what the killed process left
    on disk): it resumes and ends with the bits of the uninterrupted run (``trajectory_run``:
    the same flags except checkpoint and loop sizes, which do not change the math)."""
    args = trajectory_args(tmp_path, "--do_train", "--deterministic", "--iterations_per_loop=5",
                           "--save_checkpoints_steps=5")
    command = [sys.executable, os.path.join(paths.ROOT, "run_pretraining.py")] + args
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    KilledAfterFirstCheckpoint(command, cwd=paths.ROOT, env=env).wait(timeout=540)
    assert not (tmp_path / "export").exists()  # it did not finish
    step_at_kill = int(tf.train.latest_checkpoint(str(tmp_path)).rsplit("-", 1)[-1])
    assert 5 <= step_at_kill < 40
    run_pretraining.run(parse_flags(args))

    reference_dir, _ = trajectory_run
    resumed = checkpoints.read_tf1_checkpoint(str(tmp_path / "export" / "bert_model.ckpt"))
    reference = checkpoints.read_tf1_checkpoint(str(reference_dir / "export" /
                                                    "bert_model.ckpt"))
    assert set(resumed) == set(reference)
    for name, value in reference.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert ([r["loss"] for r in step_log.read_step_log(str(tmp_path))]
            == [r["loss"] for r in step_log.read_step_log(str(reference_dir))])


@pytest.mark.parametrize("mode", ["fused_kernels", "deterministic"])
def test_resume_with_dropout_ends_with_the_same_bits(tmp_path, mode):
    """Dropout 0.1: a run restarted from its step-3 checkpoint draws the masks that the
    uninterrupted run drew (the dropout seed states are in the checkpoint), on the default path
    (fused CPU dropout kernel, shuffled pipeline) and with --deterministic (TensorFlow's
    stateless dropout, file order): the same losses and the same final bits."""
    with open(os.path.join(TRAJ, "init", "bert_config.json")) as f:
        config = json.load(f)
    config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    (tmp_path / "bert_config.json").write_text(json.dumps(config))

    def args(folder):
        return trajectory_args(tmp_path / folder, "--do_train", "--num_train_steps=6",
                               "--save_checkpoints_steps=3", "--iterations_per_loop=3",
                               "--bert_config_file=%s" % (tmp_path / "bert_config.json"),
                               *(["--deterministic"] if mode == "deterministic" else []))

    run_pretraining.run(parse_flags(args("full")))
    run_pretraining.run(parse_flags(args("part")))
    for name in os.listdir(tmp_path / "part"):  # as if killed after the step-3 checkpoint
        if name.startswith("ckpt-6"):
            os.remove(tmp_path / "part" / name)
    tf.compat.v1.train.update_checkpoint_state(str(tmp_path / "part"),
                                               str(tmp_path / "part" / "ckpt-3"))
    run_pretraining.run(parse_flags(args("part")))
    full = tf.train.load_checkpoint(str(tmp_path / "full" / "ckpt-6"))
    resumed = tf.train.load_checkpoint(str(tmp_path / "part" / "ckpt-6"))
    names = [n for n in full.get_variable_to_shape_map()
             if n.startswith(("model/", "optimizer/", "rng/"))]
    for name in names:
        np.testing.assert_array_equal(resumed.get_tensor(name), full.get_tensor(name),
                                      err_msg=name)
    assert sum(n.startswith("rng/") for n in names) == 7  # 1 + 3 per layer (2 layers)
    assert ([r["loss"] for r in step_log.read_step_log(str(tmp_path / "part"))]
            == [r["loss"] for r in step_log.read_step_log(str(tmp_path / "full"))])


# -------------------------------------------------------------------------------- bad input


def test_bad_input_is_stopped_before_training(tmp_path):
    def run(*extra, output=tmp_path / "out"):
        return run_pretraining.run(parse_flags(trajectory_args(output, "--do_train", *extra)))

    with pytest.raises(pretraining_dataset.PretrainingDataError,
                       match=r"seq64.*input_ids has 64 values per record but "
                             r"--max_seq_length=60"):
        run("--max_seq_length=60")
    with pytest.raises(pretraining_dataset.PretrainingDataError,
                       match="--max_predictions_per_seq=20"):
        run("--max_predictions_per_seq=20")
    with pytest.raises(pretraining_dataset.PretrainingDataError, match="no file matched"):
        run("--input_file=%s" % (tmp_path / "missing-*.tfrecord"))
    # Config/checkpoint mismatch: the tiny (H=64) checkpoint into a wider model.
    wide = tmp_path / "wide_config.json"
    with open(os.path.join(TRAJ, "init", "bert_config.json")) as f:
        config = json.load(f)
    config.update(hidden_size=128, intermediate_size=256)
    wide.write_text(json.dumps(config))
    with pytest.raises(checkpoints.CheckpointError, match="shape"):
        run("--bert_config_file=%s" % wide)
    with pytest.raises(ConfigError):
        bad = tmp_path / "bad_config.json"
        bad.write_text("{not json")
        run("--bert_config_file=%s" % bad)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(FlagError, match="--output_dir=.*writable"):
        run(output=blocker / "sub")
    with pytest.raises(FlagError, match="do_train"):
        run_pretraining.run(parse_flags(trajectory_args(tmp_path)))
    with pytest.raises(FlagError, match="--num_train_steps=0"):
        run("--num_train_steps=0")
    with pytest.raises(FlagError, match="Cannot use sequence length 128 because the BERT "
                                        "model was only trained up to sequence length 64"):
        run("--max_seq_length=128")
    # Nothing was trained, nothing written.
    assert not any(name.startswith("ckpt") for name in os.listdir(tmp_path / "out"))


def test_cli_error_is_one_line_and_exit_1(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, os.path.join(paths.ROOT, "run_pretraining.py")]
        + trajectory_args(tmp_path / "out", "--do_train", "--max_seq_length=32"),
        capture_output=True, text=True, env=env, cwd=paths.ROOT, timeout=300)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.startswith("run_pretraining")]
    assert len(lines) == 1 and "--max_seq_length=32" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
