"""BERT fine-tuning runner for SWAG (multiple choice over 4 endings, BERT paper §4.4).

Flags in run_classifier's style: ``--data_dir`` (``train.csv``/``val.csv``/``test.csv`` in the
swagaf layout, or ``train.jsonl``/``val.jsonl``/``test.jsonl``) or explicit ``--train_file``,
``--eval_file``, ``--predict_file``; ``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--init_checkpoint``, ``--do_lower_case``, ``--max_seq_length=128``,
``--do_train``/``--do_eval``/``--do_predict``, batch sizes 16/8/8, ``--learning_rate=2e-5``,
``--num_train_epochs=3.0``, ``--warmup_proportion=0.1``, ``--save_checkpoints_steps``,
the shared ``--strategy``/``--use_tpu``/TPU flags, ``--mixed_precision``, ``--use_xla``
(``bert_cli/flags.py``), ``--length_aware_batching``, ``--random_seed``.

Each example is 4 sequences ``[CLS] sent1 [SEP] sent2 endingN [SEP]`` (``data/swag.py``); the
head scores each pooled output with one learned vector and takes a softmax over the 4
(``modeling/heads/multiple_choice.py``). Writes ``train.tf_record``/``eval.tf_record``/
``predict.tf_record``, checkpoints ``model.ckpt-<step>`` (with the optimizer state: a rerun
resumes), TensorBoard summaries in ``train/``, ``eval_results.txt``
(``eval_accuracy``, ``eval_loss``, ``global_step``, ``loss``) and ``test_results.tsv`` (4
probabilities per example) into ``--output_dir``. Bad input: one line on stderr, exit code 1.

The job is ``bert_tasks.swag.SwagTask`` run by the one fine-tuning driver
(``bert_tasks.driver``); this module holds the task's own flags.
"""

from __future__ import annotations

from absl import flags

from bert_cli import finetuning
from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "run_swag.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)
    define("string", "data_dir", None, "Folder with train/val/test .csv (swagaf) or .jsonl.")
    define("string", "train_file", None, "Training file (default: <data_dir>/train.csv|jsonl).")
    define("string", "eval_file", None, "Labelled eval file (default: <data_dir>/val.csv|jsonl).")
    define("string", "predict_file", None, "File to predict (default: "
           "<data_dir>/test.csv|jsonl).")
    finetuning.define_flags(
        flag_values, defaults={"train_batch_size": 16, "learning_rate": 2e-5},
        omit=("export_dir",), helps={
            "max_seq_length": "Maximum length of each of the 4 sequences.",
            "do_eval": "Whether to run eval on the labelled eval file.",
            "do_predict": "Whether to write test_results.tsv for predict_file.",
            "train_batch_size": "Total batch size for training (examples).",
            "length_aware_batching": "Sort eval/predict examples by length and cut every "
                                     "batch to its longest sequence (off on TPU)."})


def run(fv: flags.FlagValues) -> None:
    """Runs ``SwagTask`` on the flags (``finetuning.run``).

    Args:
        fv: the parsed flag values.
    """
    from bert_tasks.swag import SwagTask

    finetuning.run(TOOL, SwagTask(fv.data_dir, fv.train_file, fv.eval_file, fv.predict_file), fv)


# absl's main(argv), and the console command / ``python run_swag.py``
main, entry = runner.entry_points(TOOL, define_flags, run, required=REQUIRED)
