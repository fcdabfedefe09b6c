"""``python build_vocab.py --flags``: learns a WordPiece vocab file from text.

The tool is ``bert_cli/build_vocab.py`` (installed as the ``bert-build-vocab`` command).
"""

from bert_cli.build_vocab import entry

if __name__ == "__main__":
    entry()
