"""``python run_pretraining.py --flags``: the original's command.

The tool is ``bert_cli/run_pretraining.py`` (installed as the ``bert-run-pretraining`` command).
"""

from bert_cli.run_pretraining import entry

if __name__ == "__main__":
    entry()
