"""The model on Keras' JAX backend (CPU), in two processes of their own (KERAS_BACKEND is read
once per process): with TensorFlow installed, the public encoder goldens, the original's
dropout-free 40-step pre-training trajectory with the original optimizer and its 20-step
classifier fine-tuning run (clipping by the original's norm); with TensorFlow
imports blocked, a classifier's fine-tuning, mixed_bfloat16 steps and model + optimizer +
training steps. The
measurements come from tests/modeling/jax_checks.py."""

import json
import os
import subprocess
import sys

import pytest

from tests import paths
from tests.bert_cli.test_run_pretraining import NOISE_MARGIN, TRAJ
from tests.bert_tasks.jax_tools import compilation_cache_env
from tests.support import noise

pytest.importorskip("jax", reason="jax is in requirements-dev.txt")

NO_TENSORFLOW = os.path.join(paths.ROOT, "tests", "support", "no_tensorflow")


def _run(tmp_path_factory, checks, block_tensorflow=False):
    # (the session's JAX compilation cache: what the suite's other JAX processes compiled; a
    # long timeout: in make test's AVX2 pass this file runs beside the suite at the lowest CPU
    # priority, and its process may wait for a core for most of the suite's time)
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu",
               **compilation_cache_env(tmp_path_factory))
    if block_tensorflow:
        env["PYTHONPATH"] = os.pathsep.join([NO_TENSORFLOW, paths.ROOT])
    proc = subprocess.run([sys.executable, "-m", "tests.modeling.jax_checks"] + list(checks),
                          cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=1800)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("JAX_CHECK "):
            _, name, payload = line.split(" ", 2)
            results[name] = json.loads(payload)
    assert proc.returncode == 0 and set(results) == set(checks), (
        proc.stdout[-2000:] + proc.stderr[-3000:])
    return results


@pytest.fixture(scope="module")
def with_tensorflow(tmp_path_factory):
    return _run(tmp_path_factory, ["goldens", "trajectory", "finetuning_golden"])


@pytest.fixture(scope="module")
def without_tensorflow(tmp_path_factory):
    return _run(tmp_path_factory, ["finetuning", "bf16", "no_tensorflow"],
                block_tensorflow=True)


def test_encoder_goldens_on_jax(with_tensorflow):
    """The forward compiled (as the JAX tools run it), every variable read from the
    checkpoint: tiny and tiny_wide_init within the TensorFlow tests' 1e-5, MiniLM (Hugging Face
    safetensors, read without TensorFlow) within the noise measured for XLA's CPU kernels
    (tests/support/noise.py)."""
    result = with_tensorflow["goldens"]["diffs"]
    assert with_tensorflow["goldens"]["unloaded"] == []
    for name in ("tiny", "tiny_wide_init"):
        for key, diff in result[name].items():
            noise.within("jax/encoder_golden/%s/%s" % (name, key), diff, 1e-5)
    for key, diff in result["minilm"].items():
        noise.within("jax/encoder_golden/minilm/" + key, diff, noise.JAX_MINILM_GOLDEN_BOUND)


def test_pretraining_trajectory_on_one_device_matches_the_original(with_tensorflow):
    """40 steps of the original's run (AdamWeightDecay, clip 1.0, warmup + decay, schedule one
    step ahead; records in file order through the numpy reader) on one device, with the step
    and optimizer alone (run_pretraining.py's run on two devices:
    tests/bert_tasks/test_jax_pretraining.py): losses and gradient norms within 1e-5 relative,
    the rate within 1e-5 of the peak, final parameters within the TensorFlow test's bound (5x
    the original's own float noise floor)."""
    with open(os.path.join(TRAJ, "float_noise_floor.json")) as f:
        floor = json.load(f)["float_noise_floor_same_lr"]
    result = with_tensorflow["trajectory"]
    assert result["steps"] == 40 and result["iterations"] == 40
    assert result["params_missing"] == [] and result["unloaded"] == []
    noise.within("jax/pretraining_trajectory/loss_rel", result["loss_rel"], 1e-5)
    noise.within("jax/pretraining_trajectory/global_norm_rel", result["global_norm_rel"], 1e-5)
    assert result["lr_abs"] <= 1e-5 * 1e-3, result
    noise.within("jax/pretraining_trajectory/final_params", result["params_abs"],
                 NOISE_MARGIN * floor["final_params_max_abs_diff"])


