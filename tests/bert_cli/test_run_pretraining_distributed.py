"""run_pretraining.py across processes: MirroredStrategy over 2 logical CPUs and
MultiWorkerMirroredStrategy with 2 workers on 127.0.0.1 match one replica; kill -9 and resume.

Same global batch (8 records, file order) as the original's one-replica trajectory
(README section 7): 2 replicas x 4 records. Tolerance: 5x the original's own float noise floor.
The sums differ from one replica only in float32 association order (each replica sums its 4
examples, then the two partial gradients are added), which Adam turns into parameter changes of
the same order as the thread-order noise of the original itself (float_noise_floor.json).
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.training import step_log
from tests import paths
from tests.support.tools import KilledAfterFirstCheckpoint
from tests.bert_cli.test_run_pretraining import NOISE_MARGIN, TRAJ, trajectory_args

SCRIPT = os.path.join(paths.ROOT, "run_pretraining.py")


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _popen(args, env, log_path):
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, SCRIPT] + args, cwd=paths.ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT), log


def _wait_all(procs, timeout=420):
    """Exit codes by name. When a worker fails its peers would wait for it until the
    collectives time out: they are killed at once and read "killed after a peer failed"."""
    deadline = time.monotonic() + timeout
    codes = {}
    while len(codes) < len(procs) and time.monotonic() < deadline:
        for name, (proc, _) in procs.items():
            if name not in codes and proc.poll() is not None:
                codes[name] = proc.returncode
        if any(code != 0 for name, code in codes.items() if name.startswith("worker")):
            break
        time.sleep(0.5)
    for name, (proc, log) in procs.items():
        if name not in codes:
            if name.startswith("worker") and time.monotonic() < deadline:
                proc.kill()
                codes[name] = "killed after a peer failed"
            else:
                try:
                    codes[name] = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    codes[name] = "timeout"
        proc.wait()
        log.close()
    return codes


@pytest.fixture(scope="module")
def distributed_runs(tmp_path_factory):
    """The mirrored run and the two multi-worker processes, started together."""
    root = tmp_path_factory.mktemp("distributed")
    common = ["--do_train", "--deterministic", "--iterations_per_loop=20",
              "--save_checkpoints_steps=20"]
    procs = {}
    mirrored = root / "mirrored"
    procs["mirrored"] = _popen(trajectory_args(mirrored, *common, "--strategy=mirrored",
                                               "--num_cpu_devices=2"), _env(),
                               root / "mirrored.log")
    worker_dir = root / "multi_worker"
    ports = _free_ports(2)
    cluster = {"worker": ["127.0.0.1:%d" % p for p in ports]}
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs["worker%d" % index] = _popen(
            trajectory_args(worker_dir, *common, "--strategy=multi_worker"),
            _env(TF_CONFIG=tf_config), root / ("worker%d.log" % index))
    codes = _wait_all(procs)
    logs = {name: (root / ("%s.log" % name)).read_text() for name in procs}
    return {"mirrored": mirrored, "multi_worker": worker_dir, "codes": codes, "logs": logs}


def _check_against_one_replica(output_dir):
    with open(os.path.join(TRAJ, "float_noise_floor.json")) as f:
        floor = json.load(f)["float_noise_floor_same_lr"]
    traj = np.load(os.path.join(TRAJ, "trajectory.npz"))
    log = step_log.read_step_log(str(output_dir))
    assert len(log) == 40
    loss_diff = np.abs(np.float32([r["loss"] for r in log]) - traj["total_loss"]).max()
    assert loss_diff <= NOISE_MARGIN * floor["trajectory_max_abs_diff"]["total_loss"], loss_diff
    norm_diff = np.abs(np.float32([r["global_norm"] for r in log]) - traj["global_norm"]).max()
    assert norm_diff <= NOISE_MARGIN * floor["trajectory_max_abs_diff"]["global_norm"], norm_diff
    final = checkpoints.read_tf1_checkpoint(os.path.join(TRAJ, "after_step_40",
                                                         "bert_model.ckpt"))
    ours = checkpoints.read_tf1_checkpoint(str(output_dir / "export" / "bert_model.ckpt"))
    worst = max(np.abs(ours[name] - value).max() for name, value in final.items())
    assert worst <= NOISE_MARGIN * floor["final_params_max_abs_diff"], worst


def test_mirrored_two_cpus_matches_one_replica(distributed_runs):
    assert distributed_runs["codes"]["mirrored"] == 0, distributed_runs["logs"]["mirrored"][-3000:]
    assert "2 replicas" in distributed_runs["logs"]["mirrored"]
    _check_against_one_replica(distributed_runs["mirrored"])


def test_multi_worker_two_processes_matches_one_replica(distributed_runs):
    for index in range(2):
        name = "worker%d" % index
        assert distributed_runs["codes"][name] == 0, distributed_runs["logs"][name][-3000:]
    assert "num_workers = 2" in distributed_runs["logs"]["worker0"]
    _check_against_one_replica(distributed_runs["multi_worker"])
    # Only the chief wrote into --output_dir; the other worker's temporary folder is gone.
    names = os.listdir(distributed_runs["multi_worker"])
    assert not [n for n in names if n.startswith(".worker_")], names


def test_multi_worker_kill_9_then_resume_is_exact_with_each_workers_iterator(
        distributed_runs, tmp_path):
    """Two workers: each saves its own iterator state beside the chief's checkpoint; both are
    killed after the first checkpoint and restarted; the run ends with the bits of the
    uninterrupted multi-worker run (the fixture's)."""
    for index in range(2):
        assert distributed_runs["codes"]["worker%d" % index] == 0
    out = tmp_path / "killed"
    args = trajectory_args(out, "--do_train", "--deterministic", "--iterations_per_loop=5",
                           "--save_checkpoints_steps=5", "--strategy=multi_worker")

    def start(tag):
        cluster = {"worker": ["127.0.0.1:%d" % p for p in _free_ports(2)]}
        procs = []
        for index in range(2):
            tf_config = json.dumps({"cluster": cluster,
                                    "task": {"type": "worker", "index": index}})
            procs.append(_popen(args, _env(TF_CONFIG=tf_config),
                                tmp_path / ("%s%d.log" % (tag, index))))
        return procs

    procs = start("first")
    deadline = time.monotonic() + 400
    states = [str(out / "input_state" / ("worker-%d-of-2" % i) / "input-*.index")
              for i in range(2)]
    # Killed once a checkpoint and both workers' input states for it are written.
    while (not (tf.io.gfile.glob(str(out / "ckpt-*.index"))
                and all(tf.io.gfile.glob(p) for p in states))
           and time.monotonic() < deadline):
        assert all(p.poll() is None for p, _ in procs), "a worker ended before a checkpoint"
        time.sleep(0.05)
    for proc, log in procs:
        proc.kill()
        proc.wait()
        log.close()
    latest = tf.train.latest_checkpoint(str(out))
    step = int(latest.rsplit("-", 1)[-1])
    assert 5 <= step < 40
    codes = _wait_all({"worker%d" % i: p for i, p in enumerate(start("again"))})
    for index in range(2):
        assert codes["worker%d" % index] == 0, (
            (tmp_path / ("again%d.log" % index)).read_text()[-3000:])
    for index in range(2):  # each restored its own position, without skipping batches
        log = (tmp_path / ("again%d.log" % index)).read_text()
        assert "Restored this worker's input position from" in log, log[-3000:]
        assert "skipping the" not in log
    for index in range(2):  # each worker's own iterator state, at every checkpoint kept
        assert tf.io.gfile.glob(str(out / "input_state" / ("worker-%d-of-2" % index)
                                    / "input-40.index"))
    resumed = checkpoints.read_tf1_checkpoint(str(out / "export" / "bert_model.ckpt"))
    reference = checkpoints.read_tf1_checkpoint(
        str(distributed_runs["multi_worker"] / "export" / "bert_model.ckpt"))
    for name, value in reference.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert ([r["loss"] for r in step_log.read_step_log(str(out))]
            == [r["loss"] for r in step_log.read_step_log(
                str(distributed_runs["multi_worker"]))])


def test_mirrored_dropout_per_replica_kill_9_then_resume_is_exact(tmp_path):
    """Two replicas on one host, dropout on, each replica drawing its own masks
    (modeling/layers/dropout.py), shuffled input: a run killed after its first checkpoint and
    restarted ends with the bits of an uninterrupted one. The checkpoint holds the host
    iterator's state, so the resume reads no consumed record again whatever the steps done (a
    batch read twice or skipped would change the losses that follow)."""
    with open(os.path.join(TRAJ, "init", "bert_config.json")) as f:
        config = json.load(f)
    config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    config_path = tmp_path / "bert_config.json"
    config_path.write_text(json.dumps(config))

    def args(out):
        return trajectory_args(out, "--do_train", "--iterations_per_loop=5",
                               "--save_checkpoints_steps=5", "--strategy=mirrored",
                               "--num_cpu_devices=2", "--num_train_steps=10",
                               "--bert_config_file=%s" % config_path)

    whole = subprocess.Popen([sys.executable, SCRIPT] + args(tmp_path / "whole"),
                             cwd=paths.ROOT, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    victim = KilledAfterFirstCheckpoint([sys.executable, SCRIPT] + args(tmp_path / "killed"),
                                        cwd=paths.ROOT, env=_env())
    victim.wait(timeout=540)
    _, err = whole.communicate(timeout=540)
    assert whole.returncode == 0, err[-3000:]
    latest = tf.train.latest_checkpoint(str(tmp_path / "killed"))
    assert 5 <= int(latest.rsplit("-", 1)[-1]) < 10  # it did not finish
    names = tf.train.load_checkpoint(latest).get_variable_to_shape_map()
    assert any(name.startswith("iterator/") for name in names), sorted(names)[:10]
    proc = subprocess.run([sys.executable, SCRIPT] + args(tmp_path / "killed"), cwd=paths.ROOT,
                          env=_env(), capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = checkpoints.read_tf1_checkpoint(str(tmp_path / "killed" / "export" /
                                                  "bert_model.ckpt"))
    reference = checkpoints.read_tf1_checkpoint(str(tmp_path / "whole" / "export" /
                                                    "bert_model.ckpt"))
    for name, value in reference.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    losses = [r["loss"] for r in step_log.read_step_log(str(tmp_path / "whole"))]
    assert [r["loss"] for r in step_log.read_step_log(str(tmp_path / "killed"))] == losses
    assert len(losses) == 10
