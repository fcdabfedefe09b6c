"""``python run_squad.py --flags``: the original's command.

The tool is ``bert_cli/run_squad.py`` (installed as the ``bert-run-squad`` command).
"""

from bert_cli.run_squad import entry

if __name__ == "__main__":
    entry()
