"""``python create_pretraining_data.py --flags``: the original's command.

The tool is ``bert_cli/create_pretraining_data.py`` (installed as the ``bert-create-pretraining-data`` command).
"""

from bert_cli.create_pretraining_data import entry

if __name__ == "__main__":
    entry()
