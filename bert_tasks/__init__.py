"""A task's job from examples to results: the ``data`` side (readers, features, records,
metrics, output files) joined to the ``modeling`` side (task model, ``finetune``,
``predict``), as Model Garden's "tasks" level. ``modeling`` and ``data`` never import it; the
command-line tools (``bert_cli``) define their flags and make one call into them.

* ``classifier``: GLUE / XNLI / TSV classification and regression;
* ``squad``: SQuAD v1.1 / v2.0 span prediction and the official scores;
* ``swag``: SWAG multiple choice;
* ``ner``: CoNLL-2003 named entities;
* ``pretrained``: ``from_pretrained(folder)`` -> config, encoder with weights, tokenizer (a
  Google release or Hugging Face folder);
* ``exports``: every export: the tasks' serving SavedModels and TF Serving's versioned
  layout, the TF Hub-style encoder and preprocessor SavedModels, the Hugging Face folder,
  checkpoint conversion;
* ``task``, ``driver``: what a fine-tuning task is, and the one driver that runs any task
  (train, evaluate, predict, export), the four above included.
"""

__all__ = ["Pretrained", "from_pretrained"]


def __getattr__(name: str):
    # Imported on first use: the tools define their flags from bert_tasks.task without loading
    # TensorFlow (``--help`` stays fast), and ``bert_tasks.pretrained`` loads it.
    if name in __all__:
        from bert_tasks import pretrained

        return getattr(pretrained, name)
    raise AttributeError("module 'bert_tasks' has no attribute %r" % name)
