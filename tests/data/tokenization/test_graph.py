"""The in-graph tokenizer (data/tokenization/graph.py) against the golden files and the host path."""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from data.glue.features import _truncate_seq_pair  # the project's one rule, one pop at a time
from data.tokenization import graph as graph_tokenization
from data.tokenization import special_tokens
from data.tokenization import wordpiece as tokenization
from tests import paths

GOLDEN_FILES = {True: "uncased_lower_true.jsonl", False: "cased_lower_false.jsonl"}

# Rules where a per-character shortcut would go wrong: final sigma (with
# case-ignorable neighbours), dotted capital I, sharp s, titlecase digraphs,
# NFD reordering of non-Mn combining marks (ccc 226 before 216), marks after
# CJK, separators that are not Zs, the 200-character limit in characters (not
# bytes), controls and U+FFFD.
HARD_STRINGS = [
    "ΟΔΟΣ ΟΔΟΣ. ΑΣ'Α Σ ΑΣΑ Α\u0345Σ ΑΣ\u0301 σΣ ΣΣ",
    "İstanbul DİYARBAKIR STRASSE ẞ ǅ ǈ Ǳ",
    "a\U0001D16D\U0001D165 b\U0001D16D\u0301\U0001D165 \U0001D16D\U0001D165",
    "中\u0301文 \uF900\uFADF \U0002CEAB x\u2028y\u2029z a\u00a0b\u3000c",
    "a\x00b\x0bc\x1fd\x7fe\x85f\u200dg\ufffdh\ufeffi\u00adj",
    "é" * 200 + " " + "é" * 201 + " " + "a" * 200 + " " + "a" * 201,
    "\U0001F600" * 150 + " " + "\U0001F600" * 201,
    "",
    "   \t\n ",
]


def _records(lower):
    with open(os.path.join(paths.GOLDEN, "tokenization", GOLDEN_FILES[lower]),
              encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def graph_tok(request):
    return graph_tokenization.BertGraphTokenizer(paths.GOLDEN_VOCAB, do_lower_case=request.param)


@pytest.fixture(scope="module")
def uncased_tok():
    return graph_tokenization.BertGraphTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)


def _utf8(texts):
    return [t.encode("utf-8") for t in texts]


def test_golden_basic_tokens_and_ids(graph_tok):
    records = _records(graph_tok.do_lower_case)
    assert len(records) == 293
    texts = _utf8(r["text"] for r in records)
    basic = graph_tok.basic_tokenize(texts).to_list()
    ids = graph_tok.tokenize(texts).to_list()
    bad_basic = [r["source"] for r, b in zip(records, basic)
                 if [t.decode("utf-8") for t in b] != r["basic_tokens"]]
    bad_ids = [r["source"] for r, i in zip(records, ids) if i != r["ids"]]
    assert bad_basic == [] and bad_ids == []
    assert graph_tok.wordpiece_kind == "fast"  # no fallback needed for the golden vocab


def test_hard_strings_match_full_tokenizer(graph_tok):
    full = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=graph_tok.do_lower_case)
    ids = graph_tok.tokenize(_utf8(HARD_STRINGS)).to_list()
    basic = graph_tok.basic_tokenize(_utf8(HARD_STRINGS)).to_list()
    for text, got, got_basic in zip(HARD_STRINGS, ids, basic):
        assert [t.decode("utf-8") for t in got_basic] == full.basic_tokenizer.tokenize(text)
        assert got == full.convert_tokens_to_ids(full.tokenize(text)), repr(text[:40])


def test_character_limit_is_in_characters_not_bytes(uncased_tok):
    ids = uncased_tok.tokenize(_utf8(["é" * 200, "é" * 201, "ab" * 100, "ab" * 100 + "a"]))
    ids = ids.to_list()
    assert ids[0] != [uncased_tok.unk_id] and len(ids[0]) > 1  # 400 bytes, 200 chars: split
    assert ids[1] == [uncased_tok.unk_id]
    assert ids[2] != [uncased_tok.unk_id] and ids[3] == [uncased_tok.unk_id]


def test_invalid_utf8_is_decoded_with_errors_ignored(graph_tok):
    full = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=graph_tok.do_lower_case)
    raw = [b"hello \xff\xfeworld caf\xc3\xa9", b"\xe2\x28\xa1x", b"\xed\xa0\x80ab\xc0\xaf",
           b"\xf4\x90\x80\x80Q \xf0\x9f\x98", b"\xef\xbf\xbd"]
    got = graph_tok.tokenize(raw).to_list()
    assert got == [full.convert_tokens_to_ids(full.tokenize(r)) for r in raw]


def test_output_types_and_empty_batch(uncased_tok):
    ids = uncased_tok.tokenize(tf.constant([], tf.string))
    assert ids.shape.rank == 2 and ids.nrows() == 0 and ids.dtype == tf.int64
    basic = uncased_tok.basic_tokenize(["Hello, World!"])
    assert basic.to_list() == [[b"hello", b",", b"world", b"!"]]


