"""A task's job from examples to results: the ``data`` side (readers, features, records,
metrics, output files) joined to the ``modeling`` side (task model, ``finetune``,
``predict``), as Model Garden's "tasks" level. ``modeling`` and ``data`` never import it; the
command-line tools (``bert_cli``) only map their flags onto these calls.

* ``classifier``: GLUE / XNLI / TSV classification and regression;
* ``squad``: SQuAD v1.1 / v2.0 span prediction and the official scores;
* ``swag``: SWAG multiple choice;
* ``ner``: CoNLL-2003 named entities;
* ``pretrained``: ``from_pretrained(folder)`` -> config, encoder with weights, tokenizer (a
  Google release or Hugging Face folder);
* ``hub``: TF Hub-style encoder and preprocessor SavedModels.
"""

from bert_tasks.pretrained import Pretrained, from_pretrained

__all__ = ["Pretrained", "from_pretrained"]
