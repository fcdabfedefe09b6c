"""run_pretraining.py with KERAS_BACKEND=jax (the JAX job of bert_tasks/pretraining.py), as
processes on two host devices (data-parallel, XLA's flag): the original's 40-step run (step
log, eval results, export against the goldens), kill -9 after a checkpoint then resume (bit for
bit the uninterrupted run, its step compiled once); the numpy input without TensorFlow. One
device's steps are tests/modeling/test_jax_backend.py's; the flags of the TensorFlow path,
refused with one line, tests/modeling/training/backends/jax/test_settings.py's.

The killed run is a process of its own; its resume (the first run of the next process, as a
rerun after the kill would be), the empty input and the uninterrupted run share one process
(jax_tools.run_in_one_process: one import of TensorFlow and JAX)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import paths
from tests.bert_cli.test_run_pretraining import NOISE_MARGIN, TRAJ, trajectory_args
from tests.bert_tasks.jax_tools import (compilation_cache_env, free_port, kill_one_then_rerun,
                                        one_device, processes, run_in_one_process)
from tests.support.tools import KilledAfterFirstCheckpoint

pytest.importorskip("jax", reason="jax is in requirements-dev.txt")

SCRIPT = os.path.join(paths.ROOT, "run_pretraining.py")
ENV = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
           XLA_FLAGS="--xla_force_host_platform_device_count=2")
ARGS = ("--do_train", "--deterministic", "--iterations_per_loop=5", "--save_checkpoints_steps=10")


def _command(output_dir, *extra):
    return [sys.executable, SCRIPT] + trajectory_args(output_dir, *ARGS, *extra)


@pytest.fixture(scope="module")
def jax_env(tmp_path_factory):
    """ENV with the session's JAX compilation cache (jax_tools): the runs of one model compile
    its steps once."""
    return dict(ENV, **compilation_cache_env(tmp_path_factory))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, jax_env, gcs):
    """A run killed with SIGKILL after its first checkpoint (``folder/killed``; its stderr
    lines); then in one process: that run resumed, a run on an empty input file
    (``folder/empty_out``), the uninterrupted run with --do_eval (``folder/whole``), the same
    into a gs:// folder of the loopback GCS (``gs_url``; tests/support/gcs_loopback.py). The
    runs' results (jax_tools.run_in_one_process) by name."""
    tmp = tmp_path_factory.mktemp("jax")
    gs_url = gcs.url(gcs.unique_prefix("jax_pretraining"))
    killed = tmp / "killed"
    lines = KilledAfterFirstCheckpoint(_command(killed), cwd=paths.ROOT, env=jax_env).wait()
    (tmp / "empty.tfrecord").write_bytes(b"")
    tool = "bert_cli.run_pretraining"
    results = run_in_one_process([
        ("resumed", tool, trajectory_args(killed, *ARGS)),
        ("empty_input", tool, [a if not a.startswith("--input_file=") else
                               "--input_file=%s" % (tmp / "empty.tfrecord")
                               for a in trajectory_args(tmp / "empty_out", *ARGS)]),
        ("whole", tool, trajectory_args(tmp / "whole", *ARGS, "--do_eval")),
        ("on_gs", tool, trajectory_args(gs_url, *ARGS, "--do_eval", "--save_checkpoints_steps=20",
                                        "--keep_checkpoint_max=1")),
        # bad cluster flags: one line each, before anything is written
        ("process_id_out_of_range", tool, trajectory_args(
            tmp / "bad_id", *ARGS, "--coordinator_address=127.0.0.1:1", "--num_processes=2",
            "--process_id=2")),
        ("processes_without_coordinator", tool, trajectory_args(
            tmp / "bad_flags", *ARGS, "--num_processes=2", "--process_id=0"))],
        tmp, dict(jax_env, **gcs.env))
    return {"folder": tmp, "killed_lines": lines, "gs_url": gs_url, **results}


@pytest.fixture(scope="module")
def uninterrupted(runs):
    run = runs["whole"]
    assert run["code"] == 0, run["stderr"][-3000:]
    assert "devices cpu:0, cpu:1" in run["stderr"]  # the batch split over both, one update
    return runs["folder"] / "whole"


