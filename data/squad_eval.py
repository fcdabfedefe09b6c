"""``python -m data.squad_eval DATASET.json PREDICTIONS.json [--na-prob-file F]``: the official
SQuAD scores, under the command name of earlier versions. The code is ``data.squad.evaluate``."""

import sys

from data.squad.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
