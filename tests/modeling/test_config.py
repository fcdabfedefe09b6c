"""BertConfig: Google's keys and defaults, HF config.json mapping, clear errors."""

import json

import pytest

from modeling.config import BertConfig, ConfigError
from tests import paths
from tests.modeling.golden_utils import golden_dir


def test_golden_config_round_trip():
    path = golden_dir("tiny") + "/bert_config.json"
    config = BertConfig.from_json_file(path)
    assert config.hidden_size == 64 and config.num_hidden_layers == 2
    assert config.hidden_act == "gelu" and config.type_vocab_size == 2
    with open(path) as f:
        assert json.loads(config.to_json_string()) == json.load(f)
    assert BertConfig.from_dict(json.loads(config.to_json_string())) == config


def test_original_class_defaults():
    config = BertConfig.from_dict({"vocab_size": 100})
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.max_position_embeddings,
            config.type_vocab_size, config.initializer_range) == (768, 12, 12, 3072, 512, 16, 0.02)
    assert config.hidden_act == "gelu" and config.layer_norm_eps == 1e-12


def test_hf_config_maps_gelu_to_exact():
    config = BertConfig.from_json_file(paths.DATA + "/minilm/config.json")
    assert config.hidden_act == "gelu_exact"
    assert (config.hidden_size, config.num_hidden_layers, config.type_vocab_size) == (384, 6, 2)
    google = BertConfig.from_json_file(golden_dir("minilm") + "/bert_config.json")
    assert google.hidden_act == "gelu"
    assert google.replace(hidden_act="gelu_exact") == config


@pytest.mark.parametrize("content, fragment", [
    ({"hidden_size": 64}, "'vocab_size' is missing"),
    ({"vocab_size": "big"}, "'vocab_size' must be int"),
    ({"vocab_size": 10, "hidden_size": 30, "num_attention_heads": 4}, "not a multiple"),
    ({"vocab_size": 10, "hidden_act": "swishy"}, "unsupported activation"),
    ({"vocab_size": 10, "hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
])
def test_bad_config_names_file_and_key(tmp_path, content, fragment):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ConfigError) as info:
        BertConfig.from_json_file(str(path))
    message = str(info.value)
    assert str(path) in message and fragment in message and "\n" not in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        BertConfig.from_json_file(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"vocab_size": 3,\n oops}')
    with pytest.raises(ConfigError, match="line 2: invalid JSON"):
        BertConfig.from_json_file(str(bad))
