"""extract_features.py failures: one line naming the flag / file, exit status 1, no traceback,
nothing written, and (for the input / output / vocab checks) no model built: the checks come
before any work. Tiny golden checkpoint."""

import json
import os

import pytest

from bert_cli import extract_features
from tests import paths
from tests.support.tools import assert_one_error_line, run_tool, snapshot

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
TOOL = extract_features.TOOL


def _argv(input_file, output_file, vocab_file=paths.GOLDEN_VOCAB):
    return ["--input_file=%s" % input_file, "--output_file=%s" % output_file,
            "--bert_config_file=%s" % os.path.join(TINY, "bert_config.json"),
            "--init_checkpoint=%s" % os.path.join(TINY, "bert_model.ckpt"),
            "--vocab_file=%s" % vocab_file, "--max_seq_length=16", "--layers=-1"]


@pytest.fixture
def no_model(monkeypatch):
    """Building the encoder fails the test: the check must come before any work."""
    import modeling.encoder

    def refuse(*args, **kwargs):
        raise AssertionError("the model was built before the failing check")

    monkeypatch.setattr(modeling.encoder, "BertModel", refuse)


@pytest.mark.parametrize("content,reason", [("", "an empty file"),
                                            ("\n  \n\t\n", "blank lines only")],
                         ids=["empty", "blank_lines"])
def test_input_without_text_is_one_line(tmp_path, no_model, content, reason):
    input_file = tmp_path / "input.txt"
    input_file.write_text(content, encoding="utf-8")
    before = sorted(snapshot(tmp_path, folders=True))
    run = run_tool(extract_features, _argv(input_file, tmp_path / "out.jsonl"))
    assert_one_error_line(run, TOOL, "--input_file=%s" % input_file, reason)
    assert sorted(snapshot(tmp_path, folders=True)) == before


@pytest.mark.parametrize("case", ["directory", "missing_folder"])
def test_unusable_output_file_fails_before_any_work(tmp_path, no_model, case):
    input_file = tmp_path / "input.txt"
    input_file.write_text("hello world\n", encoding="utf-8")
    if case == "directory":
        output = tmp_path / "features"
        output.mkdir()
        expected = "is a directory"
    else:
        output = tmp_path / "missing" / "features.jsonl"
        expected = "does not exist"
    before = sorted(snapshot(tmp_path, folders=True))
    run = run_tool(extract_features, _argv(input_file, output))
    assert_one_error_line(run, TOOL, "--output_file=%s" % output, expected)
    assert ".tmp" not in run.stderr  # names the flag, not an internal temporary
    assert sorted(snapshot(tmp_path, folders=True)) == before


@pytest.mark.parametrize("token", ["[CLS]", "[SEP]"])
def test_vocab_without_cls_or_sep_is_one_line(tmp_path, no_model, token):
    input_file = tmp_path / "input.txt"
    input_file.write_text("hello world\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    with open(paths.GOLDEN_VOCAB, encoding="utf-8") as f:
        vocab.write_text("".join(line for line in f if line.strip() != token), encoding="utf-8")
    before = sorted(snapshot(tmp_path, folders=True))
    run = run_tool(extract_features, _argv(input_file, tmp_path / "out.jsonl", vocab))
    assert_one_error_line(run, TOOL, str(vocab), token)
    assert sorted(snapshot(tmp_path, folders=True)) == before


def test_blank_lines_among_text_are_kept(tmp_path):
    """As the original: a blank line between lines of text is an example ([CLS] [SEP]), so
    linex_index stays the line number."""
    input_file = tmp_path / "input.txt"
    input_file.write_text("hello world\n\nfoo ||| bar\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    run = run_tool(extract_features, _argv(input_file, output))
    assert run.code == 0, run.stderr[-3000:]
    with open(output, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [r["linex_index"] for r in records] == [0, 1, 2]
    assert [f["token"] for f in records[1]["features"]] == ["[CLS]", "[SEP]"]