def test_inside_tf_data(uncased_tok):
    full = tokenization.FullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    texts = [r["text"] for r in _records(True)[:40]]
    dataset = tf.data.Dataset.from_tensor_slices(_utf8(texts)).batch(7).map(uncased_tok.tokenize)
    got = [row for batch in dataset for row in batch.to_list()]
    assert got == [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]


def test_get_config_rebuilds_the_same_tokenizer(uncased_tok):
    config = uncased_tok.get_config()
    assert config == {"vocab_file": paths.GOLDEN_VOCAB, "do_lower_case": True,
                      "max_input_chars_per_word": 200}
    clone = graph_tokenization.BertGraphTokenizer(**config)
    texts = _utf8(["Unwänted, running ΟΔΟΣ"])
    assert clone.tokenize(texts).to_list() == uncased_tok.tokenize(texts).to_list()


def test_missing_vocab_names_the_file(tmp_path):
    with pytest.raises(tokenization.VocabError, match="nope.txt"):
        graph_tokenization.BertGraphTokenizer(str(tmp_path / "nope.txt"))


def test_duplicate_vocab_lines_fall_back_to_table_wordpiece(tmp_path, caplog):
    # "##ing" appears twice: load_vocab keeps the last line (id 9), which
    # FastWordpieceTokenizer (ids = list positions) cannot express.
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "run", "##ing", "##s", "a", "##b", "##ing", "!"]
    path = tmp_path / "dup_vocab.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger=graph_tokenization.__name__):
        tok = graph_tokenization.BertGraphTokenizer(str(path), do_lower_case=True)
    assert tok.wordpiece_kind == "table"
    assert any("dup_vocab.txt" in r.getMessage() for r in caplog.records)
    full = tokenization.FullTokenizer(str(path), do_lower_case=True)
    texts = ["Runing runs ab! abb runx", "RUNNING a"]
    expected = [full.convert_tokens_to_ids(full.tokenize(t)) for t in texts]
    assert expected[0][:2] == [4, 9]
    assert tok.tokenize(_utf8(texts)).to_list() == expected


# --------------------------------------------------------------------------
# Packing and truncation.
# --------------------------------------------------------------------------


def _reference_pack(ids_a, ids_b, max_seq_length, cls_id, sep_id):
    """The host features' rule (``pair_tokens``, the original's ``convert_single_example``):
    an empty b is a single sentence."""
    ids_a = list(ids_a)
    ids_b = list(ids_b) if ids_b else None
    if ids_b:
        _truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
    else:
        ids_a = ids_a[:max_seq_length - 2]
    input_ids = [cls_id] + ids_a + [sep_id]
    segment_ids = [0] * len(input_ids)
    if ids_b:
        input_ids += ids_b + [sep_id]
        segment_ids += [1] * (len(ids_b) + 1)
    mask = [1] * len(input_ids)
    pad = max_seq_length - len(input_ids)
    return input_ids + [0] * pad, mask + [0] * pad, segment_ids + [0] * pad


def test_truncated_pair_lengths_equal_pop_loop():
    grid = [(a, b, m) for a in range(14) for b in range(14) for m in range(12)]
    len_a, len_b, max_len = (tf.constant(x, tf.int32) for x in zip(*grid))
    new_a, new_b = graph_tokenization.truncated_pair_lengths(len_a, len_b, max_len)
    expected = []
    for a, b, m in grid:
        ta, tb = list(range(a)), list(range(b))
        _truncate_seq_pair(ta, tb, m)
        expected.append((len(ta), len(tb)))
    assert list(zip(new_a.numpy().tolist(), new_b.numpy().tolist())) == expected


@pytest.mark.parametrize("max_seq_length", [3, 5, 8, 16])
def test_pack_inputs_matches_reference(max_seq_length):
    rng = np.random.RandomState(max_seq_length)
    rows_a = [list(rng.randint(1000, 2000, size=rng.randint(0, 12))) for _ in range(9)]
    rows_b = [list(rng.randint(1000, 2000, size=rng.randint(0, 12))) for _ in range(9)]
    ids_a = tf.ragged.constant(rows_a, dtype=tf.int64, row_splits_dtype=tf.int64)
    ids_b = tf.ragged.constant(rows_b, dtype=tf.int64, row_splits_dtype=tf.int64)
    for b_rows, b_tensor in ((None, None), (rows_b, ids_b)):
        if b_rows is None and max_seq_length < 2:
            continue
        packed = graph_tokenization.pack_inputs(ids_a, b_tensor, max_seq_length, 101, 102)
        for key in ("input_ids", "input_mask", "segment_ids"):
            assert packed[key].dtype == tf.int32 and packed[key].shape == (9, max_seq_length)
        for i in range(9):
            want = _reference_pack(rows_a[i], None if b_rows is None else b_rows[i],
                                   max_seq_length, 101, 102)
            got = tuple(packed[k][i].numpy().tolist()
                        for k in ("input_ids", "input_mask", "segment_ids"))
            assert got == want


def test_pack_rejects_too_short_length():
    ids = tf.ragged.constant([[5, 6]], dtype=tf.int64)
    with pytest.raises(ValueError, match="max_seq_length=2"):
        graph_tokenization.pack_inputs(ids, ids, 2, 101, 102)
    with pytest.raises(ValueError, match="max_seq_length=1"):
        graph_tokenization.pack_inputs(ids, None, 1, 101, 102)


