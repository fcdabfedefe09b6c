"""The fine-tuning example of docs/porting.md ("Porting from google-research/bert") runs as written.

The code block holding ``MARKER`` is split at ``# end of settings``: the settings part runs first,
then only its paths and sizes are replaced (the tiny golden checkpoint, a few MRPC examples) and
the rest of the block runs unchanged. The learning rate is raised too: at the example's 2e-5 a
tiny model moves its loss by ~1e-3 in a few steps, less than the dropout noise.
"""

import os
import re

import keras
import numpy as np

from tests import paths

MARKER = "# readme-example: fine-tune a classifier"
SETTINGS_END = "# end of settings\n"
TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
PAGE = os.path.join("docs", "porting.md")


def readme_example() -> str:
    with open(os.path.join(paths.ROOT, PAGE), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    found = [b for b in blocks if b.startswith(MARKER)]
    assert len(found) == 1, "%s: expected one python block starting with %r" % (PAGE, MARKER)
    return found[0]


def test_readme_fine_tuning_example_runs_and_the_loss_falls():
    settings, rest = readme_example().split(SETTINGS_END)
    namespace = {"__name__": "readme_example"}
    exec(compile(settings, PAGE + ":settings", "exec"), namespace)  # noqa: S102
    overrides = {
        "VOCAB_FILE": paths.GOLDEN_VOCAB,
        "BERT_CONFIG_FILE": os.path.join(TINY, "bert_config.json"),
        "INIT_CHECKPOINT": os.path.join(TINY, "bert_model.ckpt"),
        "DATA_DIR": os.path.join(paths.DATA, "glue", "MRPC"),
        "MAX_EXAMPLES": 8,
        "MAX_SEQ_LENGTH": 32,
        "BATCH_SIZE": 8,
        "NUM_EPOCHS": 10,
        "LEARNING_RATE": 1e-3,
    }
    missing = sorted(set(overrides) - set(namespace))
    assert not missing, "the example no longer defines %s" % missing
    namespace.update(overrides)
    keras.utils.set_random_seed(0)
    exec(compile(rest, PAGE + ":example", "exec"), namespace)  # noqa: S102

    assert namespace["train_x"]["input_ids"].shape == (8, 32)
    losses = namespace["history"].history["loss"]
    assert len(losses) == 10 and all(np.isfinite(losses))
    # 8 examples seen 10 times: the training loss must fall clearly below its first epoch
    assert losses[-1] < losses[0] and min(losses[-3:]) < losses[0] - 0.01, losses
    probabilities = namespace["probabilities"]
    assert probabilities.shape == (8, 2)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
