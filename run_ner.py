"""``python run_ner.py --flags``: named-entity recognition (the original has no NER script).

The tool is ``bert_cli/run_ner.py`` (installed as the ``bert-run-ner`` command).
"""

from bert_cli.run_ner import entry

if __name__ == "__main__":
    entry()
