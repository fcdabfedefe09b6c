"""from_pretrained: a Hugging Face folder and the Google release folder convert_checkpoint writes
from it give the same model, tokenizer and casing; folders that are not models fail in one line."""

import logging
import os
import shutil

import numpy as np
import pytest

from bert_tasks import from_pretrained
from bert_tasks.exports.convert import convert
from bert_tasks.pretrained import folder_casing, resolve_casing
from data.tokenization import FullTokenizer
from modeling.checkpoints import CheckpointError
from tests import paths

MINILM = os.path.join(paths.DATA, "minilm")
TEXT = ["The quick brown fox jumps over the lazy dog.", "Héllo, WORLD! 東京"]


def _inputs(tokenizer):
    rows = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(t) + ["[SEP]"])
            for t in TEXT]
    width = max(len(r) for r in rows)
    ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    return {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
            "segment_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def google_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("google") / "minilm_L-6"
    folder.mkdir()
    convert(MINILM, str(folder / "bert_model.ckpt"))
    return str(folder)


def test_hf_and_google_folders_give_the_same_model(google_folder):
    config_hf, encoder_hf, tokenizer_hf = from_pretrained(MINILM)
    config_g, encoder_g, tokenizer_g = from_pretrained(google_folder)
    assert config_hf == config_g and config_hf.hidden_act == "gelu_exact"  # HF's erf GELU kept
    inputs = _inputs(tokenizer_hf)
    assert all(np.array_equal(a, b) for a, b in zip(_inputs(tokenizer_g).values(), inputs.values()))
    reference = FullTokenizer(os.path.join(MINILM, "vocab.txt"), do_lower_case=True)
    assert tokenizer_hf.tokenize(TEXT[1]) == reference.tokenize(TEXT[1])
    out_hf, out_g = encoder_hf(inputs), encoder_g(inputs)
    for key in ("sequence_output", "pooled_output"):
        assert np.array_equal(np.asarray(out_hf[key]), np.asarray(out_g[key])), key
    # A checkpoint prefix inside the folder is the folder.
    config_p, _, _ = from_pretrained(os.path.join(google_folder, "bert_model.ckpt"))
    assert config_p == config_g


def test_casing_from_the_folder_and_the_original_check_as_a_warning(tmp_path, caplog):
    assert folder_casing(MINILM) is True  # tokenizer_config.json
    google = tmp_path / "cased_L-12_H-768_A-12"
    google.mkdir()
    assert folder_casing(str(google)) is False  # Google's release name, as the original checks
    assert folder_casing(str(tmp_path)) is None and resolve_casing(str(tmp_path)) is True
    with caplog.at_level(logging.WARNING):
        assert resolve_casing(MINILM, False) is False
    assert any("says the model is lower-cased" in r.getMessage() for r in caplog.records)
    _, _, tokenizer = from_pretrained(MINILM, do_lower_case=False)
    assert tokenizer.tokenize("Hello") != ["hello"]


def test_not_a_model_folder(tmp_path, google_folder):
    with pytest.raises(CheckpointError, match="no such model folder"):
        from_pretrained(str(tmp_path / "absent"))
    with pytest.raises(CheckpointError, match="neither a Google release folder"):
        from_pretrained(str(tmp_path))
    no_vocab = tmp_path / "no_vocab"
    shutil.copytree(google_folder, no_vocab)
    os.remove(no_vocab / "vocab.txt")
    with pytest.raises(CheckpointError, match="has no vocab.txt"):
        from_pretrained(str(no_vocab))
