"""Run masked LM / next sentence pre-training for BERT (the original run_pretraining.py).

Example (the tiny demo model on records written by create_pretraining_data.py)::

    python run_pretraining.py --bert_config_file=bert_config.json \\
        --input_file=records/*.tfrecord --output_dir=pretrain_out \\
        --do_train --do_eval --train_batch_size=32 --max_seq_length=128 \\
        --max_predictions_per_seq=20 --num_train_steps=10000 --num_warmup_steps=1000 \\
        --learning_rate=1e-4

The original's flags keep their names and defaults; this port adds the training flags every
tool shares (``--strategy``, ``--mixed_precision``, ``--use_xla``, ``--xla_optimizer``,
``--xla_kernels``, ``--keep_checkpoint_max``: ``bert_cli/flags.py``) and its own
``--num_accumulation_steps``, ``--optimizer``, ``--corrected_lr_schedule``,
``--gradient_reduction``, ``--deterministic``, ``--random_seed`` and ``--num_cpu_devices``.
Semantics:

* ``--train_batch_size`` is the global batch of one optimizer update (split over replicas, and
  over ``--num_accumulation_steps`` micro-batches per replica).
* The optimizer is the original's (``modeling.training.optimizers``): clip by global norm 1.0,
  AdamWeightDecay, learning rate one step ahead as the original (``--corrected_lr_schedule``
  for schedule(t) at update t), or LAMB (``--optimizer=lamb``).
* Gradient reduction over replicas: ``mean_then_clip`` (the default off TPU: identical to one
  replica at the same global batch) or ``clip_then_sum`` (the default on TPU: what the
  original's CrossShardOptimizer does: each core clips the gradient of its own batch loss, then
  the clipped gradients are summed).
* Checkpoints every ``--save_checkpoints_steps`` in ``--output_dir`` (``ckpt-N``: weights,
  optimizer slots, global step, data position); a restarted run resumes from the latest. At the
  end of training the weights are also exported under the original names to
  ``output_dir/export/bert_model.ckpt`` (with ``bert_config.json``) for the fine-tuning scripts.
* ``--do_eval`` writes ``eval_results.txt`` (``key = value``, sorted keys): ``global_step``,
  ``loss``, ``masked_lm_accuracy``, ``masked_lm_loss``, ``next_sentence_accuracy``,
  ``next_sentence_loss`` over ``--max_eval_steps`` batches of ``--eval_batch_size`` read in file
  order (repeating), as the original's metric_fn. Without a checkpoint in ``--output_dir`` the
  ``--init_checkpoint`` weights are evaluated (global_step 0).
* ``--deterministic``: records in file order, no shuffling (batch t = records t*B..t*B+B-1),
  fixed seeds, TensorFlow's op determinism (``tf.config.experimental.enable_op_determinism``,
  for the rest of the process) and the optimizer update op by op: a run reproduces the
  original's train steps from the same checkpoint. Otherwise (``--xla_kernels``,
  ``--xla_optimizer``, default) one replica runs the fused training kernels and update: faster,
  with float rounding within ~1e-6 relative of the original's and other dropout masks.
* ``--init_checkpoint``: a TF1 checkpoint with Google's names (prefix or folder), a Hugging
  Face folder / .safetensors, a .keras / .weights.h5 file, or a ``ckpt-N`` of this script.

Bad input (no file matched, records whose lengths differ from the flags, a config/checkpoint
mismatch, an unwritable output dir, bad flag values) stops with one line on stderr and exit
status 1 before any training starts. A record file damaged part-way (truncated, corrupted) is
found only when it is read: the run stops with one line naming the file (no checkpoint is
written past the last complete one).

The job is ``bert_tasks.pretraining.pretrain``; this module holds its flags.
"""

from __future__ import annotations

from typing import Dict, Optional

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "run_pretraining.py"
REQUIRED = ()  # checked in run: one line naming the flag
# Kept equal to modeling.training.optimizers' (tested): listing them imports no TensorFlow.
OPTIMIZERS = ("adamw", "lamb")
GRADIENT_REDUCTIONS = ("mean_then_clip", "clip_then_sum")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's (see the module docstring).

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)

    define("string", "bert_config_file", None, "The config json file corresponding to the "
           "pre-trained BERT model. This specifies the model architecture.")
    define("string", "input_file", None, "Input TF example files (can be a glob or comma "
           "separated).")
    define("string", "output_dir", None, "The output directory where the model checkpoints "
           "will be written.")
    define("string", "init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
           "BERT model).")
    define("integer", "max_seq_length", 128, "The maximum total input sequence length after "
           "WordPiece tokenization. Sequences longer than this will be truncated, and "
           "sequences shorter than this will be padded. Must match data generation.")
    define("integer", "max_predictions_per_seq", 20, "Maximum number of masked LM predictions "
           "per sequence. Must match data generation.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to run eval on the dev set.")
    define("integer", "train_batch_size", 32, "Total batch size for training.")
    define("integer", "eval_batch_size", 8, "Total batch size for eval.")
    define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
    define("integer", "num_train_steps", 100000, "Number of training steps.")
    define("integer", "num_warmup_steps", 10000, "Number of warmup steps.")
    define("integer", "max_eval_steps", 100, "Maximum number of eval steps.")
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)
    define("integer", "num_accumulation_steps", 1, "Gradient accumulation: micro-batches per "
           "replica and update (the global batch stays --train_batch_size).")
    define("enum", "optimizer", "adamw", "adamw: the original AdamWeightDecay; lamb: LAMB "
           "for large batches.", enum_values=list(OPTIMIZERS))
    define("bool", "corrected_lr_schedule", False, "Use schedule(t) at update t instead of "
           "the original's schedule(t+1) (google-research/bert #1050).")
    define("enum", "gradient_reduction", "auto", "auto: clip_then_sum on TPU (the original), "
           "mean_then_clip elsewhere.",
           enum_values=["auto"] + list(GRADIENT_REDUCTIONS))
    define("bool", "deterministic", False, "Records in file order, no shuffling, fixed seeds, "
           "TensorFlow's op determinism, the original's op-by-op optimizer rounding (no "
           "--xla_optimizer, no --xla_kernels, in training and evaluation).")
    define("integer", "random_seed", 12345, "Seed of the initialisation, dropout and shuffles.")
    define("integer", "num_cpu_devices", 0, "Split the CPU into this many logical devices "
           "(for --strategy=mirrored on a machine without accelerators; 0 = off).")


def run(fv) -> Optional[Dict[str, float]]:
    """The whole job for parsed flags ``fv`` (``bert_tasks.pretraining.pretrain``).

    Args:
        fv: the parsed flag values.

    Returns:
        The eval results (None without ``--do_eval``).
    """
    from bert_tasks import pretraining

    return pretraining.pretrain(fv)


# absl's main(argv), and the console command / ``python run_pretraining.py``
main, entry = runner.entry_points(TOOL, define_flags, run, required=REQUIRED)
