"""bert_common/results.py: eval_results.txt as the original writes it, and the one TensorBoard
scalar writer of every tool and backend (read back with tensorboard's own reader)."""

import numpy as np
import pytest

from bert_common import results
from tests.support.summaries import read_scalars


def test_eval_results_are_the_originals_lines(tmp_path):
    path = tmp_path / "eval_results.txt"
    text = results.write_eval_results(str(path), {"loss": 0.6931471805599453,
                                                  "global_step": np.int64(40), "acc": 0.5})
    assert text == "acc = 0.5\nglobal_step = 40\nloss = 0.6931472\n"
    assert results.read_eval_results(str(path)) == {"acc": "0.5", "global_step": "40",
                                                    "loss": "0.6931472"}


def test_scalar_writer_writes_each_tag_at_its_step(tmp_path):
    writer = results.ScalarWriter(str(tmp_path / "train"))
    writer.write(1, {"loss": 2.5, "learning_rate": 1e-4})
    writer.write(2, {"loss": 2.25, "learning_rate": 2e-4})
    writer.flush()
    writer.write(3, {"loss": 2.0})
    writer.close()
    scalars = read_scalars(str(tmp_path / "train"))
    assert scalars["loss"] == [(1, 2.5), (2, 2.25), (3, 2.0)]
    assert [step for step, _ in scalars["learning_rate"]] == [1, 2]
    assert scalars["learning_rate"][1][1] == pytest.approx(2e-4)


def test_eval_summaries_leave_out_the_step_and_what_is_not_a_number(tmp_path):
    results.write_eval_summaries(str(tmp_path), {"eval_accuracy": 0.75, "global_step": 12,
                                                 "exact": True, "name": "mrpc"}, 12)
    assert read_scalars(str(tmp_path / "eval")) == {"eval_accuracy": [(12, 0.75)]}
