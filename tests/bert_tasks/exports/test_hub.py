"""bert_tasks/exports/hub.py: export_hub writes the encoder and preprocessor SavedModels, which load in
a fresh process (TensorFlow and TensorFlow Text only, none of the project's code) and, fed the
same text, give the same pooled_output as BertModel within 1e-5; ``saved_model_cli show``
lists their signatures."""

import collections
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import modeling
from bert_common.errors import InputError
from bert_tasks.exports import hub
from data.glue import features as cf
from data.glue.processors import InputExample
from data.tokenization import wordpiece as tokenization
from modeling.checkpoints import CheckpointError
from tests import paths
from tests.support.tools import snapshot

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
CKPT = os.path.join(TINY, "bert_model.ckpt")  # a pre-training checkpoint: cls/* is unused
CONFIG = os.path.join(TINY, "bert_config.json")
SEQ = 24
TEXTS_A = ["The quick brown fox jumps over the lazy dog.",
           "Unwänted rünning: ΟΔΟΣ İstanbul 中文字 naïve café " * 3,
           "hello"]
TEXTS_B = ["A second sentence, long enough to be cut by the pair rule at this length.",
           "",
           "world"]

# Run in a fresh process with TensorFlow and TensorFlow Text only: argv = export dir, texts.
LOAD_SCRIPT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the preprocessor's ops)

out, texts_a, texts_b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
preprocessor = tf.saved_model.load(out + "/preprocessor")
encoder = tf.saved_model.load(out + "/encoder")
single = preprocessor(tf.constant(texts_a))
words = [preprocessor.tokenize(tf.constant(t)) for t in (texts_a, texts_b)]
pair = preprocessor.bert_pack_inputs(words, seq_length=tf.constant(%d))
result = {}
for name, inputs in (("single", single), ("pair", pair)):
    outputs = encoder(inputs, training=False)
    result[name] = {"inputs": {k: v.numpy().tolist() for k, v in inputs.items()},
                    "pooled_output": outputs["pooled_output"].numpy().tolist()}
