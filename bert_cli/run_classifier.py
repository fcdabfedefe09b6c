"""BERT fine-tuning runner for sentence (pair) classification: GLUE, XNLI and your own TSV.

The original ``run_classifier.py``'s flags (``--data_dir``, ``--bert_config_file``,
``--task_name``, ``--vocab_file``, ``--output_dir``, ``--init_checkpoint``, ``--do_lower_case``,
``--max_seq_length=128``, ``--do_train``/``--do_eval``/``--do_predict``, batch sizes 32/8/8,
``--learning_rate=5e-5``, ``--num_train_epochs=3.0``, ``--warmup_proportion=0.1``,
``--save_checkpoints_steps``, ``--iterations_per_loop``, TPU flags) plus ``--xnli_language``,
the project's shared ``--strategy`` / ``--mixed_precision`` / ``--use_xla`` flags
(``modeling/training/strategies.py``), ``--length_aware_batching``, ``--export_dir``,
``--fast_tokenizer`` and ``--random_seed``.

Writes into ``--output_dir``: ``train.tf_record``/``eval.tf_record``/``predict.tf_record`` (one
record per example, in processor order, padded to ``--max_seq_length``), checkpoints
``model.ckpt-<step>`` (weights, optimizer state, data position: a rerun into the same folder
resumes, as the original Estimator's ``model_dir``), TensorBoard summaries in ``train/``,
``eval_results.txt`` (``key = value``), ``test_results.tsv`` (one line
of class probabilities per test example; the prediction for STS-B) and a GLUE submission file
``<TASK>.tsv`` (``index<TAB>prediction``). ``--export_dir`` is a TF Serving model base path:
each run adds the next version ``<export_dir>/1``, ``2``, ...
(``bert_tasks/exports/classifier.py``; a folder holding anything else is refused before any
work). Bad input: one line on stderr, exit code 1, nothing half-written.

The job is ``bert_tasks.classifier.ClassifierTask`` run by the one fine-tuning driver
(``bert_tasks.driver``); this module holds the task's own flags.
"""

from __future__ import annotations

from absl import flags

from bert_cli import finetuning
from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "run_classifier.py"
REQUIRED = ("task_name", "vocab_file", "bert_config_file", "output_dir")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    from data.glue import processors

    define = cli_flags.definer(flag_values)
    define("string", "data_dir", None, "The input data dir. Should contain the .tsv files "
           "(or other data files) for the task.")
    define("string", "task_name", None, "The name of the task to train: one of %s."
           % ", ".join(sorted(processors.PROCESSORS)))
    define("string", "xnli_language", "zh", "XNLI language (the original hard-codes zh).")
    define("string", "export_hf_dir", None, "Write a Hugging Face folder here "
           "(BertForSequenceClassification with the task's labels, vocab, casing).")
    finetuning.define_flags(flag_values, helps={
        "export_dir": "TF Serving model base path, e.g. models/mrpc: writes the SavedModel "
                      "(ids and raw-text signatures) as its next version <export_dir>/1, 2, ... "
                      "(the folder may hold only version folders)."})


def run(fv: flags.FlagValues) -> None:
    """Runs ``ClassifierTask`` on the flags (``finetuning.run``).

    Args:
        fv: the parsed flag values.
    """
    from bert_tasks.classifier import ClassifierTask

    finetuning.run(TOOL, ClassifierTask(fv.task_name, fv.data_dir, fv.xnli_language,
                                        fv.export_hf_dir), fv)


# absl's main(argv), and the console command / ``python run_classifier.py``
main, entry = runner.entry_points(TOOL, define_flags, run, required=REQUIRED)
