"""``python run_classifier.py --flags``: the original's command.

The tool is ``bert_cli/run_classifier.py`` (installed as the ``bert-run-classifier`` command).
"""

from bert_cli.run_classifier import entry

if __name__ == "__main__":
    entry()
