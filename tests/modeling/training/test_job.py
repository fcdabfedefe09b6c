"""modeling/training/job.py, the one training loop, on a backend-free ``Steps`` (plain Python
numbers): loop lengths, checkpoint cadence, the step log and TensorBoard from a resumed step,
progress lines, and ``close`` told whether the job completed. Each backend's own steps are
tested in tests/modeling/training/backends/."""

import json
import math

import pytest

from modeling.training import job
from tests.support.summaries import read_scalars


class _Steps:
    """A backend whose step ``n`` has loss ``1/n``; checkpoints are step numbers in a list."""

    timed = False  # fixed loop lengths: the test does not depend on the clock

    def __init__(self, saved=(), fail_at=None, is_chief=True):
        self.saved = list(saved)
        self.fail_at = fail_at
        self.is_chief = is_chief
        self.step = 0
        self.loops = []
        self.closed = None

    def restore(self):
        self.step = self.saved[-1] if self.saved else 0
        return self.step

    def run(self, num_steps):
        self.loops.append(num_steps)
        steps = range(self.step + 1, self.step + num_steps + 1)
        if self.fail_at in steps:
            raise RuntimeError("step %d failed" % self.fail_at)
        self.step += num_steps
        return job.LoopOutput([1.0 / s for s in steps], [0.1] * num_steps, [2.0] * num_steps,
                              {"loss": sum(1.0 / s for s in steps) / num_steps, "accuracy": 0.5})

    def global_batch(self):
        return 8

    def save(self):
        self.saved.append(self.step)
        return "ckpt-%d" % self.step

    def close(self, completed):
        self.closed = completed


def _config(tmp_path, **kwargs):
    return job.TrainerConfig(str(tmp_path), 10, steps_per_loop=4, save_checkpoints_steps=6,
                             **kwargs)


def _step_log(tmp_path):
    with open(tmp_path / "train_steps.jsonl") as f:
        return [json.loads(line) for line in f]


def test_loops_end_at_checkpoints_and_the_last_step(tmp_path, capsys):
    steps = _Steps()
    result = job.train(steps, _config(tmp_path))
    assert steps.loops == [4, 2, 4] and steps.saved == [6, 10] and steps.closed is True
    assert result.global_step == 10 and result.examples_per_sec > 0
    assert result.step_losses == [1.0 / s for s in range(1, 11)]
    err = capsys.readouterr().err
    assert "train step 4/10 loss 0.5208 accuracy 0.5000 lr 0.1" in err
    assert "Saved checkpoint for step 6: ckpt-6" in err and "train step 10/10" in err
    assert [r["step"] for r in _step_log(tmp_path)] == list(range(1, 11))
    scalars = read_scalars(str(tmp_path / "train"))
    assert [s for s, _ in scalars["loss"]] == [4, 6, 10]
    assert scalars["accuracy"][0] == (4, 0.5) and scalars["global_norm"][0] == (4, 2.0)
    assert {"learning_rate", "examples_per_sec"} <= set(scalars)


def test_a_resumed_job_cuts_the_step_log_back_and_continues(tmp_path):
    job.train(_Steps(), _config(tmp_path))
    steps = _Steps(saved=[6])  # killed after the checkpoint of step 6
    result = job.train(steps, _config(tmp_path))
    assert steps.loops == [4] and result.global_step == 10
    assert result.step_losses == [1.0 / s for s in range(7, 11)]
    assert [r["step"] for r in _step_log(tmp_path)] == list(range(1, 11))


def test_nothing_to_train_writes_nothing(tmp_path):
    steps = _Steps(saved=[10])
    result = job.train(steps, _config(tmp_path))
    assert result.global_step == 10 and steps.loops == [] and steps.closed is True
    assert not (tmp_path / "train").exists() and not (tmp_path / "train_steps.jsonl").exists()


def test_a_failed_step_closes_the_steps_as_not_completed(tmp_path):
    steps = _Steps(fail_at=8)
    with pytest.raises(RuntimeError, match="step 8 failed"):
        job.train(steps, _config(tmp_path))
    assert steps.closed is False and steps.saved == [6]


def test_only_the_chief_writes(tmp_path, capsys):
    steps = _Steps(is_chief=False)
    job.train(steps, _config(tmp_path))
    assert steps.saved == [6, 10]  # every process takes part in checkpoints
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "train").exists() and not (tmp_path / "train_steps.jsonl").exists()


def test_loop_lengths_follow_the_clock_when_timed(tmp_path):
    config = _config(tmp_path, progress_every_s=30.0)
    assert job.loop_steps(0, config, 0.0) == 1  # the first loop traces and compiles the step
    assert job.loop_steps(1, config, 10.0) == 3  # cut to a progress line every 30 s
    assert job.loop_steps(1, config, None) == 4  # untimed: steps_per_loop


def test_streaming_means_sum_pairs_and_stop_at_num_steps(caplog):
    batches = iter([{"acc": (3.0, 4.0), "loss": (1.0, 1.0)},
                    {"acc": (1.0, 4.0), "loss": (3.0, 1.0)},
                    {"acc": (0.0, 4.0), "loss": (9.0, 1.0)}])
    assert job.streaming_means(batches, 2, progress=False) == {"acc": 0.5, "loss": 2.0}
    assert next(batches)["loss"] == (9.0, 1.0)  # the third batch was never read
    assert math.isnan(job.streaming_means(iter([{"x": (1.0, 0.0)}]), 3, progress=False)["x"])
    assert "Eval data ran out after 1 of 3 steps" in caplog.text
    assert job.streaming_means(iter([]), 3, progress=False) == {}


def test_collect_predictions_concatenates_parts_in_order_padding_tokens():
    import numpy as np

    batches = [{"logits": [np.ones((2, 3)), np.zeros((1, 3))], "ids": [np.array([0, 1]),
                                                                         np.array([2])]},
               {"logits": [np.full((1, 5), 2.0)], "ids": [np.array([3])]}]
    out = job.collect_predictions(iter(batches), "ids", total=4)
    assert out["ids"].tolist() == [0, 1, 2, 3]
    assert out["logits"].shape == (4, 5) and out["logits"][0].tolist() == [1, 1, 1, 0, 0]
    assert out["logits"][3].tolist() == [2.0] * 5


def test_save_checkpoints_steps_0_saves_at_the_end_only(tmp_path):
    steps = _Steps()
    config = job.TrainerConfig(str(tmp_path), 10, steps_per_loop=4, save_checkpoints_steps=0)
    assert job.train(steps, config).global_step == 10
    assert steps.loops == [4, 4, 2] and steps.saved == [10]
