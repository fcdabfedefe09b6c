"""Run BERT on SQuAD 1.1 and SQuAD 2.0 (the original ``run_squad.py``, TF2 / Keras 3).

Flags are the original's (``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--train_file``, ``--predict_file``, ``--init_checkpoint``, ``--do_lower_case``,
``--max_seq_length=384``, ``--doc_stride=128``, ``--max_query_length=64``, ``--do_train``,
``--do_predict``, batch sizes, ``--learning_rate``, ``--num_train_epochs``,
``--warmup_proportion``, ``--save_checkpoints_steps``, ``--n_best_size=20``,
``--max_answer_length=30``, ``--verbose_logging``, ``--version_2_with_negative``,
``--null_score_diff_threshold=0.0``, TPU flags) plus the shared ``--strategy``,
``--mixed_precision`` (bf16|fp16) and ``--use_xla`` (``bert_cli/flags.py``), ``--export_dir``,
``--length_aware_batching``, ``--fast_tokenizer`` and ``--random_seed``.

``--do_train`` writes ``train.tf_record`` and fine-tunes on the one trainer: checkpoints
``model.ckpt-<step>`` in ``--output_dir`` (weights, optimizer state, data position: a rerun
resumes, as the original Estimator's ``model_dir``) and TensorBoard summaries in ``train/``. ``--do_predict`` writes ``eval.tf_record``,
``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and, when the
predict file has answers, ``eval_results.json`` with the official scores (v2.0: with the null
odds, so the best threshold on the file is reported too; v1.1 scoring needs an answer for every
question, else a warning and predictions only). These files are written together: all renamed
into place only when every one is written (a failure leaves the previous ones). ``--export_dir`` is a TF Serving
model base path: each run adds the next version ``<export_dir>/1``, ``2``, ..., a SavedModel
whose ``serving_default`` signature maps ``question``/``context`` strings to ``answer_text``,
``answer_start``/``answer_end`` (character span) and ``score`` (see
``bert_tasks/exports/squad.py``).

Bad input is one line on stderr and exit code 1; outputs are written atomically.

The job is ``bert_tasks.squad.SquadTask`` run by the one fine-tuning driver
(``bert_tasks.driver``); this module holds the task's own flags.
"""

from __future__ import annotations

from absl import flags

from bert_cli import finetuning
from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "run_squad.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)
    define("string", "train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
    define("string", "predict_file", None, "SQuAD json for predictions. E.g., dev-v1.1.json")
    define("integer", "doc_stride", 128, "Stride between the windows of a long document.")
    define("integer", "max_query_length", 64, "Questions longer than this are truncated.")
    define("integer", "n_best_size", 20, "The number of n-best predictions in "
           "nbest_predictions.json.")
    define("integer", "max_answer_length", 30, "The maximum length of an answer, in tokens.")
    define("bool", "verbose_logging", False, "Print all data-processing warnings.")
    define("bool", "version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.")
    define("float", "null_score_diff_threshold", 0.0,
           "If null_score - best_non_null is greater than the threshold predict null.")
    finetuning.define_flags(
        flag_values, defaults={"max_seq_length": 384}, omit=("do_eval", "eval_batch_size"),
        helps={
            "max_seq_length": "Maximum total input length after WordPiece.",
            "do_predict": "Whether to run eval on the dev set.",
            "predict_batch_size": "Total batch size for predictions.",
            "export_dir": "TF Serving model base path, e.g. models/squad: writes a raw-text "
                          "SavedModel (question, context -> answer text and span) as its next "
                          "version <export_dir>/1, 2, ... (the folder may hold only version "
                          "folders).",
            "length_aware_batching": "Run each batch at its longest window (predict: windows "
                                     "sorted by length first). Padding positions are then not "
                                     "computed: they leave the training loss's softmax and the "
                                     "n-best search. --nolength_aware_batching: the original's "
                                     "padded path exactly. Off on TPU.",
            "random_seed": "Seed of the training-example shuffle and the TF ops."})


def run(fv: flags.FlagValues) -> None:
    """Runs ``SquadTask`` on the flags (``finetuning.run``).

    Args:
        fv: the parsed flag values.
    """
    from bert_tasks.squad import SquadTask

    finetuning.run(TOOL, SquadTask(
        fv.train_file, fv.predict_file, doc_stride=fv.doc_stride,
        max_query_length=fv.max_query_length, n_best_size=fv.n_best_size,
        max_answer_length=fv.max_answer_length,
        version_2_with_negative=fv.version_2_with_negative,
        null_score_diff_threshold=fv.null_score_diff_threshold,
        verbose_logging=fv.verbose_logging), fv)


# absl's main(argv), and the console command / ``python run_squad.py``
main, entry = runner.entry_points(TOOL, define_flags, run, required=REQUIRED)
