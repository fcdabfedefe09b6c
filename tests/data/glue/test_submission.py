"""GLUE --do_predict outputs: test_results.tsv and the submission file."""

import os

import numpy as np

from data.glue import submission


def test_regression_result_files(tmp_path):
    from data.glue import processors as classifier

    processor = classifier.get_processor("sts-b")
    examples = [classifier.InputExample("test-1", "a", "b", 0.0, index="7"),
                classifier.InputExample("test-2", "c", "d", 0.0, index="8")]
    paths_written = submission.write_test_results(
        str(tmp_path), processor, examples, {"predictions": np.array([6.2, 1.23456], np.float32)},
        [], True, "sts-b")
    assert [os.path.basename(p) for p in paths_written] == ["test_results.tsv", "STS-B.tsv"]
    assert (tmp_path / "test_results.tsv").read_text().split() == ["6.2", "1.23456"]
    # GLUE submission: the file's id column, scores clipped to the 0..5 scale
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n7\t5.000\n8\t1.235\n"


def test_probabilities_file(tmp_path):
    path = str(tmp_path / "test_results.tsv")
    submission.write_probabilities(path, np.array([[0.25, 0.75], [1.0, 0.0]], np.float32))
    assert open(path).read() == "0.25\t0.75\n1.0\t0.0\n"
    assert os.listdir(tmp_path) == ["test_results.tsv"]  # no temp file left