def _steps(output_dir):
    from modeling.training import step_log

    return step_log.read_step_log(str(output_dir))


def _export(output_dir):
    from modeling import checkpoints

    return checkpoints.read_tf1_checkpoint(str(output_dir / "export" / "bert_model.ckpt"))


def test_the_originals_run_on_jax(uninterrupted):
    """Losses and gradient norms within 1e-5 relative of the original's, the eval results of
    the original (same 5 metrics, 1e-5 relative), the export within 5x the original's own float
    noise floor, TensorBoard events written."""
    from bert_common.results import read_eval_results

    with open(os.path.join(TRAJ, "float_noise_floor.json")) as f:
        floor = json.load(f)["float_noise_floor_same_lr"]
    trajectory = np.load(os.path.join(TRAJ, "trajectory.npz"))
    log = _steps(uninterrupted)
    assert [r["step"] for r in log] == list(range(1, 41))
    for key, ref in (("loss", "total_loss"), ("global_norm", "global_norm")):
        ours = np.array([r[key] for r in log])
        np.testing.assert_allclose(ours, trajectory[ref], rtol=1e-5, err_msg=key)
    ours = read_eval_results(str(uninterrupted / "eval_results.txt"))
    golden = read_eval_results(os.path.join(TRAJ, "eval_results.txt"))
    assert int(ours["global_step"]) == int(golden["global_step"]) == 40
    for key in ("loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                "next_sentence_loss"):
        assert float(ours[key]) == pytest.approx(float(golden[key]), rel=1e-5), key
    from modeling import checkpoints

    final = checkpoints.read_tf1_checkpoint(os.path.join(TRAJ, "after_step_40",
                                                         "bert_model.ckpt"))
    exported = _export(uninterrupted)
    worst = max(np.abs(exported[name] - value).max() for name, value in final.items())
    assert worst <= NOISE_MARGIN * floor["final_params_max_abs_diff"], worst
    for folder in ("train", "eval"):
        assert any(n.startswith("events.out.tfevents") for n in os.listdir(uninterrupted
                                                                           / folder)), folder
    kept = sorted(os.listdir(uninterrupted / "jax_checkpoints"), key=int)
    assert kept == ["10", "20", "30", "40"]
    # TensorFlow installed: the tf.data pipeline's iterator state beside each checkpoint.
    assert all((uninterrupted / "jax_input" / ("%d.index" % s)).exists() for s in (10, 40))


def test_kill_9_after_a_checkpoint_then_resume_is_exact(runs, uninterrupted):
    """The resumed run restores the state placed as a fresh run's: it calls one compiled step,
    the uninterrupted run's."""
    lines = runs["killed_lines"]
    assert any("Saved checkpoint for step 10" in line for line in lines), "".join(lines[-20:])
    out = runs["folder"] / "killed"
    run = runs["resumed"]
    assert run["code"] == 0, run["stderr"][-3000:]
    assert "Resuming from" in run["stderr"] and "step 10" in run["stderr"]
    assert run["step_programs"] == runs["whole"]["step_programs"] == 1
    assert _steps(out) == _steps(uninterrupted)
    whole, resumed = _export(uninterrupted), _export(out)
    assert sorted(whole) == sorted(resumed)
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_on_gs_paths_the_bits_of_the_local_run(runs, uninterrupted, gcs):
    """--output_dir on gs:// (the loopback GCS): Orbax's checkpoints (their arrays through
    TensorStore's GCS client; the newest one kept, with its input state), the step log, the
    eval results and the TF1 export are objects in the bucket, with the local run's bits."""
    from bert_common.results import read_eval_results
    from modeling import checkpoints
    from modeling.training import step_log
    from modeling.training.backends.jax import checkpoints as jax_checkpoints

    run, url = runs["on_gs"], runs["gs_url"]
    assert run["code"] == 0, run["stderr"][-3000:]
    objects = set(gcs.list_objects(url))
    prefix = url[len(gcs.bucket_url) + 1:] + "/"
    for name in ["jax_checkpoints/40/commit_success.txt", "jax_input/40.index",
                 "export/bert_model.ckpt.index", "eval_results.txt", "train_steps.jsonl"]:
        assert prefix + name in objects, name
    assert not any(o.startswith((prefix + "jax_checkpoints/20/", prefix + "jax_input/20."))
                   for o in objects)
    assert step_log.read_step_log(url) == _steps(uninterrupted)
    assert (read_eval_results(url + "/eval_results.txt")
            == read_eval_results(str(uninterrupted / "eval_results.txt")))
    ours, _ = jax_checkpoints.read_checkpoint(url + "/jax_checkpoints/40")
    theirs, _ = jax_checkpoints.read_checkpoint(str(uninterrupted / "jax_checkpoints" / "40"))
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    exported = checkpoints.read_tf1_checkpoint(url + "/export/bert_model.ckpt")
    for name, value in _export(uninterrupted).items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)


