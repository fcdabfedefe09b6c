"""The whole pipeline on gs:// paths only, through TensorFlow's own GCS client and a loopback
GCS emulator (tests/support/gcs_loopback.py): create_pretraining_data -> run_pretraining (train,
kill -9 after a checkpoint, resume, eval) -> run_classifier (train, eval, predict, export) ->
run_squad (predict) -> extract_features -> convert_checkpoint. The tools run in processes
started with the harness's environment (so that the GCS cache settings apply, which TensorFlow
reads at import): the run killed with SIGKILL is its own process; every other run, the resume
included, is one tool's ``main`` on fresh flags in one other process
(tests/support/speed_tool_server.py: one ``import tensorflow`` instead of six), which sees what the
killed process left in the bucket as a fresh process would. Every output must be in the bucket
(read from the emulator itself) and nothing may land in a local folder named ``gs:``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests import paths
from tests.bert_cli import test_cloud_paths as pipeline
from tests.support.speed_tool_server import ToolServer

# A checkpoint every 2 steps, ~0.6 s apart on the loopback: the kill at ckpt-2 (a 50 ms poll)
# leaves 7 more to write before the last one (~4 s of margin), and the resume runs 14 steps.
# Each step costs a checkpoint upload: more steps only make the test slower.
PRETRAIN_STEPS = 16


def _command(module, argv):
    return [sys.executable, os.path.join(paths.ROOT, module.TOOL)] + list(argv)


def _env():
    # os.environ holds the harness's variables (the gcs fixture sets them).
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)


def test_the_whole_pipeline_on_gs_paths(gcs, tmp_path):
    server = ToolServer(env=_env(), cwd=str(tmp_path))  # imports TensorFlow meanwhile
    try:
        _pipeline(gcs, tmp_path, server)
    finally:
        server.close()


def _pipeline(gcs, tmp_path, server):
    prefix = gcs.unique_prefix("pipeline")
    root = gcs.url(prefix)
    inputs = pipeline.stage_inputs(root)

    def run(module, argv):
        result = server.run(module.__name__, argv)
        return result.code, result.stderr

    def pretrain_with_a_kill(argv):
        # Started, killed with SIGKILL once its first checkpoint is in the bucket, rerun.
        proc = subprocess.Popen(_command(pipeline.run_pretraining, argv), env=_env(),
                                cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        marker = "%s/pretrain/ckpt-2.index" % prefix
        deadline = time.monotonic() + 300
        while marker not in gcs.list_objects(prefix) and time.monotonic() < deadline:
            assert proc.poll() is None, "run_pretraining ended before its first checkpoint"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        final = "%s/pretrain/ckpt-%d.index" % (prefix, PRETRAIN_STEPS)
        assert final not in gcs.list_objects(prefix), "killed too late to test a resume"
        code, err = run(pipeline.run_pretraining, argv)
        assert code == 0, err[-3000:]
        # The step log holds every step once, those before the kill and after the resume.
        steps = [json.loads(line)["step"] for line in gcs.read_object(
            "%s/pretrain/train_steps.jsonl" % prefix).decode().splitlines() if line.strip()]
        assert steps == list(range(1, PRETRAIN_STEPS + 1))

    pipeline.run_pipeline(root, inputs, run=run, pretrain=pretrain_with_a_kill,
                          pretrain_steps=PRETRAIN_STEPS)
    names = gcs.list_objects(prefix)
    # Read from the emulator, not through TensorFlow: the SavedModel and the records are there.
    assert "%s/models/mrpc/1/saved_model.pb" % prefix in names
    assert gcs.read_object("%s/pretrain/export/bert_config.json" % prefix) == open(
        os.path.join(pipeline.TINY, "bert_config.json"), "rb").read()
    assert os.listdir(tmp_path) == []  # nothing under ./gs:
