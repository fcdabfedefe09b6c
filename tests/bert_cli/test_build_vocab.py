"""build_vocab.py on ../shared/data/pretrain/derived_pretrain_corpus.txt: the vocab loads in
FullTokenizer, the corpus tokenizes with an [UNK] rate below 0.01%, the special tokens sit at the
positions Google's vocabs use, and create_pretraining_data -> run_pretraining runs on it (small
vocab, tiny model, a few steps). Also: --do_lower_case=false keeps case as BasicTokenizer does,
--num_unused / --reserved_tokens positions, --vocab_size exact, gs://-style (ram://) paths, and
bad input: one line on stderr, exit code 1, nothing written."""

import collections
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_cli import build_vocab, create_pretraining_data, run_pretraining
from data.records import numpy_reader
from data.tokenization.wordpiece import (BasicTokenizer, FastFullTokenizer, FullTokenizer,
                                         load_vocab)
from tests import paths
from tests.support.tools import run_tool

ROOT = paths.ROOT
CORPUS = os.path.join(paths.DATA, "pretrain", "derived_pretrain_corpus.txt")
SAMPLE = os.path.join(paths.DATA, "pretrain", "sample_text.txt")
GOOGLE_VOCAB = os.path.join(paths.DATA, "vocab", "bert-base-uncased-vocab.txt")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=paths.PYTHONPATH)


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def _build(tmp_path, name, *flags, input_file=CORPUS):
    out = str(tmp_path / name)
    run = run_tool(build_vocab, ["--input_file=%s" % input_file, "--output_file=%s" % out]
                   + list(flags))
    return out, run


def _unk_rate(vocab_file, lines, do_lower_case):
    tokenizer = FastFullTokenizer(vocab_file, do_lower_case=do_lower_case)
    ids = [i for row in tokenizer.convert_lines_to_ids(lines) for i in row]
    return ids.count(tokenizer.vocab["[UNK]"]) / len(ids), len(ids)


@pytest.fixture(scope="module")
def uncased(tmp_path_factory):
    """The corpus's 8000-token uncased vocab (about a second)."""
    out, run = _build(tmp_path_factory.mktemp("uncased"), "vocab.txt", "--vocab_size=8000")
    assert run.code == 0, run.stderr
    return out, run


def test_vocab_of_the_corpus_loads_covers_it_and_has_googles_layout(uncased):
    vocab_file, run = uncased
    # Progress while reading, then the one summary line.
    err = run.stderr.strip().split("\n")
    assert all(line.startswith("reading: ") for line in err[:-1])
    assert err[-2].startswith("reading: 2.9/2.9 MB") and "26661 lines, 618123 words" in err[-2]
    assert err[-1].startswith("build_vocab.py: wrote 8000 tokens to %s; " % vocab_file)
    assert "618123 words seen (27131 distinct, 189 characters)" in err[-1]
    tokens = _lines(vocab_file)
    assert tokens[-1] == "" and len(tokens) == 8001 and len(set(tokens)) == 8001  # exact size
    # Google's positions: [PAD]=0, [unused0..98]=1..99, [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103.
    assert tokens[:104] == _lines(GOOGLE_VOCAB)[:104]
    vocab = load_vocab(vocab_file)
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 100, 101,
                                                                                  102, 103]
    assert sum(t.startswith("##") for t in tokens) > 1000  # continuations were learned
    lines = _lines(CORPUS)
    rate, n = _unk_rate(vocab_file, lines, True)
    assert n > 600_000 and rate < 1e-4
    # The faithful FullTokenizer reads it too, to the same pieces.
    full = FullTokenizer(vocab_file, do_lower_case=True)
    fast = FastFullTokenizer(vocab_file, do_lower_case=True)
    some = lines[:300] + [line for line in lines if not line.isascii()][:300]
    assert [full.tokenize(x) for x in some] == fast.tokenize_lines(some)
    assert "[UNK]" not in {p for x in some for p in full.tokenize(x)}
    assert "the" in vocab and "The" not in vocab and not any(c.isupper() for c in tokens[104:-1])


def test_cased_vocab_keeps_case_as_basic_tokenizer(uncased, tmp_path):
    vocab_file, run = _build(tmp_path, "cased.txt", "--vocab_size=8000", "--do_lower_case=false",
                             "--show_progress=false")
    assert run.code == 0 and run.stderr.count("\n") == 1, run.stderr
    vocab = load_vocab(vocab_file)
    assert len(vocab) == 8000 and {"The", "the", "He", "é", "É"} <= set(vocab)
    lines = _lines(CORPUS)
    # Its words are BasicTokenizer(do_lower_case=False)'s: the frequent ones whole, every
    # character (accents kept) alone and as ##piece, nothing of the uncased normalisation.
    basic = BasicTokenizer(do_lower_case=False)
    counts = collections.Counter(w for line in lines[:5000] for w in basic.tokenize(line))
    assert all(w in vocab for w, _ in counts.most_common(300))
    chars = {c for w in counts for c in w}
    assert all(c in vocab and "##" + c in vocab for c in chars)
    assert "é" not in load_vocab(uncased[0]) and "É" not in load_vocab(uncased[0])
    rate, _ = _unk_rate(vocab_file, lines, False)
    assert rate < 1e-4


