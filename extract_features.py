"""``python extract_features.py --flags``: the original's command.

The tool is ``bert_cli/extract_features.py`` (installed as the ``bert-extract-features`` command).
"""

from bert_cli.extract_features import entry

if __name__ == "__main__":
    entry()