serving = encoder.signatures["serving_default"](**single)
result["serving_pooled_output"] = serving["pooled_output"].numpy().tolist()
print(json.dumps(result))
""" % SEQ

# ``saved_model_cli show --dir <dir> --all`` (the console command's own ``main``) for each
# SavedModel, in the same fresh process as LOAD_SCRIPT: one ``import tensorflow`` for all three.
# Each one's stdout is printed after a separator line; a failing run prints its exit status.
CLI_SCRIPT = r"""
import contextlib, io
from tensorflow.python.tools import saved_model_cli
for name in ("encoder", "preprocessor"):
    sys.argv = ["saved_model_cli", "show", "--dir", out + "/" + name, "--all"]
    shown = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(shown):
        try:
            saved_model_cli.main()
        except SystemExit as e:
            code = e.code or 0
    print("=== saved_model_cli %s exit %r" % (name, code))
    print(shown.getvalue())
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(the export folder, the summary line, the traces counted during the export)."""
    out = str(tmp_path_factory.mktemp("tfhub") / "out")
    # Through the command line: convert_checkpoint.py --output_format=tfhub is export_hub.
    from bert_cli import convert_checkpoint
    from bert_tasks.exports import hub_encoder, hub_preprocessor
    from tests.support.tools import run_tool

    traces = collections.Counter()  # Python bodies run: one per traced graph

    def counted(module, name, key):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            traces[key(*args, **kwargs)] += 1
            return original(*args, **kwargs)
        return wrapper

    with pytest.MonkeyPatch.context() as patch:
        # (segments, ragged rank, whether seq_length is the export's int (not a tensor))
        patch.setattr(hub_preprocessor, "pack_segments", counted(
            hub_preprocessor, "pack_segments", lambda segments, seq_length, *_: (
                "bert_pack_inputs", len(segments), segments[0].ragged_rank,
                isinstance(seq_length, int))))
        patch.setattr(hub_encoder.HubEncoder, "_outputs", counted(
            hub_encoder.HubEncoder, "_outputs",
            lambda self, inputs, training: ("encoder", training)))
        run = run_tool(convert_checkpoint, ["--output_format=tfhub", "--input=" + CKPT,
                                            "--bert_config_file=" + CONFIG,
                                            "--vocab_file=" + paths.GOLDEN_VOCAB,
                                            "--do_lower_case=true", "--seq_length=%d" % SEQ,
                                            "--output=" + out])
    assert run.code == 0, run.stderr
    return out, run.stderr.strip().splitlines()[-1], traces


@pytest.fixture(scope="module")
def fresh_processes(exported, tmp_path_factory):
    """The loader's and both ``saved_model_cli show`` runs' stdout, from one fresh process
    (TensorFlow and TensorFlow Text only: no PYTHONPATH to the project's code)."""
    out = exported[0]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)  # the SavedModels must not need the project's code
    cwd = str(tmp_path_factory.mktemp("fresh"))
    run = subprocess.run([sys.executable, "-c", LOAD_SCRIPT + CLI_SCRIPT, out,
                          json.dumps(TEXTS_A), json.dumps(TEXTS_B)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, "load failed:\n%s" % run.stderr[-3000:]
    load, encoder, preprocessor = re.split(r"^=== saved_model_cli \w+ exit .*$\n", run.stdout,
                                           flags=re.M)
    codes = re.findall(r"^=== saved_model_cli (\w+) exit (.*)$", run.stdout, flags=re.M)
    assert codes == [("encoder", "0"), ("preprocessor", "0")], (codes, run.stderr[-3000:])
    return {"load": load, "encoder": encoder, "preprocessor": preprocessor}


def _host_features(texts_a, texts_b):
    tokenizer = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    texts_b = texts_b or [None] * len(texts_a)
    examples = [InputExample(str(i), a, b or None, "0")
                for i, (a, b) in enumerate(zip(texts_a, texts_b))]
    features = cf.convert_examples_to_features(examples, ["0"], SEQ, tokenizer)
    return {name: np.array([getattr(f, name) for f in features], np.int32)
            for name in ("input_ids", "input_mask", "segment_ids")}


@pytest.fixture(scope="module")
def bert_model():
    model = modeling.BertModel(modeling.BertConfig.from_json_file(CONFIG))
    modeling.load_checkpoint(model, CKPT, log=False)
    return model


def test_summary_is_one_line(exported):
    out, summary, _ = exported
    assert "\n" not in summary
    assert os.path.join(out, "encoder") in summary and os.path.join(out, "preprocessor") in summary
    assert "39 variables loaded, 7 unused" in summary  # the pre-training heads


def test_export_traces_each_function_once(exported):
    """Each of bert_pack_inputs' 12 concrete functions (1-3 segments of ragged rank 1 or 2,
    seq_length given or not) and the encoder for each ``training`` is traced once: the
    signatures call them (no second tracing of their bodies), and they are traced in the save's
    own context (``saved_model.tracing_as_saved``), so ``tf.saved_model.save`` traces none
    again."""
    traces = exported[2]
    want = {("bert_pack_inputs", count, rank, default): 1 for count in (1, 2, 3)
            for rank in (1, 2) for default in (False, True)}
    want.update({("encoder", False): 1, ("encoder", True): 1})
    assert dict(traces) == want


def test_fresh_process_gives_bert_model_pooled_output(fresh_processes, bert_model):
    result = json.loads(fresh_processes["load"].strip().splitlines()[-1])
    for name, texts_b in (("single", None), ("pair", TEXTS_B)):
        host = _host_features(TEXTS_A, texts_b)
        inputs = result[name]["inputs"]
        np.testing.assert_array_equal(inputs["input_word_ids"], host["input_ids"])
        np.testing.assert_array_equal(inputs["input_mask"], host["input_mask"])
        np.testing.assert_array_equal(inputs["input_type_ids"], host["segment_ids"])
        want = bert_model(host, training=False)["pooled_output"].numpy()
        np.testing.assert_allclose(result[name]["pooled_output"], want, atol=1e-5, rtol=0)
    want = bert_model(_host_features(TEXTS_A, None), training=False)["pooled_output"].numpy()
    np.testing.assert_allclose(result["serving_pooled_output"], want, atol=1e-5, rtol=0)


def _signature_block(show_output, name):
    start = show_output.index("signature_def['%s']:" % name)
    end = show_output.find("signature_def[", start + 1)
    return show_output[start:end if end > 0 else len(show_output)]


def test_saved_model_cli_lists_the_signatures(fresh_processes):
    encoder = fresh_processes["encoder"]
    block = _signature_block(encoder, "serving_default")
    for name in ("input_word_ids", "input_mask", "input_type_ids"):
        assert "inputs['%s']" % name in block
    for name in ("pooled_output", "sequence_output", "default_output", "encoder_outputs_0",
                 "encoder_outputs_1"):
        assert "outputs['%s']" % name in block
    assert "encoder_outputs_2" not in block
    assert "DT_INT32" in block and "DT_FLOAT" in block

    preprocessor = fresh_processes["preprocessor"]
    for signature, inputs in (("serving_default", ["text"]), ("text_pair", ["text_a", "text_b"])):
        block = _signature_block(preprocessor, signature)
        for name in inputs:
            assert "inputs['%s']" % name in block
        for name in ("input_word_ids", "input_mask", "input_type_ids"):
            assert "outputs['%s']" % name in block
        assert "shape: (-1, %d)" % SEQ in block


def test_default_vocab_and_config_are_found_beside_the_checkpoint(tmp_path):
    for name in os.listdir(TINY):
        if name.startswith("bert_model.ckpt") or name == "bert_config.json":
            os.symlink(os.path.join(TINY, name), tmp_path / name)
    prefix = str(tmp_path / "bert_model.ckpt")
    with pytest.raises(InputError) as error:
        hub.export_hub(prefix, str(tmp_path / "out"))
    message = str(error.value)
    assert "\n" not in message and "--vocab_file" in message and "vocab.txt" in message
    shutil.copyfile(paths.GOLDEN_VOCAB, tmp_path / "vocab.txt")
    assert hub._vocab_file(prefix, None) == str(tmp_path / "vocab.txt")
    assert hub._vocab_file(str(tmp_path), None) == str(tmp_path / "vocab.txt")
    from modeling.checkpoints.folders import config_for
    from modeling.config import BertConfig

    assert config_for(prefix, None) == BertConfig.from_json_file(CONFIG)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("kwargs,match", [
    ({"vocab_file": "/nonexistent/vocab.txt"}, "vocab file /nonexistent/vocab.txt: no such file"),
    ({"seq_length": 1000}, "--seq_length must be an integer from 3 to"),
    ({"seq_length": 2}, "--seq_length must be an integer from 3 to"),
])
def test_bad_flags_are_one_line_input_errors(tmp_path, kwargs, match):
    args = dict(config_file=CONFIG, vocab_file=paths.GOLDEN_VOCAB)
    args.update(kwargs)
    with pytest.raises(InputError, match=match) as error:
        hub.export_hub(CKPT, str(tmp_path / "out"), **args)
    assert "\n" not in str(error.value)
    assert not os.path.exists(tmp_path / "out")


def test_missing_checkpoint_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="no such file, folder or checkpoint"):
        hub.export_hub(str(tmp_path / "nothing"), str(tmp_path / "out"),
                       config_file=CONFIG, vocab_file=paths.GOLDEN_VOCAB)


# ----------------------------------------------------------- the encoder's input checks


@pytest.fixture(scope="module")
def loaded_encoder(exported):
    import tensorflow as tf

    out = exported[0]
    return tf.saved_model.load(os.path.join(out, "encoder"))


def _hub_ids(batch, length, ids=5, mask=1, types=0):
    import tensorflow as tf

    return {"input_word_ids": tf.fill([batch, length], ids),
            "input_mask": tf.fill([batch, length], mask),
            "input_type_ids": tf.fill([batch, length], types)}


@pytest.mark.parametrize("change,message", [
    ({"input_mask": (3, 6, 1)}, "input_mask must have the shape of input_word_ids"),
    ({"input_type_ids": (2, 5, 0)}, "input_type_ids must have the shape of input_word_ids"),
    ({"input_mask": (2, 6, 7)}, "input_mask values must be 0 or 1"),
    ({"input_word_ids": (2, 6, 30522)},
     r"input_word_ids values must be in \[0, vocab_size=30522\)"),
    ({"input_word_ids": (2, 6, -1)}, r"input_word_ids values must be in \[0, vocab_size=30522\)"),
    ({"input_type_ids": (2, 6, 2)}, r"input_type_ids values must be in \[0, type_vocab_size=2\)"),
    ({"input_word_ids": (2, 0, 5), "input_mask": (2, 0, 1), "input_type_ids": (2, 0, 0)},
     "a row needs at least one position"),
    ({"input_word_ids": (1, 129, 5), "input_mask": (1, 129, 1), "input_type_ids": (1, 129, 0)},
     "max_position_embeddings=128"),
])
def test_encoder_rejects_inconsistent_inputs(loaded_encoder, change, message):
    import tensorflow as tf

    inputs = _hub_ids(2, 6)
    for name, (batch, length, value) in change.items():
        inputs[name] = tf.fill([batch, length], value)
    for call in (lambda: loaded_encoder(inputs, training=False),
                 lambda: loaded_encoder.signatures["serving_default"](**inputs)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            call()


@pytest.mark.parametrize("length", [0, 5])
def test_encoder_answers_an_empty_batch_with_empty_outputs(loaded_encoder, length):
    hidden = modeling.BertConfig.from_json_file(CONFIG).hidden_size
    for training in (False, True):
        out = loaded_encoder(_hub_ids(0, length), training=training)
        assert out["pooled_output"].shape == (0, hidden)
        assert out["default_output"].shape == (0, hidden)
        assert out["sequence_output"].shape == (0, length, hidden)
        assert [x.shape for x in out["encoder_outputs"]] == [(0, length, hidden)] * 2
    flat = loaded_encoder.signatures["serving_default"](**_hub_ids(0, length))
    assert flat["pooled_output"].shape == (0, hidden)
    assert flat["encoder_outputs_1"].shape == (0, length, hidden)


def test_encoder_serves_valid_inputs_with_padding(loaded_encoder, bert_model):
    import tensorflow as tf

    inputs = _hub_ids(2, 6)
    inputs["input_mask"] = tf.constant([[1] * 6, [1] * 2 + [0] * 4])
    got = loaded_encoder(inputs, training=False)["pooled_output"].numpy()
    want = bert_model({"input_ids": inputs["input_word_ids"], "input_mask": inputs["input_mask"],
                       "segment_ids": inputs["input_type_ids"]}, training=False)["pooled_output"]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0)


# ------------------------------------------------------- what --output_format=tfhub replaces


@pytest.mark.parametrize("blocked", [hub.ENCODER_DIR, hub.PREPROCESSOR_DIR])
def test_a_destination_that_is_not_a_saved_model_is_refused(tmp_path, blocked):
    out = tmp_path / "out"
    (out / blocked).mkdir(parents=True)
    (out / blocked / "notes.txt").write_text("the user's\n")
    before = snapshot(tmp_path, folders=True)
    with pytest.raises(InputError, match="not a SavedModel") as error:
        hub.export_hub(CKPT, str(out), config_file=CONFIG, vocab_file=paths.GOLDEN_VOCAB)
    message = str(error.value)
    assert "\n" not in message and str(out / blocked) in message and "--output" in message
    assert snapshot(tmp_path, folders=True) == before  # neither SavedModel written


def test_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(InputError, match="--output=.* is a file"):
        hub.export_hub(CKPT, str(tmp_path / "out"), config_file=CONFIG,
                       vocab_file=paths.GOLDEN_VOCAB)
    assert (tmp_path / "out").read_text() == "x"


@pytest.fixture(scope="module")
def replaced(exported, tmp_path_factory):
    """A copy of the export, into which an export that fails at the preprocessor's rename (after
    the encoder's) runs, then the same export through the command line (``convert_checkpoint.py
    --output_format=tfhub --seq_length=8 --hub_keep_empty_segments``), which replaces both
    SavedModels. One replacing export serves the two tests below (each export traces both
    SavedModels: the slowest step of this file)."""
    import errno

    from bert_cli import convert_checkpoint
    from bert_common import atomic
    from tests.support.tools import run_tool

    tmp = tmp_path_factory.mktemp("replaced")
    out = tmp / "out"
    shutil.copytree(exported[0], out)
    before = snapshot(tmp, folders=True)

    def disk_full(event, path):  # the preprocessor's rename fails, after the encoder's
        if event == "commit" and path.endswith(hub.PREPROCESSOR_DIR):
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with atomic.inject_faults(disk_full):
        with pytest.raises(OSError, match="No space left"):
            hub.export_hub(CKPT, str(out), config_file=CONFIG, vocab_file=paths.GOLDEN_VOCAB,
                           seq_length=8, keep_empty_segments=True)
    after_failure = snapshot(tmp, folders=True)
    # Existing SavedModels are replaced.
    run = run_tool(convert_checkpoint, ["--output_format=tfhub", "--input=" + CKPT,
                                        "--bert_config_file=" + CONFIG,
                                        "--vocab_file=" + paths.GOLDEN_VOCAB,
                                        "--seq_length=8", "--hub_keep_empty_segments",
                                        "--output=" + str(out)])
    return {"out": out, "before": before, "after_failure": after_failure, "run": run}


@pytest.fixture(scope="module")
def replaced_preprocessor(replaced):
    """The replacing export's preprocessor, loaded once for the two tests below."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the preprocessor's ops

    assert replaced["run"].code == 0, replaced["run"].stderr
    return tf.saved_model.load(str(replaced["out"] / hub.PREPROCESSOR_DIR))


def test_both_saved_models_are_replaced_together_or_not_at_all(replaced, replaced_preprocessor):
    import tensorflow as tf

    # The failed export left both previous SavedModels and nothing staged.
    assert replaced["after_failure"] == replaced["before"]
    assert replaced["run"].code == 0, replaced["run"].stderr
    out = replaced["out"]
    assert sorted(os.listdir(out)) == [hub.ENCODER_DIR, hub.PREPROCESSOR_DIR]
    preprocessor = replaced_preprocessor  # loaded from out / hub.PREPROCESSOR_DIR
    assert preprocessor(tf.constant(["hello"]))["input_word_ids"].shape == (1, 8)  # SEQ before


def test_hub_keep_empty_segments_flag_reaches_the_preprocessor(replaced, replaced_preprocessor):
    """convert_checkpoint.py --hub_keep_empty_segments: the exported preprocessor packs an
    empty second segment as TF Hub ([CLS] a [SEP] [SEP], the last [SEP] of type 1)."""
    import tensorflow as tf

    run = replaced["run"]  # the command line with --seq_length=8 --hub_keep_empty_segments
    assert run.code == 0, run.stderr
    loaded = replaced_preprocessor  # loaded from replaced["out"] / "preprocessor"
    packed = loaded.signatures["text_pair"](text_a=tf.constant(["hello world"]),
                                            text_b=tf.constant([""]))
    sep = int(loaded.tokenize.get_special_tokens_dict()["end_of_segment_id"])
    ids = packed["input_word_ids"].numpy()[0].tolist()
    types = packed["input_type_ids"].numpy()[0].tolist()
    last = ids.index(sep, ids.index(sep) + 1)  # the second [SEP], right after the first
    assert last == ids.index(sep) + 1 and types[last] == 1 and types[ids.index(sep)] == 0


def test_hidden_act_reaches_the_exported_encoder(tmp_path, monkeypatch):
    """``convert_checkpoint --output_format=tfhub --hidden_act`` builds the encoder with it."""
    built = []

    class Stop(Exception):
        pass

    def capture(config, *args, **kwargs):
        built.append(config.hidden_act)
        raise Stop()

    monkeypatch.setattr(hub, "BertModel", capture)
    with pytest.raises(Stop):
        hub.export_hub(CKPT, str(tmp_path / "out"), config_file=CONFIG,
                       vocab_file=paths.GOLDEN_VOCAB, hidden_act="gelu_exact")
    assert built == ["gelu_exact"]
