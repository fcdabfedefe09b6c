"""bert_tasks/driver.py and task.py: a new task run by the one driver, the settings it shares
with the tools' flags.

The task is the one of docs/your-own-task.md, run from the page's code block as written: a
regression on a CSV file (made here from STS-B's first sentences and scores), fine-tuned from
the tiny golden checkpoint, from Python (``FinetuningSettings``) and as a command-line tool
(``bert_cli.finetuning.start``).
"""

import csv
import dataclasses
import math
import os
import re
import subprocess
import sys

import pytest
from absl import flags

from bert_cli import finetuning as cli_finetuning
from bert_common import checks
from bert_common.errors import FlagError
from bert_tasks import driver, task as task_lib
from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
PAGE = os.path.join(paths.ROOT, "docs", "your-own-task.md")
MARKER = "# your-own-task: csv regression"


def _example_source() -> str:
    with open(PAGE, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    found = [b for b in blocks if b.startswith(MARKER)]
    assert len(found) == 1, "docs/your-own-task.md: one python block starting with %r" % MARKER
    return found[0]


def _csv_data(folder, n_train=48, n_dev=16) -> str:
    """train.csv / dev.csv (text, score) from STS-B's first rows."""
    with open(os.path.join(paths.DATA, "glue", "STS-B", "train.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    os.makedirs(folder)
    for name, part in (("train.csv", rows[:n_train]),
                       ("dev.csv", rows[n_train:n_train + n_dev])):
        with open(os.path.join(folder, name), "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "score"])
            writer.writerows((row["sentence1"], row["score"]) for row in part)
    return folder


def _tiny_settings(output_dir, **overrides):
    values = dict(bert_config_file=os.path.join(TINY, "bert_config.json"),
                  vocab_file=paths.GOLDEN_VOCAB,
                  init_checkpoint=os.path.join(TINY, "bert_model.ckpt"),
                  output_dir=str(output_dir), do_train=True, do_eval=True,
                  max_seq_length=32, train_batch_size=8, eval_batch_size=8,
                  learning_rate=1e-3, num_train_epochs=2.0)
    values.update(overrides)
    return task_lib.FinetuningSettings(**values)


def test_the_example_task_is_short():
    lines = [line for line in _example_source().splitlines() if line.strip()]
    assert len(lines) < 80, len(lines)


def test_the_docs_csv_regression_task_runs_on_the_driver_and_resumes(tmp_path):
    namespace = {"__name__": "csv_regression"}
    exec(compile(_example_source(), PAGE, "exec"), namespace)  # noqa: S102
    data_dir = _csv_data(str(tmp_path / "data"))
    out = tmp_path / "out"
    task = namespace["CsvRegressionTask"](data_dir)

    driver.run(task, _tiny_settings(out))

    with open(out / "eval_results.txt", encoding="utf-8") as f:
        results = dict(line.strip().split(" = ") for line in f if line.strip())
    assert set(results) == {"eval_mse", "eval_pearson", "global_step"}
    assert int(results["global_step"]) == int(48 / 8 * 2.0)  # the original's step count
    assert math.isfinite(float(results["eval_mse"]))
    assert -1.0 <= float(results["eval_pearson"]) <= 1.0
    assert (out / "train.tf_record").exists() and (out / "eval.tf_record").exists()
    assert os.listdir(out / "train") and os.listdir(out / "eval")  # TensorBoard

    # More epochs into the same folder: resumes from step 12, trains to 18.
    driver.run(namespace["CsvRegressionTask"](data_dir),
               _tiny_settings(out, num_train_epochs=3.0))
    with open(out / "train_steps.jsonl", encoding="utf-8") as f:
        steps = [line for line in f if line.strip()]
    assert len(steps) == 18
    with open(out / "eval_results.txt", encoding="utf-8") as f:
        assert "global_step = 18" in f.read()


def test_the_example_as_a_tool_reports_bad_input_in_one_line(tmp_path):
    script = tmp_path / "csv_regression.py"
    script.write_text(_example_source(), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), "--data_dir=%s" % (tmp_path / "missing"),
         "--output_dir=%s" % out, "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
         "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--do_train"],
        capture_output=True, text=True, timeout=300, cwd=paths.ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH))
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors and errors[-1].startswith("csv_regression.py: error: ")
    assert "missing/train.csv" in errors[-1] and "Traceback" not in proc.stderr
    assert not out.exists()  # nothing written: the split is read before the folder is made


def test_a_run_with_nothing_to_do_names_the_tasks_actions(tmp_path):
    class OnlyTraining(task_lib.Task):
        actions = ("do_train",)

    with pytest.raises(FlagError, match=r"^At least one of `do_train` must be True\.$"):
        driver.run(OnlyTraining(), _tiny_settings(tmp_path, do_train=False, do_eval=False))
    with pytest.raises(FlagError, match=r"^At least one of `do_train`, `do_eval`, `do_predict` "
                                        r"or `export_dir` must be set\.$"):
        driver.run(task_lib.Task(), _tiny_settings(tmp_path, do_train=False, do_eval=False))
    assert not os.listdir(tmp_path)  # nothing written


def test_settings_values_are_checked_by_the_tools_rules(tmp_path):
    with pytest.raises(FlagError, match=r"^--train_batch_size=0 must be at least 1$"):
        checks.check_values(_tiny_settings(tmp_path, train_batch_size=0))
    with pytest.raises(FlagError, match=r"^--learning_rate=nan must be a positive number$"):
        driver.run(task_lib.Task(), _tiny_settings(tmp_path, learning_rate=float("nan")))
    assert not os.listdir(tmp_path)  # nothing written


def test_settings_and_the_tools_flags_have_the_same_names_and_defaults():
    """FinetuningSettings is the fine-tuning tools' flags: every field a flag with its default,
    every shared flag a field (the strategy/precision/checkpoint ones from bert_cli.flags)."""
    values = flags.FlagValues()
    cli_finetuning.define_flags(values)
    fields = {f.name: f.default for f in dataclasses.fields(task_lib.FinetuningSettings)}
    assert set(values) == set(fields)
    assert {name: values[name].default for name in values} == fields
