"""What ``--do_predict`` writes: the original's ``test_results.tsv`` and a GLUE submission file.

* ``write_probabilities(path, probabilities)``: ``test_results.tsv`` as the original: one line
  per example, its class probabilities tab-separated (float32 text); run_swag writes the same.
* ``write_test_results(output_dir, processor, examples, result, label_list, regression, task)``:
  ``test_results.tsv`` (the prediction itself for STS-B) and ``<TASK>.tsv`` for the GLUE server
  (``index<TAB>prediction``: the label, or the STS-B score clipped to [0, 5] with 3 decimals).
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List

import numpy as np

from bert_common import files
from bert_common.atomic import atomic_open, atomic_paths


def _probability_lines(probabilities) -> Iterator[str]:
    for row in probabilities:
        yield "\t".join(str(np.float32(p)) for p in row) + "\n"


def write_probabilities(path: str, probabilities) -> None:
    """One line of tab-separated float32 probabilities per row of ``probabilities`` [N, K].

    Args:
        path: the output file.
        probabilities: float [N, K].
    """
    with atomic_open(path) as writer:
        writer.writelines(_probability_lines(probabilities))


def write_test_results(output_dir: str, processor, examples: List, result: Dict[str, np.ndarray],
                       label_list: List[str], regression: bool, task: str) -> List[str]:
    """``test_results.tsv`` and the submission TSV of ``examples`` (``result``: the model's
    ``probabilities`` [N, K] or ``predictions`` [N], in example order); returns their paths.

    The two appear together (``atomic_paths``): a failure leaves both previous files.

    Args:
        output_dir: the folder of both files.
        processor: the task's ``DataProcessor`` (names the submission file and its format).
        examples: the test examples, in order.
        result: the model's outputs, ``probabilities`` [N, K] or ``predictions`` [N].
        label_list: the task's labels (empty for regression).
        regression: whether the task is a regression (STS-B).
        task: the task name.

    Returns:
        The paths written.
    """
    results_path = os.path.join(output_dir, "test_results.tsv")
    name = processor.submission_name or ("XNLI" if task == "xnli" else "predictions")
    submission_path = os.path.join(output_dir, name + ".tsv")
    with atomic_paths([results_path, submission_path]) as (results_tmp, submission_tmp):
        with files.open(results_tmp, "w") as writer:
            if regression:
                writer.writelines("%s\n" % np.float32(v) for v in result["predictions"])
            else:
                writer.writelines(_probability_lines(result["probabilities"]))
        with files.open(submission_tmp, "w") as writer:
            writer.write("index\tprediction\n")
            for i, example in enumerate(examples):
                index = example.index if example.index is not None else str(i)
                if regression:
                    value = float(np.clip(result["predictions"][i], 0.0, 5.0))
                    writer.write("%s\t%.3f\n" % (index, value))
                else:
                    label = label_list[int(np.argmax(result["probabilities"][i]))]
                    writer.write("%s\t%s\n" % (index, label))
    return [results_path, submission_path]
