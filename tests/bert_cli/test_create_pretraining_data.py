"""create_pretraining_data.py end to end: the original's records for both golden flag sets
(parsed with TensorFlow, every feature of every record, in order), round-robin outputs,
--num_workers, a small vocab without [unusedN], no TensorFlow import, and bad input: one line
on stderr, exit code 1, nothing written."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

from bert_cli import create_pretraining_data as cli
from data.pretraining import schema as pretraining_schema
from data.tokenization import vocab_builder
from data.records import numpy_reader
from tests import paths

ROOT = paths.ROOT
SAMPLE = os.path.join(paths.GOLDEN, "inputs", "sample_text.txt")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)


def _run(args, capsys):
    """The CLI in this process with fresh flags: (exit code, stderr)."""
    fv = flags.FlagValues()
    cli.define_flags(fv)
    fv(["create_pretraining_data.py"] + args)
    cli.FLAGS, saved = fv, cli.FLAGS
    try:
        cli.main(["create_pretraining_data.py"])
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        cli.FLAGS = saved
    return code, capsys.readouterr().err


def _parse(path, seq, preds):
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(path).batch(1 << 16)
    spec = pretraining_schema.feature_spec(seq, preds)
    out = []
    for serialized in ds:
        parsed = tf.io.parse_example(serialized, spec)
        for r in range(len(serialized)):
            out.append({k: v[r].numpy().tolist() for k, v in parsed.items()})
    return out


def _golden_flags(out, wwm):
    return ["--input_file=%s" % SAMPLE, "--output_file=%s" % out,
            "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--do_lower_case=True",
            "--do_whole_word_mask=%s" % wwm, "--max_seq_length=128",
            "--max_predictions_per_seq=20", "--masked_lm_prob=0.15", "--random_seed=12345",
            "--dupe_factor=5", "--short_seq_prob=0.1"]


@pytest.mark.parametrize("wwm", ["False", "True"])
def test_records_equal_the_originals(wwm, tmp_path, capsys):
    out = str(tmp_path / "out.tfrecord")
    code, err = _run(_golden_flags(out, wwm), capsys)
    assert code == 0, err
    # progress on stderr: the final lines of reading and of creating instances (all 5 passes)
    assert re.search(r"^reading: [0-9.]+/[0-9.]+ MB, .*, ETA 0m00s, \d+ documents, \d+ lines$",
                     err, re.M), err
    assert re.search(r"^creating instances: (\d+)/\1 documents, .*, ETA 0m00s, pass 5/5 "
                     r"document (\d+)/\2, \d+ instances \(\d+/s\)$", err, re.M), err
    name = "seq128_seed12345_dupe5_wwm%s.jsonl" % wwm.lower()
    with open(os.path.join(paths.GOLDEN, "pretraining_data", name)) as f:
        want = [json.loads(line) for line in f]
    got = _parse(out, 128, 20)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        for feature in pretraining_schema.FEATURE_NAMES:
            assert g[feature] == w[feature], "record %d, %s" % (index, feature)
    assert os.listdir(tmp_path) == ["out.tfrecord"]


def test_several_outputs_get_records_round_robin(tmp_path, capsys):
    one = str(tmp_path / "one.tfrecord")
    assert _run(_golden_flags(one, "False") + ["--show_progress=false"], capsys)[0] == 0
    outs = [str(tmp_path / ("part%d.tfrecord" % i)) for i in range(3)]
    code, err = _run(_golden_flags(",".join(outs), "False") + ["--show_progress=false"], capsys)
    assert code == 0 and err == ""
    single = list(numpy_reader.read_records(one))
    parts = [list(numpy_reader.read_records(p)) for p in outs]
    decode = numpy_reader.decode_example
    for i, part in enumerate(parts):
        assert [decode(x) for x in part] == [decode(x) for x in single[i::3]]


def test_num_workers_split_the_corpus_reproducibly(tmp_path, capsys):
    corpus = os.path.join(paths.GOLDEN, "inputs", "pretrain_trajectory_corpus.txt")
    base = ["--input_file=%s" % corpus, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1",
            "--num_workers=2", "--show_progress=false"]
    out = str(tmp_path / "w.tfrecord")
    assert _run(base + ["--output_file=%s" % out], capsys)[0] == 0
    names = sorted(os.listdir(tmp_path))
    assert names == ["w-00000-of-00002.tfrecord", "w-00001-of-00002.tfrecord"]
    first = [list(numpy_reader.read_records(str(tmp_path / n))) for n in names]
    assert all(len(x) > 50 for x in first)
    again = str(tmp_path / "again")
    os.mkdir(again)
    outs = ",".join(os.path.join(again, n) for n in ("a.tfrecord", "b.tfrecord"))
    assert _run(base + ["--output_file=%s" % outs], capsys)[0] == 0
    second = [list(numpy_reader.read_records(os.path.join(again, n)))
              for n in ("a.tfrecord", "b.tfrecord")]
    assert first == second
    single = str(tmp_path / "single.tfrecord")
    assert _run([a for a in base if a != "--num_workers=2"] + ["--output_file=%s" % single],
                capsys)[0] == 0
    assert sum(len(x) for x in first) != len(list(numpy_reader.read_records(single))) or \
        first[0] != list(numpy_reader.read_records(single))[:len(first[0])]
    code, err = _run(base + ["--output_file=%s,%s,%s" % (out, out + "2", out + "3")], capsys)
    assert code == 1 and "--num_workers=2 needs 1 or 2" in err


def test_small_vocab_without_unused_tokens(tmp_path, capsys):
    with open(SAMPLE, encoding="utf-8") as f:
        lines = f.read().split("\n")
    vocab = str(tmp_path / "vocab.txt")
    vocab_builder.write_vocab(vocab_builder.learn_vocab(lines, 400, num_unused=0), vocab)
    out = str(tmp_path / "small.tfrecord")
    code, err = _run(["--input_file=%s" % SAMPLE, "--output_file=%s" % out, "--vocab_file=%s"
                      % vocab, "--max_seq_length=64", "--max_predictions_per_seq=8",
                      "--dupe_factor=2", "--show_progress=false"], capsys)
    assert code == 0, err
    with open(vocab, encoding="utf-8") as f:
        size = len(f.read().split("\n")) - 1
    records = [numpy_reader.decode_example(x)
               for x in list(numpy_reader.read_records(out))]
    assert len(records) > 10
    ids = np.array([r["input_ids"] for r in records])
    assert ids.max() < size and (ids[:, 0] == 2).all()  # [CLS] is line 2 of this vocab
    assert sum(sum(r["masked_lm_weights"]) for r in records) > len(records)


def _bad_corpus(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", ["missing_input", "empty_corpus", "invalid_utf8",
                                  "short_max_seq_length", "vocab_without_mask",
                                  "missing_output_folder", "missing_flag"])
def test_bad_input_is_one_line_and_exit_1_with_nothing_written(case, tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = str(out_dir / "x.tfrecord")
    args = {"input_file": SAMPLE, "output_file": out, "vocab_file": paths.GOLDEN_VOCAB}
    extra = []
    expect = None
    if case == "missing_input":
        args["input_file"] = str(tmp_path / "nope.txt")
        expect = "nope.txt: no such file"
    elif case == "empty_corpus":
        args["input_file"] = _bad_corpus(tmp_path, "empty.txt", b"\n \n\x00\n")
        expect = "no text"
    elif case == "invalid_utf8":
        args["input_file"] = _bad_corpus(tmp_path, "bad.txt", b"ok line\nbad \xc3\x28 line\n")
        expect = "bad.txt, line 2: invalid UTF-8"
    elif case == "short_max_seq_length":
        extra = ["--max_seq_length=4"]
        expect = "--max_seq_length=4 is too small"
    elif case == "vocab_without_mask":
        with open(paths.GOLDEN_VOCAB, encoding="utf-8") as f:
            tokens = [t for t in f.read().split("\n") if t != "[MASK]"]
        args["vocab_file"] = _bad_corpus(tmp_path, "vocab.txt", "\n".join(tokens).encode())
        expect = "has no [MASK] token"
    elif case == "missing_output_folder":
        args["output_file"] = str(tmp_path / "nope" / "x.tfrecord")
        expect = "does not exist"
    elif case == "missing_flag":
        del args["vocab_file"]
        expect = "--vocab_file is required"
    code, err = _run(["--%s=%s" % kv for kv in args.items()] + extra, capsys)
    assert code == 1
    lines = err.strip().split("\n")  # progress lines may come first; one error line, last
    errors = [line for line in lines if "error" in line]
    assert errors == [lines[-1]] and lines[-1].startswith("create_pretraining_data.py: error: ")
    assert expect in lines[-1]
    assert os.listdir(out_dir) == []


def test_no_multi_sentence_document_warns_and_pairs_randomly(tmp_path, capsys):
    corpus = _bad_corpus(tmp_path, "single.txt",
                         b"the first document .\n\nthe second one .\n\nand a third .\n")
    out = str(tmp_path / "x.tfrecord")
    code, err = _run(["--input_file=%s" % corpus, "--output_file=%s" % out,
                      "--vocab_file=%s" % paths.GOLDEN_VOCAB, "--dupe_factor=4",
                      "--show_progress=false"], capsys)
    assert code == 0
    assert "warning: no document has two sentences" in err
    records = [numpy_reader.decode_example(x)
               for x in list(numpy_reader.read_records(out))]
    assert len(records) == 12 and all(r["next_sentence_labels"] == [1] for r in records)


def test_script_entry_point_without_tensorflow(tmp_path):
    out = str(tmp_path / "x.tfrecord")
    probe = ("import runpy, sys\nsys.argv = %r\n"
             "try:\n    runpy.run_path('create_pretraining_data.py', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code or 0\n"
             "print('TF_LOADED' if 'tensorflow' in sys.modules else 'NO_TF', code)\n"
             % (["create_pretraining_data.py"] + _golden_flags(out, "False")))
    # (BERT_SLOW_EXIT: the probe catches the tool's SystemExit to look at sys.modules after it;
    # a successful tool run otherwise ends the process at once, bert_cli/runner.py)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT,
                       env=dict(ENV, BERT_SLOW_EXIT="1"), capture_output=True, text=True,
                       timeout=300)
    assert r.stdout.split() == ["NO_TF", "0"], r.stderr[-2000:]
    r = subprocess.run([sys.executable, "create_pretraining_data.py", "--input_file=%s" % SAMPLE,
                        "--output_file=%s" % out, "--vocab_file=%s" % paths.GOLDEN_VOCAB,
                        "--max_seq_length=3"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "--max_seq_length=3 is too small: at least 5" in r.stderr