def test_an_empty_input_stops_before_anything_is_written(runs):
    run = runs["empty_input"]
    assert run["code"] != 0
    errors = [l for l in run["stderr"].splitlines() if "error:" in l]
    assert len(errors) == 1 and "no records" in errors[0], run["stderr"][-2000:]
    assert not (runs["folder"] / "empty_out").exists()


def test_without_tensorflow_the_export_is_a_weights_file(jax_env, tmp_path):
    """TensorFlow imports blocked: training, eval, TensorBoard and the export still work; the
    export is model.weights.h5 (no temporary left), which load_checkpoint reads here."""
    import modeling

    out = tmp_path / "out"
    env = dict(jax_env, PYTHONPATH=os.pathsep.join(
        [os.path.join(paths.ROOT, "tests", "support", "no_tensorflow"), paths.ROOT]))
    args = [a for a in _command(out) if not a.startswith(("--init_checkpoint=",
                                                          "--num_train_steps="))]
    proc = subprocess.run(args + ["--num_train_steps=4", "--do_eval"], cwd=paths.ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out / "export")) == ["bert_config.json", "model.weights.h5"]
    assert (out / "eval_results.txt").exists()
    config = modeling.BertConfig.from_json_file(str(out / "export" / "bert_config.json"))
    model = modeling.BertPretrainingModel(config)
    report = modeling.load_checkpoint(model, str(out / "export" / "model.weights.h5"), log=False)
    assert len(report.loaded) == len(model.weights)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_numpy_input_resumes_at_its_position(deterministic):
    """Without TensorFlow a resumed run re-reads the numpy stream up to the checkpoint's
    records: the batches after ``skip_records`` are those an uninterrupted stream reads next
    (in file order, and shuffled across the second epoch's start)."""
    import itertools

    from data.pretraining.numpy_input import batches
    from data.pretraining import schema
    from tests.bert_cli.test_run_pretraining import TRAJ_RECORDS

    def take(skip, count):
        stream = batches([TRAJ_RECORDS] * 2, 8, schema.FEATURE_NAMES, deterministic, 3,
                         skip_records=skip)
        return list(itertools.islice(stream, count))

    whole = take(0, 100)  # 800 records: the 710 of the two files, then the next epoch's
    for skip_batches in (3, 87, 90):
        for ours, theirs in zip(take(8 * skip_batches, 100 - skip_batches),
                                whole[skip_batches:]):
            for name in schema.FEATURE_NAMES:
                np.testing.assert_array_equal(ours[name], theirs[name])


# --------------------------------------------------------------------- several processes
@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, jax_env):
    """Two processes of one CPU device each (gloo on 127.0.0.1) on the trajectory run: process
    1 killed with SIGKILL after the first checkpoint, process 0 left to find out (its exit
    code, seconds to exit, stderr); then both started again (jax_tools.kill_one_then_rerun).
    Their folder and logs."""
    tmp = tmp_path_factory.mktemp("jax_processes")
    out = tmp / "out"
    return dict(kill_one_then_rerun(lambda *flags: _command(out, *flags), str(out), jax_env,
                                    str(tmp), "10"), out=out)