def test_unused_and_reserved_tokens(tmp_path):
    vocab_file, run = _build(tmp_path, "v.txt", "--vocab_size=600", "--num_unused=120",
                             "--reserved_tokens=[URL],[EMAIL],the", "--show_progress=false",
                             input_file=SAMPLE)
    assert run.code == 0, run.stderr
    tokens = _lines(vocab_file)[:-1]
    assert len(tokens) == 600 and len(set(tokens)) == 600
    assert tokens[:125] == _lines(GOOGLE_VOCAB)[:125]  # [unused99..119] right after [MASK]
    assert tokens[125:128] == ["[URL]", "[EMAIL]", "the"] and tokens.count("the") == 1
    vocab_file, run = _build(tmp_path, "none.txt", "--vocab_size=300", "--num_unused=0",
                             "--show_progress=false", input_file=SAMPLE)
    assert run.code == 0, run.stderr
    assert _lines(vocab_file)[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "!"]
    # More than the text can give: what there is, and the summary says so.
    vocab_file, run = _build(tmp_path, "big.txt", "--vocab_size=5000", "--show_progress=false",
                             input_file=SAMPLE)
    assert run.code == 0 and "(fewer than --vocab_size=5000: the text has no more" in run.stderr
    size = len(_lines(vocab_file)) - 1
    assert 500 < size < 5000 and ("wrote %d tokens" % size) in run.stderr


def test_input_patterns_and_url_paths(tmp_path):
    from bert_common import files

    (tmp_path / "a.txt").write_text("alpha beta\n\ngamma\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("delta\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("epsilon\n", encoding="utf-8")
    vocab_file, run = _build(tmp_path, "v.txt", "--vocab_size=200", "--show_progress=false",
                             input_file="%s,%s" % (tmp_path / "[ab].txt", tmp_path / "c.txt"))
    assert run.code == 0, run.stderr
    assert {"alpha", "beta", "gamma", "delta", "epsilon"} <= set(_lines(vocab_file))
    # A TensorFlow filesystem path (as gs://) for input and output; nothing local is made.
    root = "ram://build_vocab_test"
    files.makedirs(root)
    files.copy(SAMPLE, root + "/in.txt")
    run = run_tool(build_vocab, ["--input_file=%s/in*.txt" % root, "--vocab_size=300",
                                 "--output_file=%s/vocab.txt" % root, "--show_progress=false"])
    assert run.code == 0, run.stderr
    with files.open(root + "/vocab.txt") as f:
        remote = f.read().split("\n")
    assert len(remote) == 301 and remote[100] == "[UNK]"
    assert not os.path.exists(os.path.join(os.getcwd(), "ram:"))


def _tiny_config(path, vocab_size):
    config = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": 64, "initializer_range": 0.02,
              "intermediate_size": 128, "max_position_embeddings": 64,
              "num_attention_heads": 4, "num_hidden_layers": 2, "type_vocab_size": 2,
              "vocab_size": vocab_size}
    path.write_text(json.dumps(config))
    return str(path)


def test_create_pretraining_data_and_run_pretraining_on_it(tmp_path):
    vocab_file, run = _build(tmp_path, "vocab.txt", "--vocab_size=1000", "--show_progress=false")
    assert run.code == 0, run.stderr
    size = len(load_vocab(vocab_file))
    assert size == 1000
    head = tmp_path / "head.txt"  # the first ~600 lines, cut at a document boundary
    lines = _lines(CORPUS)
    cut = lines.index("", 600)
    head.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
    records = str(tmp_path / "records.tfrecord")
    run = run_tool(create_pretraining_data, [
        "--input_file=%s" % head, "--output_file=%s" % records, "--vocab_file=%s" % vocab_file,
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1",
        "--show_progress=false"])
    assert run.code == 0, run.stderr
    examples = [numpy_reader.decode_example(x)
                for x in list(numpy_reader.read_records(records))]
    assert len(examples) > 200
    ids = np.array([e["input_ids"] for e in examples])
    assert ids.max() < size and (ids[:, 0] == 101).all() and (ids == 102).any()  # [CLS], [SEP]
    assert (ids == 103).any() and not (ids == 100).any()  # [MASK] used, no [UNK]
    labels = np.array([e["masked_lm_ids"] for e in examples])
    weights = np.array([e["masked_lm_weights"] for e in examples])
    assert (labels[weights > 0] > 103).all()  # masked words are pieces, never specials

    out = tmp_path / "pretrain"
    run = run_tool(run_pretraining, [
        "--bert_config_file=%s" % _tiny_config(tmp_path / "bert_config.json", size),
        "--input_file=%s" % records, "--output_dir=%s" % out, "--do_train", "--do_eval",
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--train_batch_size=8",
        "--eval_batch_size=8", "--num_train_steps=4", "--num_warmup_steps=1",
        "--learning_rate=1e-3", "--save_checkpoints_steps=4", "--iterations_per_loop=4",
        "--max_eval_steps=2"])
    assert run.code == 0, run.stderr[-3000:]
    results = {}
    with open(out / "eval_results.txt", encoding="utf-8") as f:
        for line in f:
            key, value = line.strip().split(" = ")
            results[key] = float(value)
    assert results["global_step"] == 4
    # A near-initial model over the 1000 pieces: about ln(1000) = 6.9 nats per masked piece.
    assert math.isfinite(results["masked_lm_loss"])
    assert abs(results["masked_lm_loss"] - math.log(size)) < 0.5, results