def test_the_originals_finetuning_run_on_jax(with_tensorflow):
    """The original's classifier fine-tuning (``finetuning_trajectory``: 20 steps, 7 clipped)
    with the JAX step: the word table's gradient rows counted per occurrence in the clipping
    norm, as the original's IndexedSlices (JAX's own gradient sums them: the norm was 83% off
    at step 1 before). The tolerances of tests/support/golden_replay.py, the TensorFlow
    replay's: the larger of 1e-5 relative (loss, norm) or 5x the pre-training bound
    (parameters) and 4x the golden's noise floor."""
    from tests.support import golden_replay

    with open(os.path.join(paths.GOLDEN, "finetuning_trajectory", "float_noise_floor.json")) as f:
        floor = json.load(f)
    result = with_tensorflow["finetuning_golden"]
    margin = golden_replay.FLOOR_MARGIN
    assert result["steps"] == 20 and result["clipped_differ"] == [], result
    assert result["unloaded"] == []  # every variable from the golden's initial checkpoint
    assert result["loss_rel"] <= max(golden_replay.OWN_REL_TOLERANCE,
                                     margin * floor["loss_max_rel"]), result
    assert result["global_norm_rel"] <= max(golden_replay.OWN_REL_TOLERANCE,
                                            margin * floor["global_norm_max_rel"]), result
    assert sorted(result["params_abs"]) == sorted(floor["params_max_abs"])
    for name, diff in result["params_abs"].items():
        assert diff <= max(golden_replay.OWN_PARAM_TOLERANCE,
                           margin * floor["params_max_abs"][name]), (name, result)


def test_model_optimizer_and_steps_without_tensorflow(without_tensorflow):
    result = without_tensorflow["no_tensorflow"]
    assert result["backend"] == "jax"
    assert result["tensorflow_loaded"] is False
    assert result["optimizer"] == "modeling.training.optimizers"
    assert result["classifier_logits"] == [4, 3]
    assert result["reloaded_max_diff"] == 0.0  # .weights.h5 written and read back
    # a Hugging Face folder (safetensors) read in full
    assert result["hf_missing"] == [] and result["hf_unmapped"] == []
    losses = result["losses"]
    assert losses[-1] < 0.7 * losses[0], losses  # five steps on one batch: the loss falls


def test_classifier_fine_tuning_loss_falls_without_tensorflow(without_tensorflow):
    """MiniLM from its safetensors (read in full) + a classifier head, 32 MRPC pairs, 4 epochs
    of the original's optimizer (TensorFlow imports blocked): the epoch's mean loss falls each
    time."""
    assert without_tensorflow["finetuning"]["unloaded"] == []
    epochs = without_tensorflow["finetuning"]["epoch_losses"]
    assert all(b < a for a, b in zip(epochs, epochs[1:])), epochs
    assert epochs[-1] < 0.85 * epochs[0], epochs


def test_mixed_bfloat16_steps(without_tensorflow):
    """mixed_bfloat16 on JAX: float32 variables, bfloat16 activations, float32 losses (the
    heads' log-softmax), and the loss falls over five steps on one batch."""
    result = without_tensorflow["bf16"]
    assert result["variable_dtypes"] == ["float32"]
    assert result["sequence_output_dtype"] == "bfloat16"
    assert result["loss_dtype"] == "float32"
    assert result["losses"][-1] < 0.7 * result["losses"][0], result["losses"]