def test_tokenize_and_pack_matches_host_path(uncased_tok):
    fast = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    texts_a = ["The quick brown fox jumps over the lazy dog.", "Short one", "ΟΔΟΣ İ 中文"]
    texts_b = ["A second segment, longer than the first one by far, really.", "b", ""]
    packed = uncased_tok.tokenize_and_pack(_utf8(texts_a), _utf8(texts_b), max_seq_length=16)
    cls_id, sep_id = fast.vocab[special_tokens.CLS], fast.vocab[special_tokens.SEP]
    for i, (a, b) in enumerate(zip(texts_a, texts_b)):
        want = _reference_pack(fast.tokenize_to_ids(a), fast.tokenize_to_ids(b), 16, cls_id, sep_id)
        got = tuple(packed[k][i].numpy().tolist() for k in ("input_ids", "input_mask", "segment_ids"))
        assert got == want


# --------------------------------------------------------------------------
# SavedModel round trip in a fresh process.
# --------------------------------------------------------------------------

_LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the ops the SavedModel uses
loaded = tf.saved_model.load(sys.argv[1])
a = tf.constant(json.loads(sys.argv[2]))
b = tf.constant(json.loads(sys.argv[3]))
packed = loaded.signatures["serving_default"](text_a=a, text_b=b)
print(json.dumps({"packed": {k: v.numpy().tolist() for k, v in packed.items()},
                  "unicode_version": loaded.tokenizer.unicode_version.numpy().decode()}))
"""


class _Serving(tf.Module):
    def __init__(self, tokenizer, max_seq_length):
        super().__init__()
        self.tokenizer = tokenizer
        self._max_seq_length = max_seq_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                  tf.TensorSpec([None], tf.string, name="text_b")])
    def serve(self, text_a, text_b):
        return self.tokenizer.tokenize_and_pack(text_a, text_b, self._max_seq_length)


def test_saved_model_round_trip_in_fresh_process(uncased_tok, tmp_path):
    module = _Serving(uncased_tok, 24)
    export_dir = str(tmp_path / "tokenizer_savedmodel")
    tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
    texts_a = ["ΟΔΟΣ İstanbul, 中文 Unwänted running!", "a" * 201, ""]
    texts_b = ["Second\u00a0segment \U0001D16D\U0001D165 ok", "b", "x y z"]
    expected = module.serve(tf.constant(texts_a), tf.constant(texts_b))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)  # the SavedModel must not need the project's code
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, export_dir, json.dumps(texts_a), json.dumps(texts_b)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["packed"] == {k: v.numpy().tolist() for k, v in expected.items()}
    fast = tokenization.FastFullTokenizer(paths.GOLDEN_VOCAB, do_lower_case=True)
    want = _reference_pack(fast.tokenize_to_ids(texts_a[0]), fast.tokenize_to_ids(texts_b[0]), 24,
                           fast.vocab[special_tokens.CLS], fast.vocab[special_tokens.SEP])
    assert [loaded["packed"][k][0] for k in ("input_ids", "input_mask", "segment_ids")] == list(want)
    assert loaded["unicode_version"] == tokenization.unicodedata.unidata_version


def test_code_point_tables_follow_the_faithful_rules():
    lower = graph_tokenization.char_tables(True)
    cased = graph_tokenization.char_tables(False)
    cps = [0xFADF, 0x2028, 0x00AD, 0x0301, 0x1D16D, 0x00C9, 0x0130, 0x03A3, 0x0345, 0x0041, 0xAC00]
    flags = {cp: int(v) for cp, v in zip(cps, lower.lookup(cps))}
    g = graph_tokenization
    assert flags[0xFADF] & g.CJK  # unassigned, but inside the original's CJK ranges
    assert flags[0x2028] & g.SPACE and not flags[0x2028] & g.DROP  # str.split splits on it
    assert flags[0x00AD] & g.DROP  # Cf
    assert flags[0x0301] & g.MN and (flags[0x0301] >> 8) & 0xFF == 230
    assert not flags[0x1D16D] & g.MN and (flags[0x1D16D] >> 8) & 0xFF == 226  # Mc, reordered
    assert flags[0x03A3] & g.CASED and flags[0x0345] & g.CASE_IGNORABLE

    def mapping(tables, cp):
        index = int(tables.lookup([cp])[0]) >> 16
        if index == 0:
            return chr(cp)
        start, end = tables.map_offsets[index], tables.map_offsets[index + 1]
        return "".join(map(chr, tables.map_values[start:end]))

    assert mapping(lower, 0x00C9) == "e\u0301"  # lower, then NFD (the mark is dropped later)
    assert mapping(lower, 0x0130) == "i\u0307"
    assert mapping(lower, 0xAC00) == "\u1100\u1161"  # Hangul syllable -> jamo
    assert mapping(lower, 0x0041) == "a" and mapping(cased, 0x0041) == "A"
    assert cased.map_values.size == 0