def test_a_process_that_dies_stops_the_other_with_one_line(two_processes):
    """SIGKILL of process 1 mid-run: process 0 exits 1 within 2 minutes, with one error line."""
    code, seconds, stderr = two_processes["survivor"]
    assert code == 1, (code, stderr[-3000:])
    assert seconds < 120, seconds
    errors = [l for l in stderr.splitlines() if l.startswith("run_pretraining.py: error:")]
    assert len(errors) == 1, stderr[-3000:]


def test_two_processes_resume_to_the_bits_of_one_process_with_two_devices(two_processes,
                                                                          uninterrupted):
    """Both processes started again after the kill: they resume from process 0's newest
    checkpoint and end with the bits of one process on two devices (the uninterrupted run,
    whose global batches they share; it matches the original's trajectory): the step log,
    every value of the last checkpoint (optimizer and dropout seeds included) and the
    export. Only process 0 wrote the logs and the export; each process its input state."""
    out = two_processes["out"]
    assert two_processes["codes"] == [0, 0], two_processes["logs"][0][-3000:] + \
        two_processes["logs"][1][-3000:]
    assert "process 0 of 2, 2 devices in all" in two_processes["logs"][0]
    assert "Resuming from" in two_processes["logs"][1]
    assert "Saved checkpoint" not in two_processes["logs"][1]  # process 0 speaks
    # each process read its own rows (device_rows_dataset) and saved its own input state
    assert {n for n in os.listdir(out / "jax_input") if n.startswith("40.")} == {
        "40.process-%d-of-2-devices-2.%s" % (p, s) for p in (0, 1)
        for s in ("index", "data-00000-of-00001")}
    assert _steps(out) == _steps(uninterrupted)
    trajectory = np.load(os.path.join(TRAJ, "trajectory.npz"))  # the original's, as above
    np.testing.assert_allclose([r["loss"] for r in _steps(out)], trajectory["total_loss"],
                               rtol=1e-5)
    from modeling.training.backends.jax import checkpoints

    ours, _ = checkpoints.read_checkpoint(str(out / "jax_checkpoints" / "40"))
    theirs, _ = checkpoints.read_checkpoint(str(uninterrupted / "jax_checkpoints" / "40"))
    assert sorted(ours) == sorted(theirs) and len(ours) > 100
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    whole, resumed = _export(uninterrupted), _export(out)
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_bad_cluster_flags_are_one_line_and_write_nothing(runs):
    for name, words in (("process_id_out_of_range", "--process_id=2: out of range"),
                        ("processes_without_coordinator", "go together")):
        run = runs[name]
        errors = [l for l in run["stderr"].splitlines() if "error:" in l]
        assert run["code"] == 1 and len(errors) == 1 and words in errors[0], run["stderr"]
    assert not (runs["folder"] / "bad_id").exists()
    assert not (runs["folder"] / "bad_flags").exists()


def test_processes_that_do_not_make_the_cluster_stop_with_one_line(jax_env, tmp_path):
    """A coordinator nobody serves (process 1 alone), and two processes that disagree on
    --num_processes: each exits 1 with one line after --initialization_timeout; nothing
    written."""
    env = dict(one_device(jax_env), PYTHONPATH=os.pathsep.join(
        [os.path.join(paths.ROOT, "tests", "support", "no_tensorflow"), paths.ROOT]))
    out = tmp_path / "out"
    port = free_port()

    def command(*flags):
        return _command(out, *flags)

    alone = processes(command, free_port(), 2, env, tmp_path / "alone",
                      "--initialization_timeout=5", ids=[1])
    disagree = (processes(command, port, 3, env, tmp_path / "three",
                          "--initialization_timeout=5", ids=[0])
                + processes(command, port, 2, env, tmp_path / "two",
                            "--initialization_timeout=5", ids=[1]))
    for (proc, log), name in zip(alone + disagree, ("alone-1", "three-0", "two-1")):
        code = proc.wait(timeout=120)
        log.close()
        stderr = (tmp_path / ("%s.log" % name)).read_text()
        errors = [l for l in stderr.splitlines() if "error:" in l]
        assert code == 1 and len(errors) == 1, (name, stderr[-3000:])
        assert "--initialization_timeout=5" in errors[0], errors[0]
    assert not out.exists()
