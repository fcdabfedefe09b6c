"""``python run_swag.py --flags``: the original's command.

The tool is ``bert_cli/run_swag.py`` (installed as the ``bert-run-swag`` command).
"""

from bert_cli.run_swag import entry

if __name__ == "__main__":
    entry()