@pytest.mark.parametrize("case", ["no_match", "missing_file", "too_small", "too_small_layout",
                                  "invalid_utf8", "missing_output_folder", "output_is_folder",
                                  "bad_reserved", "missing_flag", "no_text"])
def test_bad_input_is_one_line_and_exit_1_with_nothing_written(case, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "vocab.txt"
    args = {"input_file": SAMPLE, "output_file": str(out), "vocab_size": "1000"}
    extra = []
    if case == "no_match":
        args["input_file"] = str(tmp_path / "nothing*.txt")
        expect = "input pattern %s matches no file" % args["input_file"]
    elif case == "missing_file":
        args["input_file"] = "%s,%s" % (SAMPLE, tmp_path / "nope.txt")
        expect = "input file %s: no such file" % (tmp_path / "nope.txt")
    elif case == "too_small":
        args["vocab_size"] = "150"
        expect = "--vocab_size=150 is too small: the 104 special/unused/reserved tokens and the " \
                 "51 characters of the text (each alone and as ##piece) need 206 lines"
    elif case == "too_small_layout":
        args["vocab_size"] = "100"
        expect = "--vocab_size=100 is too small: the special, unused and reserved tokens alone"
    elif case == "invalid_utf8":
        bad = tmp_path / "bad.txt"
        bad.write_bytes(b"fine line\nbad \xc3\x28 line\n")
        args["input_file"] = str(bad)
        expect = "input file %s, line 2: invalid UTF-8" % bad
    elif case == "missing_output_folder":
        args["output_file"] = str(tmp_path / "nope" / "vocab.txt")
        expect = "output folder %s does not exist" % (tmp_path / "nope")
    elif case == "output_is_folder":
        (out_dir / "sub").mkdir()
        args["output_file"] = str(out_dir / "sub")
        expect = "--output_file %s is a folder" % (out_dir / "sub")
    elif case == "bad_reserved":
        extra = ["--reserved_tokens=[URL],[MASK]"]
        expect = "--reserved_tokens: [MASK] is listed twice or is one of the special/unused"
    elif case == "missing_flag":
        del args["output_file"]
        expect = "--output_file is required"
    else:
        empty = tmp_path / "empty.txt"
        empty.write_bytes(b"\n \n\x00\n")
        args["input_file"] = str(empty)
        expect = "the text has no words"
    out.write_text("old\n")  # an existing output is left as it was
    run = run_tool(build_vocab, ["--%s=%s" % kv for kv in args.items()] + extra
                   + ["--show_progress=false"])
    assert run.code == 1
    assert run.stderr.startswith("build_vocab.py: error: " + expect), run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert out.read_text() == "old\n"
    assert sorted(os.listdir(out_dir)) == (["sub", "vocab.txt"] if case == "output_is_folder"
                                           else ["vocab.txt"])  # no temporary left


def test_script_entry_point_without_tensorflow(tmp_path):
    out = str(tmp_path / "vocab.txt")
    probe = ("import runpy, sys\nsys.argv = %r\n"
             "try:\n    runpy.run_path('build_vocab.py', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code or 0\n"
             "print('TF_LOADED' if 'tensorflow' in sys.modules else 'NO_TF', code)\n"
             % (["build_vocab.py", "--input_file=%s" % SAMPLE, "--output_file=%s" % out,
                 "--vocab_size=300"],))
    # (BERT_SLOW_EXIT: the probe catches the tool's SystemExit to look at sys.modules after it;
    # a successful tool run otherwise ends the process at once, bert_cli/runner.py)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT,
                       env=dict(ENV, BERT_SLOW_EXIT="1"), capture_output=True, text=True,
                       timeout=300)
    assert r.stdout.split() == ["NO_TF", "0"], r.stderr[-2000:]
    assert len(_lines(out)) == 301
    r = subprocess.run([sys.executable, "build_vocab.py", "--help"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "--reserved_tokens" in r.stdout and "--num_unused" in r.stdout
