"""``python convert_checkpoint.py --flags``: the original's command.

The tool is ``bert_cli/convert_checkpoint.py`` (installed as the ``bert-convert-checkpoint`` command).
"""

from bert_cli.convert_checkpoint import entry

if __name__ == "__main__":
    entry()
